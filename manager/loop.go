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
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/cert-manager/csi-lib/internal/apihealth"
	"github.com/cert-manager/csi-lib/internal/lifetime"
	"github.com/cert-manager/csi-lib/internal/workqueue"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/storage"
)

// The renewal loops of the managed volumes (see the package documentation) run on the
// Manager's work queue: a volume is a key of the queue, and each time it is ready a worker takes
// one turn of its loop. A turn waits until the volume is due, makes an attempt, and waits again
// by the outcome's class, on the volume's own backoffs. Between turns the queue keeps the loop's
// state (loopState) and the wait's timer; no goroutine waits for a volume.

// loopState is what the work queue keeps of a volume's loop between two turns.
type loopState struct {
	// renewal and gate are working copies of the scheduled backoffs; resetting one copies its
	// template again.
	renewal, gate wait.Backoff
	// wait is what the volume waits for, which decides what may end the wait early.
	wait waitKind
	// polling: the wait is one GatePollInterval step of a gate wait, after which the gate is
	// asked again; left is what remains of the gate wait after this step.
	polling bool
	left    time.Duration
	// outage is the outage that failed the last attempt.
	outage apihealth.ID
	// known is the volume's metadata, just read, for the loop's first turn or after a gate poll
	// that found the gate open; nil: the turn reads it. gateOpen: the gate said yes to known.
	known    *metadata.Metadata
	gateOpen bool
	// first: the loop's first turn, which attempts at once if the volume is due; see backoff
	// for the wait after its gate refusal.
	first bool
}

// requeueEnds reports whether a Requeue ends a wait in state s: one until due, or for the gate.
// The work queue keeps the Requeue (Wake), and this is its rule. A Requeue ends such a wait at
// once. One that comes while a turn runs, before its attempt starts, is answered by that attempt
// (issue drops it: Unwake); one that comes later, or in a turn that makes no attempt, ends the
// wait the turn decides, if it is such a wait. Any other Requeue is answered by the turn to come,
// or by nothing (a wait after an error runs its time). So one Requeue adds at most one gate ask,
// and never changes which gate backoff step a refusal waits (see backoff).
func requeueEnds(s loopState) bool {
	return s.wait == waitUntilDue || s.wait == waitGatePending
}

// process is the work queue's processing of a volume: what ended its wait, then a turn (see
// turn), and the wait that follows it. tr is the worker's registration with Stop.
func (m *Manager) process(tr *lifetime.Tracked, v *managedVolume, s loopState, early bool) workqueue.Next[loopState] {
	switch {
	case v.is(flagClosed):
		return drop
	case early && s.wait == waitAfterOutage:
		v.logger().V(2).Info("The apiserver is reachable again: attempting now")
	case early:
		v.logger().V(4).Info("Requeued: re-evaluating now")
	case s.polling:
		// The gate is asked about the volume's current metadata; the loop ends if the volume was
		// unmanaged or the manager stopped while the gate ran. Metadata that cannot be read is
		// the turn's to handle: it reads again, and ends the loop if the metadata is gone, or
		// logs and backs off.
		meta, err := m.opts.MetadataReader.ReadMetadata(v.id)
		if err != nil {
			break
		}
		open := false
		if !tr.Outside(func() { open, _ = m.opts.ReadyToRequest(meta) }) {
			return drop
		}
		switch {
		case v.is(flagClosed):
			return drop
		case !open:
			return m.waitFor(s, s.left, waitGatePending)
		}
		v.logger().V(4).Info("Readiness gate opened: re-evaluating now")
		m.registry.setPod(v, podOf(meta))
		s.known, s.gateOpen = &meta, true
	}
	return m.turn(tr, v, s)
}

// drop ends a volume's loop: the volume is gone or unmanaged, its pod terminates, or the
// manager stopped.
var drop = workqueue.Next[loopState]{Drop: true}

// turn is one turn of the loop: it reads the volume's metadata (unless known) and, if the volume
// is due, makes an attempt on it. It returns what the loop does next: a turn again at once after
// a success (which reads the metadata the driver wrote), or a wait (see waitFor) until due, or
// after an attempt by the outcome's class (see backoff); a metadata read that failed is retried
// on the renewal backoff, logged and not counted as an issuance error. A volume whose pod
// terminates makes no attempt any more: its loop ends, and the volume stays managed until it is
// unmanaged.
func (m *Manager) turn(tr *lifetime.Tracked, v *managedVolume, s loopState) workqueue.Next[loopState] {
	first := s.first
	s.first = false
	var meta metadata.Metadata
	var err error
	gateOpen := s.gateOpen
	s.gateOpen = false
	if known := s.known; known != nil {
		s.known, meta = nil, *known
	} else if meta, err = m.opts.MetadataReader.ReadMetadata(v.id); err == nil {
		m.registry.setPod(v, podOf(meta))
	}
	switch {
	case errors.Is(err, storage.ErrNotFound):
		v.logger().Info("Volume metadata is gone; no longer managing the volume")
		m.end(v, false)
		return drop
	case err != nil:
		v.logger().Error(err, "Cannot read volume metadata")
		return m.waitFor(s, s.renewal.Step(), waitAfterError)
	}
	last := v.lastWritten()
	renewAt, held := heldTo(meta, last)
	wait := untilDue(meta, last, m.opts.Clock.Now())
	m.status.noteCertificate(v, hasCertificate(meta), renewAt, held)
	if wait > 0 {
		return m.waitFor(s, wait, waitUntilDue)
	}

	outcome := m.issue(tr, v, meta, gateOpen)
	switch {
	case errors.Is(outcome, errStopped):
		return drop
	case errors.Is(outcome, ErrPodTerminating) && v.is(flagTerminating):
		m.status.attemptFailed(v, outcome, false, 0)
		return drop
	}
	delay, kind := m.backoff(&s, outcome, first)
	if outcome != nil {
		m.status.attemptFailed(v, outcome, false, delay)
		v.logger().V(4).Info("Waiting before the next issuance attempt", "delay", delay, "gate_pending", kind == waitGatePending)
	}
	return m.waitFor(s, delay, kind)
}

// backoff steps the loop's backoffs by an attempt's outcome and returns the wait it calls for:
// none after a success (both backoffs reset); the gate's backoff after ErrNotReadyToRequest (the
// renewal backoff resets); the renewal backoff after any other error (the gate's resets), which
// only the end of an outage ends early when the apiserver could not be reached.
//
// A gate refusal in the loop's first turn (first) waits the gate backoff's first step without
// taking it, so the next refusal waits that step again. Upstream's loop first asks the gate one
// 1 s tick after the volume is managed and steps its backoff from there; this loop asks at once
// instead (a publish whose gate was closed hands its volume over, and a test whose fake clock
// never moves must still see the gate asked again), and the step it waits stands for upstream's
// tick. Taking it would start the steps a tick early, so the long ones would begin while gates
// that open within seconds are still closed (hack/bench: gate-open to request p50 1.5 s against
// 0.9 s for upstream's schedule, at fewer asks than now).
func (m *Manager) backoff(s *loopState, outcome error, first bool) (time.Duration, waitKind) {
	switch {
	case outcome == nil:
		s.renewal, s.gate = *m.opts.RenewalBackoffConfig, *m.opts.GateBackoffConfig
		return 0, noWait
	case errors.Is(outcome, ErrNotReadyToRequest) && first:
		s.renewal = *m.opts.RenewalBackoffConfig
		untaken := s.gate
		return untaken.Step(), waitGatePending
	case errors.Is(outcome, ErrNotReadyToRequest):
		s.renewal = *m.opts.RenewalBackoffConfig
		return s.gate.Step(), waitGatePending
	}
	s.gate = *m.opts.GateBackoffConfig
	delay := s.renewal.Step()
	if id, told := m.health.AttemptFailed(outcome); told {
		s.outage = id
		return delay, waitAfterOutage
	}
	return delay, waitAfterError
}

// waitKind says what a loop is waiting for, which decides what may end the wait early.
type waitKind int

const (
	// noWait: the volume is ready for a turn (a loop that starts, or after a success).
	noWait waitKind = iota
	// waitUntilDue: the certificate is not due yet. Requeue ends the wait; nothing is polled,
	// so a volume that is not due costs nothing.
	waitUntilDue
	// waitGatePending: the readiness gate said "not yet". Requeue ends the wait, and so does the
	// gate itself, asked again every GatePollInterval.
	waitGatePending
	// waitAfterError: an issuance error. Nothing ends the wait early, which protects signers
	// and the apiserver.
	waitAfterError
	// waitAfterOutage: the apiserver could not be reached. The end of the outage ends the wait
	// (see apihealth); nothing else does.
	waitAfterOutage
)

// waitFor is the queue's wait of d for kind (zero or less: a turn at once). The queue ends it at
// once if a Requeue it kept during the turn ends it (requeueEnds); a gate wait longer than
// GatePollInterval waits one poll interval at a time.
func (m *Manager) waitFor(s loopState, d time.Duration, kind waitKind) workqueue.Next[loopState] {
	s.wait, s.polling, s.left = kind, false, 0
	if d <= 0 {
		return workqueue.Next[loopState]{State: s}
	}
	if poll := m.opts.GatePollInterval; kind == waitGatePending && poll > 0 && d > poll {
		s.polling, s.left = true, d-poll
		d = poll
	}
	return workqueue.Next[loopState]{After: d, State: s}
}

// issue is the loop's attempt (gateOpen: a gate poll asked the gate about meta, and it said
// yes): it ends when the volume is unmanaged, the manager stops, or after issueTimeout on the
// injected clock. Any error once the volume is unmanaged is errStopped:
// not an issuance failure. The attempt answers the Requeue the queue kept during the turn, which
// it drops as it starts (see requeueEnds).
func (m *Manager) issue(tr *lifetime.Tracked, v *managedVolume, meta metadata.Metadata, gateOpen bool) error {
	m.queue.Unwake(v)
	ctx, deadline := attemptContext(m.opts.Clock)
	err := (&issueAttempt{m: m, v: v, meta: meta, gateOpen: gateOpen, tr: tr, deadline: deadline}).run(ctx, deadline.end)
	// Stop the deadline timer before the outcome is visible (logs, metrics), so an observer that
	// sees the outcome never sees the attempt's timer still pending.
	deadline.finish()
	if v.is(flagClosed) && err != nil {
		return errStopped
	}
	return err
}
