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

package manager

import (
	"cmp"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/cert-manager/csi-lib/internal/clockutil"
	"github.com/cert-manager/csi-lib/internal/podcondition"
	"github.com/cert-manager/csi-lib/metrics"
)

// status is what is shown of the registered volumes, and the one place attempts report to: the
// per-volume metrics, each volume's state (see volumeStatus) and the count of volumes in each
// state (the certmanager_csi_volumes gauge), the Events on the pods, each volume's share of its
// pod's condition, and the timers that notice a certificate overdue, expired or no longer valid.
// It owns the shown volumes and the counts, and guards them with mu.
//
// Invariants: a volume is shown from its registration (add) to its end (remove), never after it
// is closed; counts holds, for every state, how many shown volumes are in it; a shown volume has
// certificate timers only when something listens (Events, the state gauge or the pod condition),
// and every timer of a volume no longer shown is stopped.
//
// Holding mu, the status reads a volume's pod and flags (which takes no lock), sets the pod
// condition (status -> podcondition in the package doc's lock order), arms and stops timers of
// the clock, and sets the state gauge; it records Events after releasing it.
type status struct {
	clock    clock.Clock
	recorder record.EventRecorder // nil: no events
	metrics  *metrics.Metrics
	nodeHash string
	// watching: something listens to the certificates' deadlines, so the timers are armed.
	watching bool
	// notAfterOf is the expiry of a volume's newest issued certificate (from the informer's
	// cache), for a volume resumed after a restart.
	notAfterOf func(volumeID string) time.Time
	// conditions keeps the pods' PodCondition; nil without one.
	conditions *podcondition.Writer
	// margin is the PodCondition's ExpiryMargin, defaulted: how long before its NotAfter a
	// certificate stops counting as valid; zero without a PodCondition.
	margin time.Duration

	mu      sync.Mutex
	stopped bool
	shown   map[*managedVolume]*shownVolume
	counts  map[string]int // shown volumes by state
}

// shownVolume is what is shown of one volume: its state, and, when something listens, its
// certificate's deadlines.
type shownVolume struct {
	status volumeStatus
	// certificate is nil unless the status is watching.
	certificate *certificateTimers
	// onPod is the pod and the validity last set on the pod condition: the same again is not
	// set, so a turn that changes nothing takes no lock of the pod condition; a volume whose
	// metadata names another pod is taken off this one's.
	onPod struct {
		ref      *corev1.ObjectReference
		validity podcondition.Validity
	}
}

// certificateTimers is what the status knows of the certificate in a volume, and the timers that
// fire when it becomes overdue, when it expires and when it stops counting as valid.
type certificateTimers struct {
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

// stop stops the timers; c may be nil.
func (c *certificateTimers) stop() {
	if c == nil {
		return
	}
	for _, stop := range c.stops {
		stop()
	}
	c.stops = nil
	c.renewAt = time.Time{}
}

func newStatus(o Options, nodeHash string, notAfterOf func(string) time.Time, conditions *podcondition.Writer) *status {
	s := &status{
		clock:      o.Clock,
		recorder:   o.EventRecorder,
		metrics:    o.Metrics,
		nodeHash:   nodeHash,
		watching:   o.EventRecorder != nil || o.Metrics.VolumeStateGaugeEnabled() || conditions != nil,
		notAfterOf: notAfterOf,
		conditions: conditions,
		shown:      make(map[*managedVolume]*shownVolume),
		counts:     make(map[string]int),
	}
	if pc := o.PodCondition; pc != nil {
		s.margin = cmp.Or(pc.ExpiryMargin, DefaultPodConditionExpiryMargin)
	}
	s.showCountsLocked() // every state, zeros included, from the start; s is not shared yet
	return s
}

// add shows a volume just registered; hasCertificate says its metadata records a certificate.
// A volume closed meanwhile is not shown.
func (s *status) add(v *managedVolume, hasCertificate bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped || v.is(flagClosed) {
		return
	}
	e := &shownVolume{}
	if s.watching {
		e.certificate = &certificateTimers{}
	}
	if hasCertificate {
		e.status.apply(eventHasCertificate)
	}
	s.shown[v] = e
	s.counts[e.status.state()]++
	s.showCountsLocked()
	s.showPodLocked(v, e)
}

// remove stops showing a volume whose registration ended.
func (s *status) remove(v *managedVolume) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.shown[v]
	if s.stopped || e == nil {
		return
	}
	delete(s.shown, v)
	s.counts[e.status.state()]--
	s.showCountsLocked()
	if ref := e.onPod.ref; ref != nil {
		s.conditions.RemoveVolume(ref, v.id)
	}
	e.certificate.stop()
}

// change applies change to what is shown of the volume, moves the counts if its state changed,
// and sets its share of its pod's condition; it does nothing if the volume is not shown.
func (s *status) change(v *managedVolume, change func(e *shownVolume)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.shown[v]
	if s.stopped || e == nil {
		return
	}
	before := e.status.state()
	change(e)
	if after := e.status.state(); after != before {
		s.counts[before]--
		s.counts[after]++
		s.showCountsLocked()
	}
	s.showPodLocked(v, e)
}

// showPodLocked sets the volume's share of its pod's condition.
func (s *status) showPodLocked(v *managedVolume, e *shownVolume) {
	if s.conditions == nil {
		return
	}
	ref := v.podRef()
	if ref == nil {
		return
	}
	validity := s.validityLocked(e)
	before := e.onPod.ref
	if before != nil && before.UID == ref.UID && e.onPod.validity == validity {
		return
	}
	if before != nil && before.UID != ref.UID {
		s.conditions.RemoveVolume(before, v.id)
	}
	e.onPod.ref, e.onPod.validity = ref, validity
	s.conditions.SetVolume(ref, v.id, validity, v.is(flagResumed))
}

// showCountsLocked sets the state gauge, every state included.
func (s *status) showCountsLocked() {
	s.metrics.SetVolumeStates(s.nodeHash, s.counts)
}

// stop shows nothing more: every timer stops, and a volume removed from now on is not taken off
// its pod's condition (Stop leaves the pods as they are).
func (s *status) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	for _, e := range s.shown {
		e.certificate.stop()
	}
}

// stopConditionWriter stops the pod condition's writer, once the manager's goroutines are done.
func (s *status) stopConditionWriter() {
	if s.conditions != nil {
		s.conditions.Stop()
	}
}

// validityLocked is the volume's share of its pod's condition.
func (s *status) validityLocked(e *shownVolume) podcondition.Validity {
	st, c := e.status, e.certificate
	switch {
	case st.expired:
		return PodConditionReasonExpired
	case st.hasCertificate && c != nil && !c.notAfter.IsZero():
		if !c.notAfter.Add(-s.margin).After(s.clock.Now()) {
			return PodConditionReasonExpired
		}
		return ""
	case st.hasCertificate && c != nil && c.expiryUnknown:
		return ""
	case st.hasCertificate:
		return podcondition.ValidityUnknown
	case st.last == outcomeFailed:
		return PodConditionReasonFailing
	case st.last == outcomeGatePending:
		return PodConditionReasonGatePending
	default:
		return PodConditionReasonNotIssued
	}
}

// recordEvent records an Event on the volume's pod, if Events are recorded and the pod is known.
func (s *status) recordEvent(v *managedVolume, eventType, reason, format string, args ...any) {
	if ref := v.podRef(); s.recorder != nil && ref != nil {
		s.recorder.Eventf(ref, eventType, reason, format, args...)
	}
}

// attemptStarted counts an issuance attempt.
func (s *status) attemptStarted(v *managedVolume) {
	s.metrics.IncrementIssueCallCountTotal(s.nodeHash, v.id)
}

// attemptFailed shows an attempt that ended with err, whose next attempt is in next (for the loop)
// or when kubelet retries the publish (forCaller): its log, counters, state and Event. A
// success is shown by written.
func (s *status) attemptFailed(v *managedVolume, err error, forCaller bool, next time.Duration) {
	log := v.logger()
	gatePending := errors.Is(err, ErrNotReadyToRequest)
	switch {
	case gatePending:
		log.V(4).Info("Not ready to request a certificate yet", "reason", err.Error())
		s.metrics.IncrementGatePendingCountTotal(s.nodeHash, v.id)
		if forCaller {
			s.metrics.IncrementIssueErrorCountTotal(s.nodeHash, v.id)
		}
	case errors.Is(err, ErrPodTerminating) && v.is(flagTerminating):
		log.Info("The volume's pod is terminating: no further issuance attempt", "reason", err.Error())
		return
	default:
		log.Error(err, "Issuance attempt failed")
		s.metrics.IncrementIssueErrorCountTotal(s.nodeHash, v.id)
		if v.is(flagClosed) {
			return
		}
	}
	now := s.clock.Now()
	var pendingFor time.Duration
	gateEventDue := false
	s.change(v, func(e *shownVolume) {
		if !gatePending {
			e.status.apply(eventFailed)
			return
		}
		e.status.apply(eventGatePending)
		if c := e.certificate; c != nil {
			if c.gatePendingSince.IsZero() {
				c.gatePendingSince = now
			}
			pendingFor = now.Sub(c.gatePendingSince)
			gateEventDue = pendingFor >= GatePendingEventAfter && !c.gateEventSent
			c.gateEventSent = c.gateEventSent || gateEventDue
		}
	})
	switch {
	case gateEventDue:
		reason := err.Error()
		var refusal *NotReadyToRequestError
		if errors.As(err, &refusal) {
			reason = refusal.Reason
		}
		s.recordEvent(v, corev1.EventTypeNormal, EventReasonReadinessGatePending,
			"Waiting for the driver's readiness gate for %s: %s", pendingFor.Round(time.Second), reason)
	case !gatePending:
		reason, when := EventReasonCertificateRequestFailed, "when kubelet retries the mount"
		if errors.Is(err, ErrPermissionDenied) {
			reason = EventReasonPermissionDenied
		}
		if !forCaller {
			when = fmt.Sprintf("in %s (at %s)", next.Round(time.Second), now.Add(next).UTC().Format(time.RFC3339))
		}
		s.recordEvent(v, corev1.EventTypeWarning, reason, "Issuing the certificate failed: %v; next attempt %s", err, when)
	}
}

// written shows a key pair written from the request namespace/name, whose certificate expires at
// notAfter; first says it is the volume's first certificate.
func (s *status) written(v *managedVolume, namespace, name string, notAfter time.Time, first bool) {
	v.logger().V(2).Info("Certificate issued")
	if first {
		s.metrics.ObservePublishToFirstCertificate(s.nodeHash, s.clock.Since(v.managedAt))
	}
	s.change(v, func(e *shownVolume) {
		if c := e.certificate; c != nil {
			c.notAfter, c.expiryUnknown = notAfter, notAfter.IsZero()
			c.generation++
			c.stop()
			c.gatePendingSince, c.gateEventSent = time.Time{}, false
		}
		e.status.apply(eventWritten)
	})
	if first {
		s.recordEvent(v, corev1.EventTypeNormal, EventReasonCertificateIssued,
			"Certificate issued by CertificateRequest %s/%s, %s after publish; valid until %s",
			namespace, name, s.clock.Since(v.managedAt).Round(time.Millisecond), notAfter.UTC().Format(time.RFC3339))
		return
	}
	s.recordEvent(v, corev1.EventTypeNormal, EventReasonCertificateRenewed,
		"Certificate renewed by CertificateRequest %s/%s; valid until %s", namespace, name, notAfter.UTC().Format(time.RFC3339))
}

// noteCertificate shows what a volume's metadata, just read, says of its certificate: whether
// it has one, and, if held, the renewal point renewAt it is held to, for which it arms the
// certificate's timers unless they are armed for it already. It takes the lock once, twice for
// a volume resumed after a restart whose certificate's expiry is learned from the informer's
// cache first, outside the lock.
func (s *status) noteCertificate(v *managedVolume, hasCertificate bool, renewAt time.Time, held bool) {
	if s.note(v, hasCertificate, renewAt, held, time.Time{}, false) {
		s.note(v, hasCertificate, renewAt, held, s.notAfterOf(v.id), true)
	}
}

// note is noteCertificate under the lock. It reports true, having armed nothing, when the
// certificate's expiry is not known and was not looked up (looked): the caller looks it up
// (learned) and calls again. An expiry looked up and not found marks the volume's expiry
// unknown, with no timer.
func (s *status) note(v *managedVolume, hasCertificate bool, renewAt time.Time, held bool, learned time.Time, looked bool) (lookUp bool) {
	s.change(v, func(e *shownVolume) {
		if hasCertificate {
			e.status.apply(eventHasCertificate)
		}
		c := e.certificate
		if !held || c == nil || (c.renewAt.Equal(renewAt) && len(c.stops) > 0) {
			return
		}
		if c.notAfter.IsZero() {
			switch {
			case !looked:
				lookUp = true
				return
			case learned.IsZero():
				c.expiryUnknown = true
				return
			}
			c.notAfter = learned
		}
		c.stop()
		c.renewAt = renewAt
		gen := c.generation
		now := s.clock.Now()
		arm := func(at time.Time, passed func()) {
			c.stops = append(c.stops, clockutil.AfterFunc(s.clock, at.Sub(now), passed))
		}
		arm(renewAt.Add(c.notAfter.Sub(renewAt)/4), func() {
			s.certificateDeadlinePassed(v, gen, eventOverdue, EventReasonCertificateRenewalOverdue,
				"Certificate renewal is overdue: it was due at %s and has not succeeded; the certificate expires at %s",
				renewAt.UTC().Format(time.RFC3339))
		})
		arm(c.notAfter, func() {
			s.certificateDeadlinePassed(v, gen, eventExpired, EventReasonCertificateExpired,
				"The certificate in the volume expired at %s and has not been renewed")
		})
		if s.conditions != nil {
			// Re-shown when the certificate stops counting as valid: validityLocked reads the clock.
			arm(c.notAfter.Add(-s.margin), func() { s.change(v, func(*shownVolume) {}) })
		}
	})
	return lookUp
}

// certificateDeadlinePassed moves the volume's state by ev and records the Event, unless the
// timer is stale (a newer certificate was written) or the state had moved already.
func (s *status) certificateDeadlinePassed(v *managedVolume, gen uint64, ev volumeEvent, reason, format string, args ...any) {
	var notAfter time.Time
	passed := false
	s.change(v, func(e *shownVolume) {
		if e.certificate.generation != gen || !e.status.apply(ev) {
			return
		}
		notAfter, passed = e.certificate.notAfter, true
	})
	if passed {
		s.recordEvent(v, corev1.EventTypeWarning, reason, format, append(args, notAfter.UTC().Format(time.RFC3339))...)
	}
}

// outcome is the class of a volume's last attempt, for its state.
type outcome int

const (
	outcomeNone outcome = iota
	outcomeGatePending
	outcomeFailed
)

// volumeStatus is what a volume's state in certmanager_csi_volumes is derived from. It changes
// only through apply.
type volumeStatus struct {
	hasCertificate   bool
	last             outcome
	overdue, expired bool
}

// volumeEvent is what moves a volume's status (see the package documentation's diagram).
type volumeEvent int

const (
	// eventHasCertificate: the volume's metadata records a certificate.
	eventHasCertificate volumeEvent = iota
	// eventWritten: a key pair was written; what was wrong before is over.
	eventWritten
	// eventGatePending: the readiness gate said "not yet".
	eventGatePending
	// eventFailed: an attempt failed with an issuance error.
	eventFailed
	// eventOverdue: the certificate is past its renewal point by the margin, not renewed.
	eventOverdue
	// eventExpired: the certificate is past its NotAfter, not renewed.
	eventExpired
)

// apply moves the status by ev, and reports whether it changed: the one place where a volume's
// status changes.
func (s *volumeStatus) apply(ev volumeEvent) bool {
	before := *s
	switch ev {
	case eventHasCertificate:
		s.hasCertificate = true
	case eventWritten:
		*s = volumeStatus{hasCertificate: true}
	case eventGatePending:
		s.last = outcomeGatePending
	case eventFailed:
		s.last = outcomeFailed
	case eventOverdue:
		s.overdue = true
	case eventExpired:
		s.expired = true
	}
	return *s != before
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
