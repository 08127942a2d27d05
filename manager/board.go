/*
Copyright 2026 The cert-manager Authors.

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
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

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
	// (denied, failed, invalid, timed out), with the reason and when the next attempt is due.
	// One per failed attempt, so one per backoff step in a long outage.
	EventReasonCertificateRequestFailed = "CertificateRequestFailed"
	// EventReasonPermissionDenied (Warning): an attempt failed because the apiserver refused a
	// call the library needs (ErrPermissionDenied), naming the verb, the resource and the
	// account, and when the next attempt is due; otherwise as CertificateRequestFailed.
	EventReasonPermissionDenied = "PermissionDenied"
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
	conditions *podConditions
}

func newBoard(o Options, log logr.Logger, table *volumeTable, nodeHash string, notAfterOf func(string) time.Time, conditions *podConditions) *board {
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
	}
}

// stateGauge returns what sets the certmanager_csi_volumes gauge from the volume table's counts
// (which the table passes under its lock whenever they change); it does nothing unless the gauge
// is enabled.
func stateGauge(m *metrics.Metrics, nodeHash string) func(counts map[string]int) {
	return func(counts map[string]int) {
		if !m.VolumeStateGaugeEnabled() {
			return
		}
		copied := make(map[string]int, len(metrics.VolumeStates))
		for k, n := range counts {
			copied[k] = n
		}
		m.SetVolumeStates(nodeHash, copied)
	}
}

// forget stops showing a volume the table is removing: its share of its pod's condition and
// its timers. The table's lock and the volume's are held.
func (b *board) forget(v *volume, shown *shownVolume) {
	if b.conditions != nil {
		if ref := v.podRefLocked(); ref != nil {
			b.conditions.removeVolume(ref, v.id)
		}
	}
	stopWatch(shown.watch)
}

// stopWatches stops the volumes' timers; their counts stay.
func (b *board) stopWatches(vols []*volume) {
	for _, v := range vols {
		b.table.update(v, func(s *shownVolume) { stopWatch(s.watch) })
	}
}

// noteMetadata learns from the volume's metadata whether it has a certificate.
func (b *board) noteMetadata(v *volume, meta metadata.Metadata) {
	b.table.update(v, func(s *shownVolume) {
		if hasCertificate(meta) {
			s.status.hasCertificate = true
		}
		b.showConditionLocked(v, s)
	})
}

// showConditionLocked tells the pod conditions what the volume contributes now. The table's
// lock and the volume's are held.
func (b *board) showConditionLocked(v *volume, s *shownVolume) {
	if b.conditions == nil {
		return
	}
	ref := v.podRefLocked()
	if ref == nil {
		return
	}
	b.conditions.setVolume(ref, v.id, b.validityLocked(s), v.flags&flagResumed != 0)
}

// validityLocked is what the volume contributes to its pod's condition at this instant: a
// certificate within the expiry margin of its NotAfter counts as expired, whether or not a timer
// has fired yet. b.conditions is set and the table's lock is held.
func (b *board) validityLocked(shown *shownVolume) volumeValidity {
	s, w := shown.status, shown.watch
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

// recordEvent records an event on the volume's Pod, if there is a recorder and a Pod. Messages
// are built from the manager's own texts: never a key, a token or a CSR.
func (b *board) recordEvent(v *volume, eventType, reason, format string, args ...any) {
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
func (b *board) attemptStarted(v *volume) {
	b.metrics.IncrementIssueCallCountTotal(b.nodeHash, v.id)
}

// attemptEnded logs an attempt's outcome, counts it and shows it. A gate refusal
// counts as gate-pending; it is an issuance error too only for a caller's attempt (forCaller),
// whose caller sees it as one. next is when the loop attempts again (unused for a caller's
// attempt: kubelet retries the publish). A failure of a volume unmanaged meanwhile is logged and
// counted but not shown.
func (b *board) attemptEnded(v *volume, err error, forCaller bool, next time.Duration) {
	log := v.logger(b.log)
	switch {
	case err == nil:
		log.V(2).Info("Certificate issued")
	case errors.Is(err, ErrNotReadyToRequest):
		log.V(4).Info("Not ready to request a certificate yet", "reason", err.Error())
		b.metrics.IncrementGatePendingCountTotal(b.nodeHash, v.id)
		if forCaller {
			b.metrics.IncrementIssueErrorCountTotal(b.nodeHash, v.id)
		}
		b.gatePending(v, gateReason(err))
	case errors.Is(err, ErrPodTerminating) && v.is(flagTerminating):
		log.Info("The volume's pod is terminating: no further issuance attempt", "reason", err.Error())
	default:
		log.Error(err, "Issuance attempt failed")
		b.metrics.IncrementIssueErrorCountTotal(b.nodeHash, v.id)
		if v.ctx.Err() != nil {
			return
		}
		when := "when kubelet retries the mount"
		if !forCaller {
			when = describeDelay(b.clock.Now(), next)
		}
		b.attemptFailed(v, err, when)
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
func (b *board) certificateWritten(v *volume, namespace, name string, notAfter time.Time, first bool) {
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
		s.status = volumeStatus{hasCertificate: true}
		b.showConditionLocked(v, s)
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

// attemptFailed shows a failed attempt: the status, and a CertificateRequestFailed event
// saying when the next attempt is due.
func (b *board) attemptFailed(v *volume, err error, next string) {
	b.table.update(v, func(s *shownVolume) {
		s.status.last = outcomeFailed
		b.showConditionLocked(v, s)
	})
	reason := EventReasonCertificateRequestFailed
	if errors.Is(err, ErrPermissionDenied) {
		reason = EventReasonPermissionDenied
	}
	b.recordEvent(v, corev1.EventTypeWarning, reason, "Issuing the certificate failed: %v; next attempt %s", err, next)
}

// gatePending shows that the gate said "not yet", and records the ReadinessGatePending event
// once the gate has said so for GatePendingEventAfter.
func (b *board) gatePending(v *volume, reason string) {
	now := b.clock.Now()
	var since time.Duration
	send := false
	b.table.update(v, func(s *shownVolume) {
		s.status.last = outcomeGatePending
		b.showConditionLocked(v, s)
		if w := b.watch(s); w != nil {
			if w.gatePendingSince.IsZero() {
				w.gatePendingSince = now
			}
			since = now.Sub(w.gatePendingSince)
			send = since >= GatePendingEventAfter && !w.gateEventSent
			if send {
				w.gateEventSent = true
			}
		}
	})
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
	var notAfter time.Time
	if !b.table.update(v, func(s *shownVolume) { notAfter = b.watch(s).notAfter }) {
		return
	}
	if notAfter.IsZero() {
		// Outside the table's lock: the lookup reads the informer's cache.
		if notAfter = b.notAfterOf(v.id); notAfter.IsZero() {
			b.table.update(v, func(s *shownVolume) {
				b.watch(s).expiryUnknown = true
				b.showConditionLocked(v, s)
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
			b.showConditionLocked(v, s)
		}
		stopWatch(w)
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
	})
}

// certificateInvalid fires when a certificate enters the pod condition's expiry margin: the
// volume's pod is shown again.
func (b *board) certificateInvalid(v *volume, gen uint64) {
	b.table.update(v, func(s *shownVolume) {
		if s.watch != nil && s.watch.generation == gen {
			b.showConditionLocked(v, s)
		}
	})
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

// stopWatch stops a certificate watch's overdue and expiry timers; w may be nil.
func stopWatch(w *certificateWatch) {
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
	var notAfter time.Time
	passed := false
	b.table.update(v, func(s *shownVolume) {
		if s.watch == nil || s.watch.generation != gen || *flag(&s.status) {
			return
		}
		notAfter, passed = s.watch.notAfter, true
		*flag(&s.status) = true
		b.showConditionLocked(v, s)
	})
	if passed {
		b.recordEvent(v, corev1.EventTypeWarning, reason, format, append(args, notAfter.UTC().Format(time.RFC3339))...)
	}
}

// describeDelay says when an attempt is due, for event messages.
func describeDelay(now time.Time, d time.Duration) string {
	return fmt.Sprintf("in %s (at %s)", d.Round(time.Second), now.Add(d).UTC().Format(time.RFC3339))
}
