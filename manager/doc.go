/*
Copyright 2026 The csi-lib fork authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Package manager obtains and renews the certificate of every volume a driver publishes: it
// generates a key, creates a cert-manager CertificateRequest, waits for it to be signed, hands the
// key pair to the driver's WriteKeypair and renews it before it expires.
//
// # Who owns what, from the top down
//
// Each piece of state has one owner, with its own lock. The Manager wires the owners together,
// serves the public API, runs the volumes' loops and their attempts, and ends registrations
// (Manager.end, the one way out of every registration); its methods are in resume.go,
// manager.go, loop.go, attempt.go and request.go. Every other file uses only files listed after
// it, and the owners call back into the Manager only through functions it hands them: the work queue runs a loop's turn, series
// deletes a volume's series, apihealth ends an outage's waits, podcondition reports a pod gone,
// and pendingkeys lets a swept key's grace period end.
//
//	resume.go       a restart: the stored volumes and the kept keys the previous process left
//	manager.go      the public API; wires the owners; the end of a registration; Stop
//	loop.go         the volumes' loops, one turn at a time on the work queue: wait until due →
//	                attempt → wait by the outcome's class; deadline.go bounds a background attempt
//	attempt.go      one attempt's steps, top to bottom, handing each to the owners below; a
//	                caller's attempt, which runs before the volume's loop starts
//	request.go      a volume's CertificateRequest, built from the driver's bundle with its origin
//	                annotations
//	status.go       what is shown of each volume, and the one place attempts report to: the
//	                metrics, its state (see the diagram below) and the count of volumes in each
//	                state, the Events on the pod (their reasons in events.go), its share of its
//	                pod's condition, and the timers that notice its certificate overdue, expired
//	                or no longer valid
//	registry.go     which volumes are managed, by ID and by pod, and the pods terminating
//	permissions.go  ErrPermissionDenied, and the rules the options need, which the start-up
//	                access check asks for
//	volume.go       one registration, without a lock: its pod, its flags, its last write, the
//	                attempt in flight and the fence that UnmanageVolume closes after a running
//	                WriteKeypair
//	series.go       the metric series of departed volumes, deleted after a retention
//	due.go          when a volume is due: the one place that decides it
//	options.go      Options and their defaults, and the pod condition's reasons
//	errors.go       the sentinels
//
// The owners that know nothing of volumes are packages of their own, under internal/:
//
//	certrequests    the node's CertificateRequests: the informer, and finding, creating,
//	                settling, waiting for and deleting a volume's requests; it tells apihealth
//	                of its failed calls and of the informer's watches
//	pendingkeys     the private keys of submitted requests, in memory and beside the metadata,
//	                and those the start-up sweep kept
//	workqueue       the work queue the loops turn on: keys wait on timers of the injected
//	                clock, become ready in one FIFO, and are processed by workers started on
//	                demand, never two at once for one key; it keeps a pending Requeue
//	admission       the node-wide limits: slots and a rate bucket, first come first served
//	apihealth       what is known of the apiserver's health, the one owner of it: whether the
//	                informer's watch is suspect (a wait then reads its request past the cache),
//	                and an outage (a renewal attempt failed for want of the apiserver, which
//	                makes the watch suspect too), probed until it answers; it tells the loops
//	                whose attempts failed in an outage its end
//	podcondition    writes each pod's condition for its readiness gates, from a queue
//	accesscheck     the start-up access check (SelfSubjectAccessReview)
//	origin          the origin annotations' keys, and the pod's service account UID from its tokens
//	apicall         what a refused or unanswered call to the apiserver means
//	lifetime        the goroutines Stop waits for (the queue's workers among them), and the
//	                context it ends
//	clockutil       timers on the injected clock
//
// # A volume's status
//
// What is shown of a volume (its state in the certmanager_csi_volumes gauge, its share of its
// pod's condition) is a volumeStatus, moved only by volumeStatus.apply. The worst condition wins:
// expired, overdue, failing, gate_pending, issued, pending. A key pair written clears all but
// the certificate:
//
//	             gate "not yet"                  attempt failed
//	pending ─────────────────────► gate_pending ◄──────────────► failing
//	   │  └──────────────────── attempt failed ─────────────────────┘
//	   │                                 │  (gate_pending and failing are each entered from
//	   │ certificate written             │  the other, from pending and from issued)
//	   ▼                                 ▼ certificate written
//	issued ◄─────────────── certificate written (from any state)
//	   │ renewal point + a quarter of the time left
//	   ▼
//	overdue ──── NotAfter ────► expired
//
// # A volume's life
//
// Where a registered volume is in its life is where its loop is (loop.go: a turn on a worker of
// the queue, then one wait that the queue keeps), or, before the loop starts, the publish's
// attempt on the caller's goroutine:
//
//	publish ─► requesting ─► pending ─► issued ─(due)─► renewing ─► pending ─► issued …
//	  │  gate "not yet"       (attempt.go: gate, admission, key, create; then wait)
//	  ▼
//	waiting for the gate ─(Requeue, RequeuePod, the gate's poll, its backoff)─► requesting
//	failed ─(renewal backoff; the end of an outage)─► requesting
//	pod terminating ─► no attempt; off the queue until unmanaged ─► gone
//	UnmanageVolume, Stop, metadata gone ─► gone (from any state; UnmanageVolume waits for a
//	                                      WriteKeypair already running, Stop does not)
//
// The waits are the loop's waitKind (until due, gate pending, after an error, after an outage),
// each with what may end it early, kept by the queue in the volume's loopState with its two
// backoffs; requesting, pending and renewing are one issueAttempt.
//
// # The work queue
//
// The loops share one queue (internal/workqueue; its doc names, with figures, what client-go's
// rate-limited work queue cannot do here): a key is a volume's registration, a key is
// never processed twice at once (a publish's attempt runs before the key is added), its backoffs
// and wait are the queue's, and each wait is one timer of Options.Clock that Requeue, the gate's
// poll or the end of an outage ends early, each only for the wait it concerns. Workers start
// when keys are ready and leave when none is; their number is not bounded beyond that, so a
// resume or an attempt waiting for its signature never holds up another volume's turn, and
// admission (MaxConcurrentIssuances, IssuanceRateLimit) stays the one node-wide limit.
//
// When a volume is due is decided in one place, due.go: the NextIssuanceTime the driver stored
// when it stored one (earlier or later than the library's default), else the default handed to
// WriteKeypair after a success in this registration, else at once. The loop asks it on every path,
// and tells the status the point it holds a certificate to, for the overdue and expiry timers.
//
// # A publish
//
// The node server registers the volume's metadata and reads it back once, then calls
// ManageVolumeForPublish with what it read:
//
//	node server ─ metadata ─→ Manager: the volume is managed and not due → done
//	                            │ asks the driver's readiness gate, once
//	                            │   closed: an error matching ErrNotReadyToRequest (or, with
//	                            │   ContinueOnNotReady, the volume is handed to its loop)
//	                            ↓ open: registers the volume, notes its pod
//	                          attempt: one, on the caller's goroutine, under its deadline
//	                            │ requests: the volume's requests; a certrequests.Resumable one whose key is
//	                            │   held is waited for instead of creating another
//	                            │ admission: a slot, and a token of the rate bucket
//	                            │ the driver: key, request, CSR, client
//	                            │ keys: the key is held before the request exists
//	                            │ requests: create, then wait for the informer to see it signed
//	                            │ due: the renewal point handed to WriteKeypair
//	                            │ the driver: WriteKeypair, behind the volume's fence
//	                            ↓ status: the certificate is shown, the Issued event recorded
//	                          the volume's loop starts, and waits until due
//
// A publish's failed attempt ends the volume's registration (ManageVolumeImmediate's leaves it
// registered without a loop, as upstream, for its caller to unmanage), and kubelet retries the
// publish, which registers the volume again and resumes the request still pending if its key is
// held. A
// create whose outcome is unknown (the connection broke after it was sent) keeps its key and the
// request as sent; it is settled, never replaced: found in the cache or by a read, and adopted
// if it is the one sent, else created again under the same name. A create that succeeded is
// held the same way until the informer's cache shows the request, so a retry after a deadline
// that a lagging cache caused reads the request instead of creating another. A pod that terminates
// (PodTerminating, the pod condition's reads, or the request deleted by the garbage collector)
// ends the publish at once. A wait whose informer watch is suspect (its stream ended unasked, a
// new one could not be opened, or a call found the apiserver unreachable; apihealth knows which)
// reads its request from the apiserver until a watch is open again.
//
// # Permissions
//
// The manager needs no verb beyond upstream csi-lib's on CertificateRequests: list and watch (the
// informer), delete (stale requests) and create, which ClientForMetadata may hand to each pod's
// own client. A read by name (settling, a suspect watch) is a list that selects the name, never a
// get. A call the apiserver refuses with 403 Forbidden matches ErrPermissionDenied and names the
// verb, the resource, the namespace and the account; NewManager asks once, with a
// SelfSubjectAccessReview per verb, for every permission its options need, and logs each rule
// missing, but never refuses to start for it, nor waits for an informer whose list or watch is
// refused.
//
// # The operator's switches: CSILIBDEBUG
//
// Each default-on behaviour that upstream csi-lib v0.12.0 lacks and that has a cost has a Go
// option that turns it off, and a setting of the environment variable CSILIBDEBUG with which
// an operator turns it off on the DaemonSet without a rebuild, in the manner of Go's GODEBUG:
// issuancelimit (MaxConcurrentIssuances), originannotations, accesscheck, outageprobe and
// watchfallbackreads (the Disable options), and storage's startupsweep; for example
// CSILIBDEBUG=outageprobe=0,watchfallbackreads=0. NewManager reads the variable once, after
// upstream's checks of the options, applies it where the driver's code left the option at its
// zero value (the driver's code wins), logs the value each setting took, and fails on anything
// it does not know. docs/csilibdebug.md lists the settings.
//
// # A renewal
//
// The volume waits on the queue, on one timer of the injected clock, until due; a volume that is
// not due costs that timer and its loop's state, and nothing else: no goroutine, no reads, no
// ticks. When it fires, the loop reads the metadata and, if the volume is due, makes an attempt
// as above on what it read, under a deadline of its own on the injected clock, which stops
// while the attempt waits for admission and is armed again in full once it is admitted. Its outcome picks the next wait:
//
//	success                  both backoffs reset; wait until due again (never at once, even if
//	                         the new certificate is already due)
//	ErrNotReadyToRequest     the gate's backoff; Requeue, RequeuePod or the gate itself, asked
//	                         again while the loop waits, end the wait early. A refusal in the
//	                         loop's first turn (a volume due when managed, a publish's handover)
//	                         waits the first step without taking it: upstream asks first one
//	                         1 s tick after the volume is managed, and steps from there
//	any other error          the renewal backoff; nothing ends this wait early, which protects
//	                         the signers and the apiserver, except the end of an outage when
//	                         the attempt could not reach the apiserver (apihealth probes it)
//
// A Requeue that comes during a turn is answered by the turn's attempt if it comes before the
// attempt starts; otherwise it ends the wait the turn decides, if a Requeue ends that wait. So a
// Requeue adds at most one gate ask, and never changes the gate backoff's steps: the refusals
// since the last success or error wait the steps in order, each step once, except the first
// step, waited twice after a first turn's refusal; a wait a Requeue ended early took its step
// all the same, and the next refusal waits the next one.
//
// The status is told each outcome: the counters, the state, an Event, and the overdue and expiry
// timers it arms from the renewal point.
//
// # A restart
//
// NewManager starts the informer and waits for its cache (unless the apiserver refuses its list
// or watch: see Permissions), loads the keys the store's start-up
// sweep kept, if the store keeps them (a first publish was in flight when the driver stopped, and
// kubelet's next publish of that volume resumes its request), and registers every stored
// volume whose metadata says a publish succeeded, with a loop that starts from the metadata it
// read: a volume whose certificate is not due waits for its renewal point without contacting the
// apiserver or the signer. A request left pending by the previous process is resumed when the
// store persisted its key; otherwise it is deleted and a new one created. Volumes that were never
// mounted are not resumed (storage removes them at start-up).
//
// # Lock order
//
// Each owner has one mutex. It guards that owner's fields and nothing else. A volume
// (managedVolume) has none: its flags, pod, logger, last write and attempt in flight are atomic
// words, written in an order that volume.go's doc gives, so a renewal takes no lock of its
// volume.
//
//	registry      registry.mu: the registered volumes, by ID and by pod, the terminating pods,
//	              stopped
//	status        status.mu: what is shown of each volume, the counts by state, the timers
//	podcondition  podcondition.Writer.mu: each pod's volumes, their validity, what it carries
//	series        seriesRetention.mu: the pending deletions of departed volumes' series
//	queue         workqueue.Queue.mu: every key's place, state and timer; the worker counts
//	admission     admission.Limits.mu: the slots in use, the waiters, the token timer
//	apihealth     apihealth.Health.mu: whether the informer's watch is suspect, whether a probe
//	              runs, and the current outage's ID
//	pendingkeys   pendingkeys.Keys.mu: the held keys and those the sweep kept; a lock per volume
//	              (taken before mu) orders that volume's key file reads and writes
//	certrequests  certrequests.View.mu: the creation order, the waiters, the informer's refusals
//
// lifetime (the goroutines Stop waits for) has no lock: its count is one atomic word, so a
// worker or a probe may be tracked under any lock.
//
// No lock is held while another owner's method is called, except in this order:
//
//	registry -> volume      the registry gives a volume its pod, closes it, or tells it its
//	                        pod terminates; the volume then ends its attempt in flight (its
//	                        context's cancel)
//	status -> podcondition  the status sets the volume's share of its pod's condition
//	podcondition -> its own queue (client-go's): SetVolume queues the pod
//	status, series, queue, admission, pendingkeys -> clock: they arm and stop timers
//	queue -> loop           Wake, WakeAll and a finished turn ask the loop whether a wake ends
//	                        the wait (requeueEnds, the outage's match): pure functions of the
//	                        state handed to them, which take no lock
//	admission -> rate       x/time/rate's limiter, with a lock of its own that calls nothing
//
// Three per-volume locks of other packages nest, in this order only: the node server's lock of
// the volume (package driver; held for a whole publish or unpublish, UnmanageVolume's wait for a
// running WriteKeypair included), then pendingkeys' file lock of the volume, then the store's
// own lock of the volume (storage.Filesystem), under which the store calls nothing.
//
// The registry and the status never hold each other's lock: a registration is added to the
// registry, then shown; it is closed as the registry removes it, then no longer shown, and the
// status shows no closed volume. Outside the library, under a lock: the status sets the state
// gauge (Metrics), admission counts its waiters (Metrics), and pendingkeys calls the driver's key
// store under a volume's file lock, never under its mu, so that the informer's add and update
// handlers never wait for a key file being written. A delete event removes the deleted
// request's key file, if its key is still held, on the informer's goroutine: the events after
// it wait for that removal, as events of one informer are handled one at a time.
//
// The clock and the contexts are last of all. certrequests calls nothing under its lock, and
// tells apihealth of a failed call or a watch without holding it. Callbacks out of an owner (an
// outage ending, a pod gone, a timer firing) run without its lock, as does the closing of the
// channel that tells the waits the watch became suspect, and a timer's function runs on its own
// goroutine, never under the fake clock's lock.
//
// # Blocking and the clock
//
// ManageVolume, ManageVolumeImmediate and UnmanageVolume return what drivers' tests expect (see
// each method) and block as little as they can: UnmanageVolume waits only for a WriteKeypair
// already running. Stop waits for the Manager's own goroutines, and for a store call one of
// them is making, but never for the driver's functions (the gate, the key, request and client
// generators, WriteKeypair); a goroutine inside one exits when it returns, doing nothing more
// for its volume. Every timer that
// decides when to retry, renew or give up comes from Options.Clock, so a test drives the whole
// manager by stepping a fake clock.
package manager
