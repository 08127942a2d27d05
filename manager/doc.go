// Package manager obtains and renews the certificate of every volume a driver publishes.
//
// For each managed volume the Manager runs one renewal loop:
//
//  1. Wait until due: the volume's NextIssuanceTime is nil, zero or not after Clock.Now().
//     While not due a volume costs nothing: no storage reads and no ticks, only one timer on the
//     injected clock. Requeue, UnmanageVolume and Stop end the wait early.
//  2. Attempt one issuance, with a 60 s deadline on the injected clock. Attempts for different
//     volumes run concurrently; attempts for one volume never overlap.
//  3. Classify the outcome. Success resets both backoffs. ErrNotReadyToRequest (the driver's
//     ReadyToRequest said "not yet") is an expected wait: the next step of the fast gate backoff,
//     the renewal backoff reset, logged at V(4), counted as gate-pending rather than as an error.
//     Any other error is logged, counted in issue_errors_total, waits the next step of the
//     renewal backoff and resets the gate backoff.
//  4. Wait the delay on the injected clock. Requeue cuts a gate-pending wait short; it never cuts
//     an issuance-error wait short, which protects signers and the apiserver.
//
// One attempt deletes CertificateRequests beyond MaxRequestsPerVolume (oldest first), resumes
// the newest request if it is still pending and its private key is still in memory, asks
// ReadyToRequest, generates a key and a CSR, creates the CertificateRequest and waits for the
// informer to report it issued, denied or failed, then calls WriteKeypair. Private keys of
// pending requests live only in memory.
//
// The Manager watches the node's CertificateRequests through one informer, selected by the
// node-hash label and indexed by the volume-hash label; it never polls the apiserver.
//
// Every timer that decides when to retry, renew or give up comes from Options.Clock, so a test
// drives the whole loop by stepping a fake clock. Stop ends every goroutine the Manager started.
package manager
