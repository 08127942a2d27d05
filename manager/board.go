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
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/cert-manager/csi-lib/internal/clockutil"
	"github.com/cert-manager/csi-lib/internal/podcondition"
	"github.com/cert-manager/csi-lib/metrics"
)

// board is what the manager shows of its volumes: each volume's state in the
// certmanager_csi_volumes gauge, the Events on its Pod, its pod's condition, and the timers that
// notice a certificate overdue or expired. The timers are armed only when someone listens
// (events, the state gauge or the pod condition), so by default a volume has none. What it shows
// of a volume lives in the volume table, under the table's lock; the board changes it only
// through the table, so nothing is shown of a volume that is not registered.
type board struct {
	log      logr.Logger
	table    *volumeTable
	clock    clock.Clock
	recorder record.EventRecorder // nil: no events
	metrics  *metrics.Metrics
	nodeHash string
	watching bool
	// notAfterOf is the expiry of a volume's newest issued certificate (from the informer's
	// cache), for a volume resumed after a restart.
	notAfterOf func(volumeID string) time.Time
	// conditions keeps the pods' PodCondition; nil without one.
	conditions *podcondition.Writer
	// margin is the PodCondition's ExpiryMargin, defaulted: how long before its NotAfter a
	// certificate stops counting as valid.
	margin time.Duration
}

func newBoard(o Options, log logr.Logger, table *volumeTable, nodeHash string, notAfterOf func(string) time.Time, conditions *podcondition.Writer) *board {
	return &board{
		log:        log,
		table:      table,
		clock:      o.Clock,
		recorder:   o.EventRecorder,
		metrics:    o.Metrics,
		nodeHash:   nodeHash,
		watching:   o.EventRecorder != nil || o.Metrics.VolumeStateGaugeEnabled() || conditions != nil,
		notAfterOf: notAfterOf,
		conditions: conditions,
		margin:     o.PodCondition.expiryMargin(),
	}
}

// countsChanged sets the certmanager_csi_volumes gauge from the volume table's counts, if the
// gauge is enabled.
func (b *board) countsChanged(counts map[string]int) {
	if !b.metrics.VolumeStateGaugeEnabled() {
		return
	}
	b.metrics.SetVolumeStates(b.nodeHash, maps.Clone(counts))
}

// removed stops showing a volume the table has removed: its share of its pod's condition and
// its timers. The table's lock and the volume's are held.
func (b *board) removed(v *managedVolume, shown *shownVolume) {
	if b.conditions != nil {
		if ref := v.podRefLocked(); ref != nil {
			b.conditions.RemoveVolume(ref, v.id)
		}
	}
	stopWatch(shown.watch)
}

// shown tells the pod conditions what the volume contributes now. The table's lock and the
// volume's are held.
func (b *board) shown(v *managedVolume, s *shownVolume) {
	if b.conditions == nil {
		return
	}
	ref := v.podRefLocked()
	if ref == nil {
		return
	}
	validity := b.validityLocked(s)
	b.conditions.SetVolume(ref, v.id, validity, v.flags&flagResumed != 0)
}

// validityLocked is what the volume contributes to its pod's condition at this instant: a
// certificate within the expiry margin of its NotAfter counts as expired, whether or not a timer
// has fired yet. b.conditions is set and the table's lock is held.
func (b *board) validityLocked(shown *shownVolume) podcondition.Validity {
	s, w := shown.status, shown.watch
	switch {
	case s.expired:
		return PodConditionReasonExpired
	case s.hasCertificate && w != nil && !w.notAfter.IsZero():
		if !w.notAfter.Add(-b.margin).After(b.clock.Now()) {
			return PodConditionReasonExpired
		}
		return ""
	case s.hasCertificate && w != nil && w.expiryUnknown:
		return ""
	case s.hasCertificate:
		return podcondition.ValidityUnknown
	case s.last == outcomeFailed:
		return PodConditionReasonFailing
	case s.last == outcomeGatePending:
		return PodConditionReasonGatePending
	default:
		return PodConditionReasonNotIssued
	}
}

// recordEvent records an event on the volume's Pod, if there is a recorder and a Pod. Messages
// are built from the manager's own texts: never a key, a token or a CSR.
func (b *board) recordEvent(v *managedVolume, eventType, reason, format string, args ...any) {
	if b.recorder == nil {
		return
	}
	ref := v.podRef()
	if ref == nil {
		return
	}
	b.recorder.Eventf(ref, eventType, reason, format, args...)
}

// attemptStarted counts an issuance attempt of the volume.
func (b *board) attemptStarted(v *managedVolume) {
	b.metrics.IncrementIssueCallCountTotal(b.nodeHash, v.id)
}

// attemptEnded logs an attempt's outcome, counts it and shows it: the volume's state, and an
// Event on its pod for a failure (saying when the next attempt is due), or once the gate has
// said "not yet" for GatePendingEventAfter. A gate refusal counts as gate-pending; it is an
// issuance error too only for a caller's attempt (forCaller), whose caller sees it as one. next
// is when the loop attempts again (unused for a caller's attempt: kubelet retries the publish).
// A failure of a volume unmanaged meanwhile is logged and counted but not shown.
func (b *board) attemptEnded(v *managedVolume, err error, forCaller bool, next time.Duration) {
	log := v.logger(b.log)
	gatePending := false
	switch {
	case err == nil:
		log.V(2).Info("Certificate issued")
		return
	case errors.Is(err, ErrNotReadyToRequest):
		log.V(4).Info("Not ready to request a certificate yet", "reason", err.Error())
		b.metrics.IncrementGatePendingCountTotal(b.nodeHash, v.id)
		if forCaller {
			b.metrics.IncrementIssueErrorCountTotal(b.nodeHash, v.id)
		}
		gatePending = true
	case errors.Is(err, ErrPodTerminating) && v.is(flagTerminating):
		log.Info("The volume's pod is terminating: no further issuance attempt", "reason", err.Error())
		return
	default:
		log.Error(err, "Issuance attempt failed")
		b.metrics.IncrementIssueErrorCountTotal(b.nodeHash, v.id)
		if v.ctx.Err() != nil {
			return
		}
	}

	now := b.clock.Now()
	var pendingFor time.Duration
	gateEventDue := false
	b.table.update(v, func(s *shownVolume) {
		if !gatePending {
			s.status.apply(eventFailed)
			return
		}
		s.status.apply(eventGatePending)
		if w := b.watch(s); w != nil {
			if w.gatePendingSince.IsZero() {
				w.gatePendingSince = now
			}
			pendingFor = now.Sub(w.gatePendingSince)
			gateEventDue = pendingFor >= GatePendingEventAfter && !w.gateEventSent
			w.gateEventSent = w.gateEventSent || gateEventDue
		}
	})
	switch {
	case gateEventDue:
		b.recordEvent(v, corev1.EventTypeNormal, EventReasonReadinessGatePending,
			"Waiting for the driver's readiness gate for %s: %s", pendingFor.Round(time.Second), gateReason(err))
	case !gatePending:
		reason, when := EventReasonCertificateRequestFailed, "when kubelet retries the mount"
		if errors.Is(err, ErrPermissionDenied) {
			reason = EventReasonPermissionDenied
		}
		if !forCaller {
			when = describeDelay(now, next)
		}
		b.recordEvent(v, corev1.EventTypeWarning, reason, "Issuing the certificate failed: %v; next attempt %s", err, when)
	}
}

// gateReason is the reason the readiness gate gave, from an error matching ErrNotReadyToRequest.
func gateReason(err error) string {
	var nr *NotReadyToRequestError
	if errors.As(err, &nr) {
		return nr.Reason
	}
	return err.Error()
}

// certificateWritten shows a written key pair: the volume's status, the certificate's expiry
// (notAfter, the written leaf's) for the watch, the Issued or Renewed event and, for a first
// certificate, the time since the volume was registered.
func (b *board) certificateWritten(v *managedVolume, namespace, name string, notAfter time.Time, first bool) {
	if first {
		b.metrics.ObservePublishToFirstCertificate(b.nodeHash, b.clock.Since(v.managedAt))
	}
	b.table.update(v, func(s *shownVolume) {
		if w := b.watch(s); w != nil {
			w.notAfter, w.expiryUnknown = notAfter, notAfter.IsZero()
			w.generation++
			stopWatch(w)
			w.gatePendingSince, w.gateEventSent = time.Time{}, false
		}
		s.status.apply(eventWritten)
	})
	if first {
		b.recordEvent(v, corev1.EventTypeNormal, EventReasonCertificateIssued,
			"Certificate issued by CertificateRequest %s/%s, %s after publish; valid until %s",
			namespace, name, b.clock.Since(v.managedAt).Round(time.Millisecond), notAfter.UTC().Format(time.RFC3339))
		return
	}
	b.recordEvent(v, corev1.EventTypeNormal, EventReasonCertificateRenewed,
		"Certificate renewed by CertificateRequest %s/%s; valid until %s", namespace, name, notAfter.UTC().Format(time.RFC3339))
}

// describeDelay says when an attempt is due, for event messages.
func describeDelay(now time.Time, d time.Duration) string {
	return fmt.Sprintf("in %s (at %s)", d.Round(time.Second), now.Add(d).UTC().Format(time.RFC3339))
}

// watchCertificate arms the overdue and expiry timers for the volume's certificate, due for
// renewal at renewAt, unless they are armed for it already or nobody listens. A volume resumed
// after a restart learns its certificate's expiry from notAfterOf.
func (b *board) watchCertificate(v *managedVolume, renewAt time.Time) {
	if !b.watching {
		return
	}
	var notAfter time.Time
	if !b.table.update(v, func(s *shownVolume) { notAfter = b.watch(s).notAfter }) {
		return
	}
	if notAfter.IsZero() {
		// Outside the table's lock: the lookup reads the informer's cache.
		if notAfter = b.notAfterOf(v.id); notAfter.IsZero() {
			b.table.update(v, func(s *shownVolume) {
				b.watch(s).expiryUnknown = true
			})
			return
		}
	}
	b.table.update(v, func(s *shownVolume) {
		w := b.watch(s)
		if w.renewAt.Equal(renewAt) && len(w.stops) > 0 {
			return
		}
		if w.notAfter.IsZero() {
			w.notAfter = notAfter
		}
		stopWatch(w)
		w.renewAt = renewAt
		gen := w.generation
		now := b.clock.Now()
		type deadline struct {
			at     time.Time
			passed func()
		}
		deadlines := []deadline{
			{renewAt.Add(w.notAfter.Sub(renewAt) / 4), func() { b.certificateOverdue(v, gen, renewAt) }},
			{w.notAfter, func() { b.certificateExpired(v, gen) }},
		}
		if b.conditions != nil {
			deadlines = append(deadlines, deadline{w.notAfter.Add(-b.margin), func() { b.certificateInvalid(v) }})
		}
		for _, d := range deadlines {
			w.stops = append(w.stops, clockutil.AfterFunc(b.clock, d.at.Sub(now), d.passed))
		}
	})
}

// certificateInvalid fires when a certificate enters the pod condition's expiry margin: the
// volume is shown again, which its pod's condition learns.
func (b *board) certificateInvalid(v *managedVolume) {
	b.table.update(v, func(*shownVolume) {})
}

// watch returns the volume's certificate watch, made on first use; nil when the board does not
// watch certificates. The table's lock is held.
func (b *board) watch(s *shownVolume) *certificateWatch {
	if !b.watching {
		return nil
	}
	if s.watch == nil {
		s.watch = &certificateWatch{}
	}
	return s.watch
}

// certificateOverdue fires when a certificate is past its renewal time by the margin.
func (b *board) certificateOverdue(v *managedVolume, gen uint64, renewAt time.Time) {
	b.certificateDeadlinePassed(v, gen, eventOverdue,
		EventReasonCertificateRenewalOverdue,
		"Certificate renewal is overdue: it was due at %s and has not succeeded; the certificate expires at %s",
		renewAt.UTC().Format(time.RFC3339))
}

// certificateExpired fires when a certificate is past its NotAfter.
func (b *board) certificateExpired(v *managedVolume, gen uint64) {
	b.certificateDeadlinePassed(v, gen, eventExpired,
		EventReasonCertificateExpired, "The certificate in the volume expired at %s and has not been renewed")
}

// certificateDeadlinePassed applies ev (eventOverdue or eventExpired) to the volume's status
// and records a Warning event, whose format ends with the certificate's expiry; it does nothing
// if the volume is gone, its certificate was replaced since the timer was armed (gen), or the
// status has passed that deadline already.
func (b *board) certificateDeadlinePassed(v *managedVolume, gen uint64, ev volumeEvent, reason, format string, args ...any) {
	var notAfter time.Time
	passed := false
	b.table.update(v, func(s *shownVolume) {
		if s.watch == nil || s.watch.generation != gen || !s.status.apply(ev) {
			return
		}
		notAfter, passed = s.watch.notAfter, true
	})
	if passed {
		b.recordEvent(v, corev1.EventTypeWarning, reason, format, append(args, notAfter.UTC().Format(time.RFC3339))...)
	}
}
