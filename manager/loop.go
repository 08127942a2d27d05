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
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/cert-manager/csi-lib/internal/apicall"
	"github.com/cert-manager/csi-lib/internal/lifetime"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/storage"
)

// loop is the renewal loop of one volume (see the package documentation): it waits until the
// volume is due, makes an attempt, and waits again by the outcome's class, on its own backoffs.
type loop struct {
	iss      *issuer
	table    *volumeTable
	schedule loopSchedule
	v        *managedVolume
	tr       *lifetime.Tracked // the loop goroutine's registration with Stop
	// renewal and gate are working copies of the scheduled backoffs; resetting one copies its
	// template again.
	renewal, gate wait.Backoff
	// outageOver is closed when the outage that failed the last attempt ends.
	outageOver <-chan struct{}
}

// loopSchedule is how loops wait after an attempt: Options.RenewalBackoffConfig,
// GateBackoffConfig and GatePollInterval, as completed.
type loopSchedule struct {
	renewal, gate wait.Backoff
	gatePoll      time.Duration
}

func loopScheduleOf(o Options) loopSchedule {
	return loopSchedule{renewal: *o.RenewalBackoffConfig, gate: *o.GateBackoffConfig, gatePoll: o.GatePollInterval}
}

// runLoop runs a volume's loop; the loop's state lives on the goroutine's stack.
func runLoop(iss *issuer, table *volumeTable, schedule loopSchedule, v *managedVolume, tr *lifetime.Tracked, known *metadata.Metadata) {
	l := loop{iss: iss, table: table, schedule: schedule, v: v, tr: tr, renewal: schedule.renewal, gate: schedule.gate}
	l.run(known)
}

// run runs the loop until the volume is unmanaged or the manager stops. known, if non-nil, is
// the volume's metadata, just read.
func (l *loop) run(known *metadata.Metadata) {
	defer l.tr.Done()
	for {
		delay, kind, next := l.turn(known)
		known = nil
		switch {
		case next == endLoop:
			return
		case next == waitThenTurn && !l.sleep(delay, kind):
			return
		}
	}
}

// afterTurn is what the loop does after a turn.
type afterTurn int

const (
	waitThenTurn afterTurn = iota // wait (sleep) for the delay, then turn again
	turnAgain                     // turn again at once: after a success, which reads the metadata anew
	endLoop                       // the volume is gone or unmanaged, or the manager stopped
)

// turn is one turn of the loop: it reads the volume's metadata (unless known) and, if the volume
// is due, makes an attempt. It returns what the loop does next and, to wait, how long and what
// may end the wait early: until due; after an attempt, by the outcome's class (see backoff); a
// metadata read that failed is retried on the renewal backoff, logged and not counted as an
// issuance error. A volume whose pod terminates makes no attempt any more: its loop waits to be
// unmanaged, and ends.
func (l *loop) turn(known *metadata.Metadata) (time.Duration, waitKind, afterTurn) {
	iss, v := l.iss, l.v
	var meta metadata.Metadata
	var err error
	if known != nil {
		meta = *known
	} else if meta, err = iss.store.ReadMetadata(v.id); err == nil {
		l.table.note(v, meta)
	}
	switch {
	case errors.Is(err, storage.ErrNotFound):
		v.logger(iss.log).Info("Volume metadata is gone; no longer managing the volume")
		l.table.remove(v)
		v.ctx.Cancel()
		return 0, 0, endLoop
	case err != nil:
		v.logger(iss.log).Error(err, "Cannot read volume metadata")
		return l.renewal.Step(), waitAfterError, waitThenTurn
	}
	last := v.lastWritten()
	renewAt, held := heldTo(meta, last)
	wait := untilDue(meta, last, iss.clock.Now())
	if held {
		iss.board.watchCertificate(v, renewAt)
	}
	if wait > 0 {
		return wait, waitUntilDue, waitThenTurn
	}

	outcome := l.issue()
	if errors.Is(outcome, errStopped) {
		return 0, 0, endLoop
	}
	terminated := errors.Is(outcome, ErrPodTerminating) && v.is(flagTerminating)
	var delay time.Duration
	kind := waitAfterError
	if !terminated {
		delay, kind = l.backoff(outcome)
	}
	iss.board.attemptEnded(v, outcome, false, delay)
	switch {
	case terminated:
		<-v.ctx.Done()
		return 0, 0, endLoop
	case outcome == nil:
		return 0, 0, turnAgain
	}
	v.logger(iss.log).V(4).Info("Waiting before the next issuance attempt", "delay", delay, "gate_pending", kind == waitGatePending)
	return delay, kind, waitThenTurn
}

// backoff steps the loop's backoffs by an attempt's outcome and returns the wait it calls for:
// none after a success (both backoffs reset); the gate's backoff after ErrNotReadyToRequest (the
// renewal backoff resets); the renewal backoff after any other error (the gate's resets), which
// only the end of an outage ends early when the apiserver could not be reached.
func (l *loop) backoff(outcome error) (time.Duration, waitKind) {
	switch {
	case outcome == nil:
		l.renewal, l.gate = l.schedule.renewal, l.schedule.gate
		return 0, waitAfterError
	case errors.Is(outcome, ErrNotReadyToRequest):
		l.renewal = l.schedule.renewal
		return l.gate.Step(), waitGatePending
	}
	l.gate = l.schedule.gate
	delay := l.renewal.Step()
	if apicall.Unreachable(outcome) {
		l.outageOver = l.iss.outage.Noticed()
		return delay, waitAfterOutage
	}
	return delay, waitAfterError
}

// waitKind says what a loop is waiting for, which decides what may end the wait early.
type waitKind int

const (
	// waitUntilDue: the certificate is not due yet. Requeue ends the wait; nothing is polled,
	// so a volume that is not due costs nothing.
	waitUntilDue waitKind = iota
	// waitGatePending: the readiness gate said "not yet". Requeue ends the wait, and so does the
	// gate itself, asked again every GatePollInterval.
	waitGatePending
	// waitAfterError: an issuance error. Nothing ends the wait early, which protects signers
	// and the apiserver.
	waitAfterError
	// waitAfterOutage: the apiserver could not be reached. The end of the outage ends the wait
	// (see outage); nothing else does.
	waitAfterOutage
)

// sleep waits for d on the injected clock; kind says what may end it early. It returns false
// if the volume was unmanaged or the manager stopped. A delay of zero or less does not wait.
func (l *loop) sleep(d time.Duration, kind waitKind) bool {
	v, poll := l.v, l.schedule.gatePoll
	var requeue, outageOver <-chan struct{}
	switch kind {
	case waitAfterError:
	case waitAfterOutage:
		outageOver = l.outageOver
	default:
		requeue = v.requeue
	}
	for d > 0 {
		step, polling := d, false
		if kind == waitGatePending && poll > 0 && d > poll {
			step, polling = poll, true
		}
		t := l.iss.clock.NewTimer(step)
		select {
		case <-t.C():
		case <-requeue:
			t.Stop()
			v.logger(l.iss.log).V(4).Info("Requeued: re-evaluating now")
			return true
		case <-outageOver:
			t.Stop()
			v.logger(l.iss.log).V(2).Info("The apiserver is reachable again: attempting now")
			return true
		case <-v.ctx.Done():
			t.Stop()
			return false
		}
		if !polling {
			break
		}
		d -= step
		open, alive := l.gateOpens()
		if !alive {
			return false
		}
		if open {
			v.logger(l.iss.log).V(4).Info("Readiness gate opened: re-evaluating now")
			return true
		}
	}
	return v.ctx.Err() == nil
}

// gateOpens asks the readiness gate about the volume's current metadata. alive is false if the
// manager stopped while the gate ran.
func (l *loop) gateOpens() (open, alive bool) {
	v := l.v
	meta, err := l.iss.store.ReadMetadata(v.id)
	if err != nil {
		return false, v.ctx.Err() == nil
	}
	if !l.tr.Outside(func() { open, _ = l.iss.driver.readyToRequest(meta) }) {
		return false, false
	}
	return open, v.ctx.Err() == nil
}

// issue is the loop's attempt: it ends when the volume is unmanaged, the manager stops, or
// after issueTimeout on the injected clock. Any error once the volume is unmanaged is errStopped:
// not an issuance failure.
func (l *loop) issue() error {
	v := l.v
	ctx, deadline, end, cancel := attemptContext(l.iss.clock, v)
	err := (&issueAttempt{iss: l.iss, v: v, tr: l.tr, deadline: deadline}).run(ctx, end)
	// Stop the deadline timer before the outcome is visible (logs, metrics), so an observer that
	// sees the outcome never sees the attempt's timer still pending.
	cancel()
	if v.ctx.Err() != nil && err != nil {
		return errStopped
	}
	return err
}

// issueForCaller is ManageVolumeImmediate's and a publish's attempt: on the caller's goroutine,
// under the caller's ctx (and the volume's). It runs before the volume's loop starts, so it never
// overlaps another attempt of the volume.
// meta is the volume's metadata as the caller just read it; gateOpen says the caller asked the
// gate already. Every error it returns counts as an issuance error, the gate's refusal and the
// caller's deadline included.
func (iss *issuer) issueForCaller(ctx context.Context, v *managedVolume, meta metadata.Metadata, gateOpen bool) error {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(v.ctx, func() { cancel(errStopped) })
	err := (&issueAttempt{iss: iss, v: v, known: &meta, gateOpen: gateOpen}).run(ctx, cancel)
	stop()
	cancel(nil)
	iss.board.attemptEnded(v, err, true, 0)
	return err
}

// run makes the attempt under ctx, which end ends with a cause (unmanaged, the pod terminating,
// the deadline), as the volume's attempt in flight. A Requeue that arrived before it is dropped:
// the attempt answers it. An attempt ended because its pod terminates returns an error matching
// ErrPodTerminating, whatever the call it was in reported (often only a cancelled context).
func (a *issueAttempt) run(ctx context.Context, end context.CancelCauseFunc) error {
	select {
	case <-a.v.requeue:
	default:
	}
	a.v.attemptStarted(end)
	err := a.issue(ctx)
	a.v.attemptDone()
	if err != nil && !errors.Is(err, ErrPodTerminating) && errors.Is(context.Cause(ctx), ErrPodTerminating) {
		return fmt.Errorf("%w: %v", ErrPodTerminating, err)
	}
	return err
}
