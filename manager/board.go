package manager

import (
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/cert-manager/csi-lib/internal/certs"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/metrics"
)

// Reasons of the Kubernetes Events the manager records on a volume's Pod when
// Options.EventRecorder is set. They are stable: alerts and dashboards may match on them.
const (
	// EventReasonCertificateIssued (Normal): a volume's first certificate was written, with the
	// request's name and the time from publish to certificate.
	EventReasonCertificateIssued = "CertificateIssued"
	// EventReasonCertificateRenewed (Normal): a renewal was written, with the new expiry.
	EventReasonCertificateRenewed = "CertificateRenewed"
	// EventReasonCertificateRequestFailed (Warning): an attempt failed with an issuance error
	// (denied, failed, refused by the apiserver, timed out), with the reason and when the next
	// attempt is due. One per failed attempt, so one per backoff step in a long outage.
	EventReasonCertificateRequestFailed = "CertificateRequestFailed"
	// EventReasonReadinessGatePending (Normal): the readiness gate has said "not yet" for longer
	// than GatePendingEventAfter, with the gate's reason; once per wait.
	EventReasonReadinessGatePending = "ReadinessGatePending"
	// EventReasonCertificateRenewalOverdue (Warning): the volume is past its renewal time by
	// more than a quarter of the time from the renewal time to expiry, not yet renewed.
	EventReasonCertificateRenewalOverdue = "CertificateRenewalOverdue"
	// EventReasonCertificateExpired (Warning): the certificate in the volume is past NotAfter.
	EventReasonCertificateExpired = "CertificateExpired"
)

// GatePendingEventAfter is how long the readiness gate must have said "not yet" before a
// ReadinessGatePending event is recorded (at the first gate check after that).
const GatePendingEventAfter = 10 * time.Second

// board is what the manager shows of its volumes: each volume's state in the
// certmanager_csi_volumes gauge, the Events on its Pod, and the timers that notice a
// certificate overdue or expired. The timers are armed only when someone listens (events or the
// state gauge), so by default a volume has none.
type board struct {
	clock    clock.Clock
	recorder record.EventRecorder // nil: no events
	metrics  *metrics.Metrics
	nodeHash string
	watching bool
	// notAfterOf is the expiry of a volume's newest issued certificate (from the informer's
	// cache), for a volume resumed after a restart.
	notAfterOf func(volumeID string) time.Time
	// conditions keeps the pods' PodCondition; nil without one.
	conditions *podConditions

	mu     sync.Mutex
	counts map[string]int // listed volumes by state
}

// shownVolume is what the board keeps of one volume. Guarded by board.mu.
type shownVolume struct {
	// listed is true from add to remove; removed once remove ran (a late add does nothing).
	listed, removed bool
	pod             *corev1.ObjectReference // for events; nil without pod name, namespace and UID
	status          volumeStatus
	// watch exists only when the board watches certificates (see watching).
	watch *certificateWatch
}

func newBoard(o Options, nodeHash string, notAfterOf func(string) time.Time, conditions *podConditions) *board {
	return &board{
		clock:      o.Clock,
		recorder:   o.EventRecorder,
		metrics:    o.Metrics,
		nodeHash:   nodeHash,
		watching:   o.EventRecorder != nil || o.Metrics.VolumeStateGaugeEnabled() || conditions != nil,
		notAfterOf: notAfterOf,
		conditions: conditions,
		counts:     make(map[string]int),
	}
}

// outcome is the class of a volume's last attempt, for its state.
type outcome int

const (
	outcomeNone outcome = iota
	outcomeGatePending
	outcomeFailed
)

// volumeStatus is what a volume's state in certmanager_csi_volumes is derived from.
type volumeStatus struct {
	hasCertificate   bool
	last             outcome
	overdue, expired bool
}

// state names the volume's state (metrics.VolumeStates); the worst condition wins.
func (s volumeStatus) state() string {
	switch {
	case s.expired:
		return "expired"
	case s.overdue:
		return "overdue"
	case s.last == outcomeFailed:
		return "failing"
	case s.last == outcomeGatePending:
		return "gate_pending"
	case s.hasCertificate:
		return "issued"
	default:
		return "pending"
	}
}

// certificateWatch is what the board knows of the certificate in a volume, and the timers that
// fire when it becomes overdue and when it expires.
type certificateWatch struct {
	notAfter time.Time
	// expiryUnknown: the volume has a certificate from before a restart whose expiry could not
	// be learned (its request is gone); it counts as valid.
	expiryUnknown bool
	renewAt       time.Time // the renewal time the timers were armed for
	generation    uint64    // changes with every certificate written; stale timers do nothing
	stops         []func() bool
	// gatePendingSince is when the gate started saying "not yet"; zero when it is not.
	gatePendingSince time.Time
	gateEventSent    bool
}

// add lists a registered volume in the state counts.
func (b *board) add(v *volume) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if v.shown.removed || v.shown.listed {
		return
	}
	v.shown.listed = true
	b.counts[v.shown.status.state()]++
	b.publishStatesLocked()
}

// remove takes an unregistered volume off the counts and stops its timers.
func (b *board) remove(v *volume) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v.shown.removed = true
	if v.shown.listed {
		v.shown.listed = false
		b.counts[v.shown.status.state()]--
		b.publishStatesLocked()
		if b.conditions != nil && v.shown.pod != nil {
			b.conditions.removeVolume(v.shown.pod, v.id)
		}
	}
	b.stopWatchLocked(v)
}

// stopWatches stops the volumes' timers; their counts stay.
func (b *board) stopWatches(vols []*volume) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, v := range vols {
		b.stopWatchLocked(v)
	}
}

// noteMetadata learns the volume's Pod from its metadata (once) and whether it has a
// certificate.
func (b *board) noteMetadata(v *volume, meta metadata.Metadata) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !v.shown.listed {
		return
	}
	if hasCertificate(meta) && !v.shown.status.hasCertificate {
		b.updateStatusLocked(v, func(s *volumeStatus) { s.hasCertificate = true })
	}
	if v.shown.pod == nil {
		v.shown.pod = podReference(meta)
	}
	b.showConditionLocked(v)
}

// updateStatusLocked changes a volume's status and keeps the state counts and the gauge in
// step. b.mu is held.
func (b *board) updateStatusLocked(v *volume, change func(*volumeStatus)) {
	before := v.shown.status.state()
	change(&v.shown.status)
	if after := v.shown.status.state(); after != before && v.shown.listed {
		b.counts[before]--
		b.counts[after]++
		b.publishStatesLocked()
	}
	b.showConditionLocked(v)
}

// showConditionLocked tells the pod conditions what the volume contributes now. b.mu is held.
func (b *board) showConditionLocked(v *volume) {
	if b.conditions == nil || !v.shown.listed || v.shown.pod == nil {
		return
	}
	b.conditions.setVolume(v.shown.pod, v.id, b.validityLocked(v), v.resumed)
}

// validityLocked is what the volume contributes to its pod's condition at this instant: a
// certificate within the expiry margin of its NotAfter counts as expired, whether or not a timer
// has fired yet. b.conditions is set and b.mu is held.
func (b *board) validityLocked(v *volume) volumeValidity {
	s, w := v.shown.status, v.shown.watch
	switch {
	case s.expired:
		return PodConditionReasonExpired
	case s.hasCertificate && w != nil && !w.notAfter.IsZero():
		if !w.notAfter.Add(-b.conditions.margin).After(b.clock.Now()) {
			return PodConditionReasonExpired
		}
		return ""
	case s.hasCertificate && w != nil && w.expiryUnknown:
		return ""
	case s.hasCertificate:
		return validityUnknown
	case s.last == outcomeFailed:
		return PodConditionReasonFailing
	case s.last == outcomeGatePending:
		return PodConditionReasonGatePending
	default:
		return PodConditionReasonNotIssued
	}
}

// publishStates sets the state gauge from the counts.
func (b *board) publishStates() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.publishStatesLocked()
}

func (b *board) publishStatesLocked() {
	if !b.metrics.VolumeStateGaugeEnabled() {
		return
	}
	counts := make(map[string]int, len(metrics.VolumeStates))
	for k, n := range b.counts {
		counts[k] = n
	}
	b.metrics.SetVolumeStates(b.nodeHash, counts)
}

// podReference names the volume's Pod from its volume context; nil when name, namespace or UID
// is missing (no event is recorded then).
func podReference(meta metadata.Metadata) *corev1.ObjectReference {
	name := meta.VolumeContext[metadata.PodNameVolumeContextKey]
	ns := meta.VolumeContext[metadata.PodNamespaceVolumeContextKey]
	uid := meta.VolumeContext[metadata.PodUIDVolumeContextKey]
	if name == "" || ns == "" || uid == "" {
		return nil
	}
	return &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Name: name, Namespace: ns, UID: types.UID(uid)}
}

// recordEvent records an event on the volume's Pod, if there is a recorder and a Pod. Messages
// are built from the manager's own texts: never a key, a token or a CSR.
func (b *board) recordEvent(v *volume, eventType, reason, format string, args ...any) {
	if b.recorder == nil {
		return
	}
	b.mu.Lock()
	ref := v.shown.pod
	b.mu.Unlock()
	if ref == nil {
		return
	}
	b.recorder.Eventf(ref, eventType, reason, format, args...)
}

// certificateWritten shows a written key pair: the volume's status, the certificate's expiry
// for the watch, and the Issued or Renewed event.
func (b *board) certificateWritten(v *volume, namespace, name string, chain []byte, first bool) {
	var notAfter time.Time
	if leaf, err := certs.ParseLeaf(chain); err == nil {
		notAfter = leaf.NotAfter
	}
	b.mu.Lock()
	if w := b.watchLocked(v); w != nil {
		w.notAfter, w.expiryUnknown = notAfter, notAfter.IsZero()
		w.generation++
		b.stopWatchLocked(v)
		w.gatePendingSince, w.gateEventSent = time.Time{}, false
	}
	b.updateStatusLocked(v, func(s *volumeStatus) { *s = volumeStatus{hasCertificate: true} })
	b.mu.Unlock()
	if first {
		b.recordEvent(v, corev1.EventTypeNormal, EventReasonCertificateIssued,
			"Certificate issued by CertificateRequest %s/%s, %s after publish; valid until %s",
			namespace, name, b.clock.Since(v.managedAt).Round(time.Millisecond), notAfter.UTC().Format(time.RFC3339))
		return
	}
	b.recordEvent(v, corev1.EventTypeNormal, EventReasonCertificateRenewed,
		"Certificate renewed by CertificateRequest %s/%s; valid until %s", namespace, name, notAfter.UTC().Format(time.RFC3339))
}

// attemptFailed shows a failed attempt: the status, and a CertificateRequestFailed event
// saying when the next attempt is due.
func (b *board) attemptFailed(v *volume, err error, next string) {
	b.mu.Lock()
	b.updateStatusLocked(v, func(s *volumeStatus) { s.last = outcomeFailed })
	b.mu.Unlock()
	b.recordEvent(v, corev1.EventTypeWarning, EventReasonCertificateRequestFailed,
		"Issuing the certificate failed: %v; next attempt %s", err, next)
}

// gatePending shows that the gate said "not yet", and records the ReadinessGatePending event
// once the gate has said so for GatePendingEventAfter.
func (b *board) gatePending(v *volume, reason string) {
	now := b.clock.Now()
	b.mu.Lock()
	b.updateStatusLocked(v, func(s *volumeStatus) { s.last = outcomeGatePending })
	var since time.Duration
	send := false
	if w := b.watchLocked(v); w != nil {
		if w.gatePendingSince.IsZero() {
			w.gatePendingSince = now
		}
		since = now.Sub(w.gatePendingSince)
		send = since >= GatePendingEventAfter && !w.gateEventSent
		if send {
			w.gateEventSent = true
		}
	}
	b.mu.Unlock()
	if send {
		b.recordEvent(v, corev1.EventTypeNormal, EventReasonReadinessGatePending,
			"Waiting for the driver's readiness gate for %s: %s", since.Round(time.Second), reason)
	}
}

// watchCertificate arms the overdue and expiry timers for the volume's certificate, due for
// renewal at renewAt, unless they are armed for it already or nobody listens. A volume resumed
// after a restart learns its certificate's expiry from notAfterOf.
func (b *board) watchCertificate(v *volume, renewAt time.Time) {
	if !b.watching {
		return
	}
	b.mu.Lock()
	notAfter := b.watchLocked(v).notAfter
	b.mu.Unlock()
	if notAfter.IsZero() {
		// Outside b.mu: the lookup reads the informer's cache.
		if notAfter = b.notAfterOf(v.id); notAfter.IsZero() {
			b.mu.Lock()
			b.watchLocked(v).expiryUnknown = true
			b.showConditionLocked(v)
			b.mu.Unlock()
			return
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.watchLocked(v)
	if !v.shown.listed || (w.renewAt.Equal(renewAt) && len(w.stops) > 0) {
		return
	}
	if w.notAfter.IsZero() {
		w.notAfter = notAfter
		b.showConditionLocked(v)
	}
	b.stopWatchLocked(v)
	w.renewAt = renewAt
	gen := w.generation
	now := b.clock.Now()
	overdueAt := renewAt.Add(w.notAfter.Sub(renewAt) / 4)
	w.stops = append(w.stops,
		afterFunc(b.clock, overdueAt.Sub(now), func() { b.certificateOverdue(v, gen, renewAt) }),
		afterFunc(b.clock, w.notAfter.Sub(now), func() { b.certificateExpired(v, gen) }))
	if b.conditions != nil {
		invalidAt := w.notAfter.Add(-b.conditions.margin)
		w.stops = append(w.stops, afterFunc(b.clock, invalidAt.Sub(now), func() { b.certificateInvalid(v, gen) }))
	}
}

// certificateInvalid fires when a certificate enters the pod condition's expiry margin: the
// volume's pod is shown again.
func (b *board) certificateInvalid(v *volume, gen uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if v.shown.listed && v.shown.watch != nil && v.shown.watch.generation == gen {
		b.showConditionLocked(v)
	}
}

// watchLocked returns the volume's certificate watch, made on first use; nil when the board
// does not watch certificates. b.mu is held.
func (b *board) watchLocked(v *volume) *certificateWatch {
	if !b.watching {
		return nil
	}
	if v.shown.watch == nil {
		v.shown.watch = &certificateWatch{}
	}
	return v.shown.watch
}

// stopWatchLocked stops the volume's overdue and expiry timers. b.mu is held.
func (b *board) stopWatchLocked(v *volume) {
	w := v.shown.watch
	if w == nil {
		return
	}
	for _, stop := range w.stops {
		stop()
	}
	w.stops = nil
	w.renewAt = time.Time{}
}

// certificateOverdue fires when a certificate is past its renewal time by the margin.
func (b *board) certificateOverdue(v *volume, gen uint64, renewAt time.Time) {
	b.certificateDeadlinePassed(v, gen, func(s *volumeStatus) *bool { return &s.overdue },
		EventReasonCertificateRenewalOverdue,
		"Certificate renewal is overdue: it was due at %s and has not succeeded; the certificate expires at %s",
		renewAt.UTC().Format(time.RFC3339))
}

// certificateExpired fires when a certificate is past its NotAfter.
func (b *board) certificateExpired(v *volume, gen uint64) {
	b.certificateDeadlinePassed(v, gen, func(s *volumeStatus) *bool { return &s.expired },
		EventReasonCertificateExpired, "The certificate in the volume expired at %s and has not been renewed")
}

// certificateDeadlinePassed sets the status flag that flag selects and records a Warning
// event, whose format ends with the certificate's expiry; it does nothing if the volume is
// gone, its certificate was replaced since the timer was armed (gen), or the flag is set.
func (b *board) certificateDeadlinePassed(v *volume, gen uint64, flag func(*volumeStatus) *bool, reason, format string, args ...any) {
	b.mu.Lock()
	if !v.shown.listed || v.shown.watch == nil || v.shown.watch.generation != gen || *flag(&v.shown.status) {
		b.mu.Unlock()
		return
	}
	notAfter := v.shown.watch.notAfter
	b.updateStatusLocked(v, func(s *volumeStatus) { *flag(s) = true })
	b.mu.Unlock()
	b.recordEvent(v, corev1.EventTypeWarning, reason, format, append(args, notAfter.UTC().Format(time.RFC3339))...)
}

// describeDelay says when an attempt is due, for event messages.
func describeDelay(now time.Time, d time.Duration) string {
	return fmt.Sprintf("in %s (at %s)", d.Round(time.Second), now.Add(d).UTC().Format(time.RFC3339))
}
