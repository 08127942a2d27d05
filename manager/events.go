package manager

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

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

// outcome is the class of a volume's last attempt, for its state.
type outcome int

const (
	outcomeNone outcome = iota
	outcomeGatePending
	outcomeFailed
)

// volumeStatus is what a volume's state in certmanager_csi_volumes is derived from. Guarded by
// Manager.mu.
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

// certificateWatch is what the manager knows of the certificate in a volume, and the timers
// that fire when it becomes overdue and when it expires. Guarded by Manager.mu.
type certificateWatch struct {
	notAfter   time.Time
	renewAt    time.Time // the renewal time the timers were armed for
	generation uint64    // changes with every certificate written; stale timers do nothing
	stops      []func() bool
	// gatePendingSince is when the gate started saying "not yet"; zero when it is not.
	gatePendingSince time.Time
	gateEventSent    bool
}

// watchesCertificates reports whether the manager tracks overdue and expired certificates:
// only when someone listens (events or the state gauge), so by default no timer is added.
func (m *Manager) watchesCertificates() bool {
	return m.opts.EventRecorder != nil || m.opts.Metrics.VolumeStateGaugeEnabled()
}

// updateStatusLocked changes a registered volume's status and keeps the state counts and the
// gauge in step. m.mu is held.
func (m *Manager) updateStatusLocked(v *volume, change func(*volumeStatus)) {
	before := v.status.state()
	change(&v.status)
	if after := v.status.state(); after != before && m.volumes[v.id] == v {
		m.stateCounts[before]--
		m.stateCounts[after]++
		m.publishStatesLocked()
	}
}

func (m *Manager) updateStatus(v *volume, change func(*volumeStatus)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.updateStatusLocked(v, change)
}

// publishStatesLocked sets the state gauge from the counts. m.mu is held.
func (m *Manager) publishStatesLocked() {
	if !m.opts.Metrics.VolumeStateGaugeEnabled() {
		return
	}
	counts := make(map[string]int, len(metrics.VolumeStates))
	for k, n := range m.stateCounts {
		counts[k] = n
	}
	m.opts.Metrics.SetVolumeStates(m.nodeNameHash, counts)
}

// podReference names the volume's Pod from its volume context; nil when name, namespace or UID
// is missing (no event is recorded then).
func podReference(meta metadata.Metadata) *corev1.ObjectReference {
	name, ns, uid := meta.VolumeContext[metadata.PodNameVolumeContextKey], meta.VolumeContext[metadata.PodNamespaceVolumeContextKey], meta.VolumeContext[metadata.PodUIDVolumeContextKey]
	if name == "" || ns == "" || uid == "" {
		return nil
	}
	return &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Name: name, Namespace: ns, UID: types.UID(uid)}
}

// recordEvent records an event on the volume's Pod, if there is a recorder and a Pod. Messages
// are built from the manager's own texts: never a key, a token or a CSR.
func (m *Manager) recordEvent(v *volume, eventType, reason, format string, args ...any) {
	if m.opts.EventRecorder == nil {
		return
	}
	m.mu.Lock()
	ref := v.pod
	m.mu.Unlock()
	if ref == nil {
		return
	}
	m.opts.EventRecorder.Eventf(ref, eventType, reason, format, args...)
}

// certificateWritten records a written key pair: the volume's status, the certificate's
// expiry for the watch, and the Issued or Renewed event.
func (m *Manager) certificateWritten(v *volume, namespace, name string, chain []byte, first bool) {
	var notAfter time.Time
	if leaf, err := certs.ParseLeaf(chain); err == nil {
		notAfter = leaf.NotAfter
	}
	m.mu.Lock()
	v.watch.notAfter = notAfter
	v.watch.generation++
	m.stopWatchLocked(v)
	v.watch.gatePendingSince, v.watch.gateEventSent = time.Time{}, false
	m.updateStatusLocked(v, func(s *volumeStatus) { *s = volumeStatus{hasCertificate: true} })
	m.mu.Unlock()
	if first {
		m.recordEvent(v, corev1.EventTypeNormal, EventReasonCertificateIssued,
			"Certificate issued by CertificateRequest %s/%s, %s after publish; valid until %s",
			namespace, name, m.clock.Since(v.managedAt).Round(time.Millisecond), notAfter.UTC().Format(time.RFC3339))
		return
	}
	m.recordEvent(v, corev1.EventTypeNormal, EventReasonCertificateRenewed,
		"Certificate renewed by CertificateRequest %s/%s; valid until %s", namespace, name, notAfter.UTC().Format(time.RFC3339))
}

// attemptFailed records a failed attempt: the status, and a CertificateRequestFailed event
// saying when the next attempt is due (next is empty for a publish: kubelet retries it).
func (m *Manager) attemptFailed(v *volume, err error, next string) {
	m.updateStatus(v, func(s *volumeStatus) { s.last = outcomeFailed })
	if next == "" {
		next = "when kubelet retries the mount"
	}
	m.recordEvent(v, corev1.EventTypeWarning, EventReasonCertificateRequestFailed,
		"Issuing the certificate failed: %v; next attempt %s", err, next)
}

// gatePending records that the gate said "not yet", and the ReadinessGatePending event once
// the gate has said so for GatePendingEventAfter.
func (m *Manager) gatePending(v *volume, reason string) {
	now := m.clock.Now()
	m.mu.Lock()
	m.updateStatusLocked(v, func(s *volumeStatus) { s.last = outcomeGatePending })
	w := &v.watch
	if w.gatePendingSince.IsZero() {
		w.gatePendingSince = now
	}
	since := now.Sub(w.gatePendingSince)
	send := since >= GatePendingEventAfter && !w.gateEventSent
	if send {
		w.gateEventSent = true
	}
	m.mu.Unlock()
	if send {
		m.recordEvent(v, corev1.EventTypeNormal, EventReasonReadinessGatePending,
			"Waiting for the driver's readiness gate for %s: %s", since.Round(time.Second), reason)
	}
}

// watchCertificate arms the overdue and expiry timers for the volume's certificate, due for
// renewal at renewAt, unless they are armed for it already. A volume resumed after a restart
// learns its certificate's expiry from the informer's cache.
func (m *Manager) watchCertificate(v *volume, renewAt time.Time) {
	if !m.watchesCertificates() {
		return
	}
	m.mu.Lock()
	notAfter := v.watch.notAfter
	m.mu.Unlock()
	if notAfter.IsZero() {
		// Outside m.mu: reading the cache takes it.
		if notAfter = m.cachedNotAfter(v.id); notAfter.IsZero() {
			return
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	w := &v.watch
	if m.volumes[v.id] != v || (w.renewAt.Equal(renewAt) && len(w.stops) > 0) {
		return
	}
	if w.notAfter.IsZero() {
		w.notAfter = notAfter
	}
	m.stopWatchLocked(v)
	w.renewAt = renewAt
	gen := w.generation
	now := m.clock.Now()
	overdueAt := renewAt.Add(w.notAfter.Sub(renewAt) / 4)
	w.stops = append(w.stops,
		m.afterFunc(overdueAt.Sub(now), func() { m.certificateOverdue(v, gen, renewAt) }),
		m.afterFunc(w.notAfter.Sub(now), func() { m.certificateExpired(v, gen) }))
}

// stopWatchLocked stops the volume's overdue and expiry timers. m.mu is held.
func (m *Manager) stopWatchLocked(v *volume) {
	for _, stop := range v.watch.stops {
		stop()
	}
	v.watch.stops = nil
	v.watch.renewAt = time.Time{}
}

// certificateOverdue fires when a certificate is past its renewal time by the margin.
func (m *Manager) certificateOverdue(v *volume, gen uint64, renewAt time.Time) {
	m.certificateDeadlinePassed(v, gen, func(s *volumeStatus) *bool { return &s.overdue },
		EventReasonCertificateRenewalOverdue,
		"Certificate renewal is overdue: it was due at %s and has not succeeded; the certificate expires at %s",
		renewAt.UTC().Format(time.RFC3339))
}

// certificateExpired fires when a certificate is past its NotAfter.
func (m *Manager) certificateExpired(v *volume, gen uint64) {
	m.certificateDeadlinePassed(v, gen, func(s *volumeStatus) *bool { return &s.expired },
		EventReasonCertificateExpired, "The certificate in the volume expired at %s and has not been renewed")
}

// certificateDeadlinePassed sets the status flag that flag selects and records a Warning
// event, whose format ends with the certificate's expiry; it does nothing if the volume is
// gone, its certificate was replaced since the timer was armed (gen), or the flag is set.
func (m *Manager) certificateDeadlinePassed(v *volume, gen uint64, flag func(*volumeStatus) *bool, reason, format string, args ...any) {
	m.mu.Lock()
	if m.volumes[v.id] != v || v.watch.generation != gen || *flag(&v.status) {
		m.mu.Unlock()
		return
	}
	notAfter := v.watch.notAfter
	m.updateStatusLocked(v, func(s *volumeStatus) { *flag(s) = true })
	m.mu.Unlock()
	m.recordEvent(v, corev1.EventTypeWarning, reason, format, append(args, notAfter.UTC().Format(time.RFC3339))...)
}

// cachedNotAfter is the expiry of the newest certificate issued for the volume, from the
// informer's cache; zero if there is none.
func (m *Manager) cachedNotAfter(volumeID string) time.Time {
	reqs, err := m.requestsForVolume(volumeID)
	if err != nil {
		return time.Time{}
	}
	for i := len(reqs) - 1; i >= 0; i-- {
		if leaf, err := certs.ParseLeaf(reqs[i].Status.Certificate); err == nil {
			return leaf.NotAfter
		}
	}
	return time.Time{}
}

// describeDelay says when an attempt is due, for event messages.
func (m *Manager) describeDelay(d time.Duration) string {
	return fmt.Sprintf("in %s (at %s)", d.Round(time.Second), m.clock.Now().Add(d).UTC().Format(time.RFC3339))
}
