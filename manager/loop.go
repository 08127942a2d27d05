package manager

import (
	"context"
	"errors"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/storage"
)

// run is the renewal loop of one volume; see the package documentation. tr is its registration
// with Stop. known, if non-nil, is the volume's metadata, just read.
func (m *Manager) run(v *volume, tr *tracked, known *metadata.Metadata) {
	defer tr.done()

	// Working copies of the pristine templates; resetting one copies its template again.
	renewal, gate := *m.opts.RenewalBackoffConfig, *m.opts.GateBackoffConfig
	for {
		wait, err := m.untilDue(v, known)
		known = nil
		switch {
		case errors.Is(err, storage.ErrNotFound):
			m.logFor(v).Info("Volume metadata is gone; no longer managing the volume")
			m.unmanageFromLoop(v)
			return
		case err != nil:
			// Logged, not counted as an issuance error (upstream's rule); retried on the
			// renewal backoff.
			m.logFor(v).Error(err, "Cannot read volume metadata")
			if !m.sleep(v, tr, renewal.Step(), waitAfterError) {
				return
			}
			continue
		}
		wait = max(wait, m.untilSuccessFloor(v))
		if wait > 0 {
			if !m.sleep(v, tr, wait, waitUntilDue) {
				return
			}
			continue
		}

		outcome := m.attemptInLoop(v, tr)
		var delay time.Duration
		kind, gatePending := waitAfterError, false
		switch {
		case outcome == nil:
			renewal, gate = *m.opts.RenewalBackoffConfig, *m.opts.GateBackoffConfig
			continue
		case errors.Is(outcome, errStopped) || v.ctx.Err() != nil:
			return
		case errors.Is(outcome, ErrNotReadyToRequest):
			delay = gate.Step()
			renewal = *m.opts.RenewalBackoffConfig
			kind, gatePending = waitGatePending, true
			m.gatePending(v, gateReason(outcome))
		default:
			delay = renewal.Step()
			gate = *m.opts.GateBackoffConfig
			m.attemptFailed(v, outcome, m.describeDelay(delay))
		}
		m.logFor(v).V(4).Info("Waiting before the next issuance attempt", "delay", delay, "gate_pending", gatePending)
		if !m.sleep(v, tr, delay, kind) {
			return
		}
	}
}

// unmanageFromLoop stops managing a volume whose metadata disappeared (removed behind the
// manager's back). The loop itself calls it, so it only unregisters and cancels.
func (m *Manager) unmanageFromLoop(v *volume) {
	m.mu.Lock()
	m.unregisterLocked(v)
	m.mu.Unlock()
	v.cancel()
}

// untilDue reads the volume's metadata (or uses known) and returns how long until it is due:
// zero or less means due now. Due means NextIssuanceTime is nil, zero, or not after now. A
// WriteKeypair that persisted no future time leaves the default of the last success in force.
func (m *Manager) untilDue(v *volume, known *metadata.Metadata) (time.Duration, error) {
	var meta metadata.Metadata
	if known != nil {
		meta = *known
	} else {
		var err error
		if meta, err = m.opts.MetadataReader.ReadMetadata(v.id); err != nil {
			return 0, err
		}
		m.noteMetadata(v, meta)
	}
	now := m.clock.Now()
	if hasCertificate(meta) {
		m.watchCertificate(v, *meta.NextIssuanceTime)
	}
	if hasCertificate(meta) && meta.NextIssuanceTime.After(now) {
		return meta.NextIssuanceTime.Sub(now), nil
	}
	if last := v.lastWrite.Load(); last != nil && last.due.After(now) {
		return last.due.Sub(now), nil
	}
	return 0, nil
}

// untilSuccessFloor returns how long until the volume may be attempted again after its last
// success: minWaitAfterSuccess after the key pair was written, whichever attempt wrote it (the
// publish's or the loop's). It holds even when the new certificate is already due (signer or
// clock skew), so that such a certificate never turns the loop into a hot loop, and a Requeue
// does not cut it short.
func (m *Manager) untilSuccessFloor(v *volume) time.Duration {
	last := v.lastWrite.Load()
	if last == nil {
		return 0
	}
	return last.at.Add(minWaitAfterSuccess).Sub(m.clock.Now())
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
)

// sleep waits for d on the injected clock; kind says what may end it early. It returns false
// if the volume was unmanaged or the manager stopped. A delay of zero or less does not wait.
func (m *Manager) sleep(v *volume, tr *tracked, d time.Duration, kind waitKind) bool {
	var requeue <-chan struct{}
	if kind != waitAfterError {
		requeue = v.requeue
	}
	for d > 0 {
		step, poll := d, false
		if kind == waitGatePending && m.opts.GatePollInterval > 0 && d > m.opts.GatePollInterval {
			step, poll = m.opts.GatePollInterval, true
		}
		t := m.clock.NewTimer(step)
		select {
		case <-t.C():
		case <-requeue:
			t.Stop()
			m.logFor(v).V(4).Info("Requeued: re-evaluating now")
			return true
		case <-v.ctx.Done():
			t.Stop()
			return false
		}
		if !poll {
			break
		}
		d -= step
		open, alive := m.gateOpens(v, tr)
		if !alive {
			return false
		}
		if open {
			m.logFor(v).V(4).Info("Readiness gate opened: re-evaluating now")
			return true
		}
	}
	return v.ctx.Err() == nil
}

// gateOpens asks the readiness gate about the volume's current metadata. alive is false if the
// manager stopped while the gate ran.
func (m *Manager) gateOpens(v *volume, tr *tracked) (open, alive bool) {
	meta, err := m.opts.MetadataReader.ReadMetadata(v.id)
	if err != nil {
		return false, v.ctx.Err() == nil
	}
	if !tr.outside(func() { open, _ = m.opts.ReadyToRequest(meta) }) {
		return false, false
	}
	return open, v.ctx.Err() == nil
}

// acquireAttempt takes the volume's attempt slot, waiting until it is free, ctx ends or the
// volume is unmanaged.
func (m *Manager) acquireAttempt(ctx context.Context, v *volume) (release func(), err error) {
	select {
	case v.attempt <- struct{}{}:
		return func() { <-v.attempt }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-v.ctx.Done():
		return nil, errStopped
	}
}

// attemptNow is ManageVolumeImmediate's attempt: on the caller's goroutine, under the caller's
// ctx (and the volume's), never overlapping another attempt of the volume. Every error it
// returns is counted as an issuance error, the gate's refusal and the caller's deadline
// included, as upstream counts them.
func (m *Manager) attemptNow(ctx context.Context, v *volume) error {
	release, err := m.acquireAttempt(ctx, v)
	if err != nil {
		m.opts.Metrics.IncrementIssueErrorCountTotal(m.nodeNameHash, v.id)
		return err
	}
	defer release()
	m.drainRequeue(v)
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(v.ctx, func() { cancel(errStopped) })
	err = m.issue(ctx, &attempt{v: v})
	stop()
	cancel(nil)
	m.recordOutcome(v, err, true)
	switch {
	case err == nil:
	case errors.Is(err, ErrNotReadyToRequest):
		m.gatePending(v, gateReason(err))
	case v.ctx.Err() == nil:
		m.attemptFailed(v, err, "")
	}
	return err
}

// gateReason is the reason the readiness gate gave, from an error matching ErrNotReadyToRequest.
func gateReason(err error) string {
	var nr *NotReadyToRequestError
	if errors.As(err, &nr) {
		return nr.Reason
	}
	return err.Error()
}

// attemptInLoop is a background attempt: it ends when the volume is unmanaged, the manager
// stops, or after issueTimeout on the injected clock.
func (m *Manager) attemptInLoop(v *volume, tr *tracked) error {
	release, err := m.acquireAttempt(v.ctx, v)
	if err != nil {
		return errStopped
	}
	defer release()
	m.drainRequeue(v)
	ctx, deadline, cancel := m.attemptContext(v)
	err = m.issue(ctx, &attempt{v: v, tr: tr, deadline: deadline})
	// Stop the deadline timer before the outcome is visible (logs, metrics), so an observer that
	// sees the outcome never sees the attempt's timer still pending.
	cancel()
	if v.ctx.Err() != nil && err != nil {
		// Unmanaged or stopped mid-attempt: not an issuance failure.
		return errStopped
	}
	m.recordOutcome(v, err, false)
	return err
}

// drainRequeue drops a Requeue that arrived before an attempt: the attempt answers it.
func (m *Manager) drainRequeue(v *volume) {
	select {
	case <-v.requeue:
	default:
	}
}

// recordOutcome logs an attempt's outcome and counts it. A gate refusal is counted as
// gate-pending; it is an issuance error only for an immediate attempt (upstream's rule).
func (m *Manager) recordOutcome(v *volume, err error, immediate bool) {
	log := m.logFor(v)
	switch {
	case err == nil:
		log.V(2).Info("Certificate issued")
	case errors.Is(err, ErrNotReadyToRequest):
		log.V(4).Info("Not ready to request a certificate yet", "reason", err.Error())
		m.opts.Metrics.IncrementGatePendingCountTotal(m.nodeNameHash, v.id)
		if immediate {
			m.opts.Metrics.IncrementIssueErrorCountTotal(m.nodeNameHash, v.id)
		}
	default:
		log.Error(err, "Issuance attempt failed")
		m.opts.Metrics.IncrementIssueErrorCountTotal(m.nodeNameHash, v.id)
	}
}

// attemptContext derives a background attempt's context: it ends with the volume, or after
// issueTimeout on the injected clock. The returned cancel stops the timer synchronously, so a
// fake clock shows no stray waiter once the attempt is over.
func (m *Manager) attemptContext(v *volume) (context.Context, *attemptDeadline, func()) {
	ctx, cancel := context.WithCancelCause(v.ctx)
	d := &attemptDeadline{m: m, cancel: cancel}
	d.restart()
	return ctx, d, func() {
		d.pause()
		cancel(nil)
	}
}

// attemptDeadline is a background attempt's issueTimeout timer. It is paused while the attempt
// waits for admission, and restarted in full once the attempt is admitted.
type attemptDeadline struct {
	m      *Manager
	cancel context.CancelCauseFunc
	mu     sync.Mutex
	stop   func() bool
}

// pause stops the timer; it reports false if the deadline has already passed.
func (d *attemptDeadline) pause() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stop == nil {
		return true
	}
	ok := d.stop()
	d.stop = nil
	return ok
}

// restart arms the timer for a full issueTimeout from now.
func (d *attemptDeadline) restart() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stop != nil {
		d.stop()
	}
	d.stop = d.m.afterFunc(issueTimeout, func() { d.cancel(errAttemptTimeout) })
}

// afterFunc calls f, on a goroutine of its own, once d has passed on the injected clock, unless
// the returned stop is called first (stop reports whether it prevented the call). With a clock
// that offers AfterFunc no goroutine waits; otherwise one does, and stop ends it.
func (m *Manager) afterFunc(d time.Duration, f func()) (stop func() bool) {
	if d <= 0 {
		// Already due: a fake clock that is never stepped would not fire it.
		go f()
		return func() bool { return false }
	}
	if dc, ok := m.clock.(clock.WithDelayedExecution); ok {
		// f runs on its own goroutine: a fake clock calls AfterFunc functions from Step with
		// its lock held, and f may take a lock whose holder reads the clock.
		return dc.AfterFunc(d, func() { go f() }).Stop
	}
	t := m.clock.NewTimer(d)
	done := make(chan struct{})
	var once sync.Once
	go func() {
		select {
		case <-t.C():
			f()
		case <-done:
		}
	}()
	return func() bool {
		stopped := t.Stop()
		once.Do(func() { close(done) })
		return stopped
	}
}
