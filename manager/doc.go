// Package manager obtains and renews the certificate of every volume a driver publishes.
//
// For each managed volume the Manager runs one renewal loop:
//
//  1. Wait until due. One place decides it on every path (renewalPoint and untilDue): the
//     NextIssuanceTime the driver persisted, when it is set and not zero, whether it is earlier
//     or later than the library's default (with RenewalJitter, a draw in the window before it);
//     the default handed to WriteKeypair when the driver persisted none after a success; at
//     once when the volume has no certificate. While not due a volume costs nothing: no storage
//     reads and no ticks, only one timer on the injected clock. Requeue, UnmanageVolume and Stop
//     end the wait early. After a success, the publish's own included, the volume is not
//     attempted again for one second on the injected clock, even if the new certificate is
//     already due and even after a Requeue.
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
// One attempt (attempt.issue): delete CertificateRequests beyond MaxRequestsPerVolume (oldest
// first); read the metadata; take the newest request if it is resumable (no Ready condition, or
// Ready reason Pending, Issued or empty) and wait on it when its private key is held, or delete
// it when not; ask ReadyToRequest; wait for admission; generate a key and a CSR, create the
// CertificateRequest and wait for the informer to report it issued, denied or failed; then call
// WriteKeypair. Private keys of pending requests are held independently of the managed set: a
// publish that hits kubelet's deadline leaves its request and key, and kubelet's retry resumes
// the same request instead of creating another. A publish (ManageVolumeForPublish) reads the
// metadata once and asks the gate once, and hands both answers to its attempt.
//
// ManageVolume, ManageVolumeImmediate and UnmanageVolume return what drivers' tests expect (see
// each method), and block as little: UnmanageVolume waits only for a WriteKeypair already
// running, after which nothing writes for the volume. Stop waits for the Manager's own
// goroutines but never for a driver-supplied function; a goroutine inside one exits, touching
// nothing, when it returns.
//
// Admission (Options.MaxConcurrentIssuances and Options.IssuanceRateLimit, whose field docs
// give the rules) bounds what one node sends the apiserver and the signers.
// Options.RenewalJitter spreads renewals over a window before the default renewal point.
//
// With a store that implements storage.PendingKeyStore, the key of a pending request is also
// persisted beside the volume's metadata, so a restarted manager resumes the request too. With
// one that implements storage.SweptKeyStore, the key of a volume the start-up sweep removed
// (its first publish was in flight when the driver stopped) waits, for five minutes after
// start-up, for kubelet to publish that volume again, and that publish resumes the request.
//
// With Options.PodCondition set, the Manager keeps a condition on each pod with managed
// volumes, True while all of them hold a valid certificate, for the pod's readiness gates.
//
// With Options.EventRecorder set, the Manager records Kubernetes Events on each volume's Pod:
// certificate issued or renewed, an attempt failed (with the next attempt's time), the gate
// pending too long, renewal overdue, certificate expired. Overdue and expired come from timers
// on the injected clock, armed only when events or the state gauge are on.
//
// Every timer that decides when to retry, renew or give up comes from Options.Clock, so a test
// drives the whole loop by stepping a fake clock.
//
// # Who owns what
//
// Each piece of state has one owner, with its own lock; the Manager points to them:
//
//	Manager ── lifetime (the context Stop ends; the goroutines Stop waits for)
//	  ├─ registry    the managed volumes by ID and by pod            (the Manager's one mutex)
//	  │    └─ volume  one registration: its context, Requeue, last write, write fence
//	  │         └─ loop  wait until due → attempt → wait by outcome   (state on its goroutine)
//	  └─ issuer      (embedded) the options with the driver's functions and the clock, and
//	       │         what every attempt uses:
//	       ├─ requests    the informer on the node's CertificateRequests: find, build, create,
//	       │              wait for, delete; creation order; the waiters its events wake
//	       ├─ keys        pendingKeys: private keys of submitted requests, in memory and on
//	       │              disk (the only writer of key files); keys the start-up sweep kept
//	       ├─ admission   slots and the rate-limit bucket, first come, first served
//	       └─ board       each volume's state for the gauge, its Events, overdue/expiry timers
//	            └─ podConditions  with Options.PodCondition: each pod's volumes, what its
//	                              condition should be and what it carries; a queue that writes it
//
// What calls what: the public methods register a volume and start its loop; a loop or a
// caller runs an attempt on the issuer; the attempt asks requests, keys and admission, and
// tells the board what became of it (recordOutcome, certificateWritten). A loop reaches the
// registry only through registrations (noting a volume's metadata, dropping a volume whose
// metadata is gone). The informer's delete events reach keys through requests
// (requestDeleted). Owners never call the Manager, except the timer that ends the kept keys'
// grace period (expireSweptKeys), which registers with Stop.
package manager
