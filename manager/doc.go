// Package manager obtains and renews the certificate of every volume a driver publishes.
//
// For each managed volume the Manager runs one renewal loop:
//
//  1. Wait until due: the volume's NextIssuanceTime is nil, zero or not after Clock.Now().
//     While not due a volume costs nothing: no storage reads and no ticks, only one timer on the
//     injected clock. Requeue, UnmanageVolume and Stop end the wait early. After a success,
//     the publish's own included, the volume is not attempted again for one second on the
//     injected clock, even if the new certificate is already due and even after a Requeue.
//  2. Attempt one issuance, with a 60 s deadline on the injected clock. Attempts for different
//     volumes run concurrently; attempts for one volume never overlap.
//  3. Classify the outcome. Success resets both backoffs. ErrNotReadyToRequest (the driver's
//     ReadyToRequest said "not yet") is an expected wait: the next step of the fast gate backoff,
//     the renewal backoff reset, logged at V(4), counted as gate-pending rather than as an error.
//     Any other error is logged, counted in issue_errors_total, waits the next step of the
//     renewal backoff and resets the gate backoff.
//  4. Wait the delay on the injected clock. Requeue cuts a gate-pending wait short, and so does
//     the gate itself, asked again every GatePollInterval; nothing cuts an issuance-error wait
//     short, which protects signers and the apiserver.
//
// One attempt follows upstream csi-lib's order: delete CertificateRequests beyond
// MaxRequestsPerVolume (oldest first); read the metadata; take the newest request if it is
// resumable (no Ready condition, or Ready reason Pending, Issued or empty) and wait on it when
// its private key is in memory, or delete it when not; ask ReadyToRequest; generate a key and a
// CSR, create the CertificateRequest and wait for the informer to report it issued, denied or
// failed; then call WriteKeypair. Private keys of pending requests live in memory, independent
// of the managed set: a publish that hits kubelet's deadline leaves its request and key, and
// kubelet's retry resumes the same request instead of creating another.
//
// ManageVolume, ManageVolumeImmediate and UnmanageVolume return what upstream's return, and
// block as little: UnmanageVolume waits only for a WriteKeypair already running, after which
// nothing writes for the volume. Stop waits for the Manager's own goroutines but never for a
// driver-supplied function; a goroutine inside one exits, touching nothing, when it returns.
//
// Admission bounds what one node sends the apiserver and the signers: at most
// Options.MaxConcurrentIssuances attempts (default 128) are past the readiness gate and
// unfinished at once, and Options.IssuanceRateLimit (off by default) paces CertificateRequest
// creates with a token bucket on the injected clock. Attempts wait their turn first come, first
// served; a wait is not a failure (no backoff step, no error metric), a background attempt's
// 60 s deadline starts only once it is admitted, a publish waits within its own deadline, and
// unmanaging or Stop ends the wait at once. Resuming a pending request never waits.
// Options.RenewalJitter spreads renewals over a window before the default renewal point.
//
// With a store that implements storage.PendingKeyStore, the key of a pending request is also
// persisted beside the volume's metadata, so a restarted manager resumes the request too. With
// one that implements storage.SweptKeyStore, the key of a volume the start-up sweep removed
// (its first publish was in flight when the driver stopped) waits, for five minutes after
// start-up, for kubelet to publish that volume again, and that publish resumes the request.
//
// With Options.EventRecorder set, the Manager records Kubernetes Events on each volume's Pod:
// certificate issued or renewed, an attempt failed (with the next attempt's time), the gate
// pending too long, renewal overdue, certificate expired. Overdue and expired come from timers
// on the injected clock, armed only when events or the state gauge are on.
//
// The Manager watches the node's CertificateRequests through one informer, selected by the
// node-hash label and indexed by the volume-hash label; it never polls the apiserver.
//
// Every timer that decides when to retry, renew or give up comes from Options.Clock, so a test
// drives the whole loop by stepping a fake clock.
package manager
