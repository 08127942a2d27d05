package manager

import (
	"context"
	"errors"
	"time"

	"k8s.io/utils/clock"

	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/storage"
)

// run is the renewal loop of one volume; see the package documentation. If first is non-nil it
// is the outcome of an attempt made before the loop started.
func (m *Manager) run(v *volume, first *error, known *metadata.Metadata) {
	defer m.loops.Done()
	defer close(v.done)

	// Working copies of the pristine templates; resetting one copies its template again.
	renewal, gate := *m.opts.RenewalBackoffConfig, *m.opts.GateBackoffConfig

	outcome, haveOutcome := error(nil), false
	if first != nil {
		outcome, haveOutcome = *first, true
	}
	for {
		if !haveOutcome {
			wait, err := m.untilDue(v, known)
			known = nil
			switch {
			case errors.Is(err, storage.ErrNotFound):
				v.log.Info("Volume metadata is gone; no longer managing the volume")
				m.forget(v.id)
				return
			case err != nil:
				// Storage trouble counts as a failed attempt: back off on the renewal backoff.
				v.log.Error(err, "Cannot read volume metadata")
				m.opts.Metrics.IncrementIssueErrorCountTotal(m.nodeNameHash, v.id)
				outcome = err
			case wait > 0:
				if !m.sleep(v, wait, true) {
					return
				}
				continue
			default:
				outcome = m.attemptOnce(v.ctx, v)
			}
		}
		haveOutcome = false

		var delay time.Duration
		requeueable := false
		switch {
		case outcome == nil:
			renewal, gate = *m.opts.RenewalBackoffConfig, *m.opts.GateBackoffConfig
			continue
		case errors.Is(outcome, ErrNotReadyToRequest):
			delay = gate.Step()
			renewal = *m.opts.RenewalBackoffConfig
			requeueable = true
		default:
			delay = renewal.Step()
			gate = *m.opts.GateBackoffConfig
		}
		if v.ctx.Err() != nil {
			return
		}
		v.log.V(4).Info("Waiting before the next issuance attempt", "delay", delay, "gate_pending", requeueable)
		if !m.sleep(v, delay, requeueable) {
			return
		}
	}
}

// untilDue reads the volume's metadata and returns how long until it is due (zero or less:
// due now).
// known, if non-nil, is metadata read just before, used instead of reading again.
func (m *Manager) untilDue(v *volume, known *metadata.Metadata) (time.Duration, error) {
	var meta metadata.Metadata
	if known != nil {
		meta = *known
	} else {
		var err error
		if meta, err = m.opts.MetadataReader.ReadMetadata(v.id); err != nil {
			return 0, err
		}
	}
	now := m.clock.Now()
	due := meta.NextIssuanceTime
	if due == nil || due.IsZero() || !due.After(now) {
		// WriteKeypair may not persist the next issuance time (a driver that writes only files);
		// then the default computed by the last success still holds.
		if fb := v.fallbackDue.Load(); fb != nil && fb.After(now) {
			return fb.Sub(now), nil
		}
		return 0, nil
	}
	return due.Sub(now), nil
}

// sleep waits for d on the injected clock. It returns false if the volume was unmanaged or the
// manager stopped. If requeueable, a Requeue ends the wait early. A delay of zero or less does
// not wait.
func (m *Manager) sleep(v *volume, d time.Duration, requeueable bool) bool {
	if d <= 0 {
		return v.ctx.Err() == nil
	}
	var requeue <-chan struct{}
	if requeueable {
		requeue = v.requeue
	}
	t := m.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-requeue:
		v.log.V(4).Info("Requeued: re-evaluating now")
		return true
	case <-v.ctx.Done():
		return false
	}
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

// attemptOnce makes one issuance attempt for v, never overlapping another attempt for v.
func (m *Manager) attemptOnce(ctx context.Context, v *volume) error {
	release, err := m.acquireAttempt(ctx, v)
	if err != nil {
		return err
	}
	return m.attemptLocked(ctx, v, release)
}

// attemptLocked runs one attempt while holding the attempt slot, then releases it. The attempt
// ends when ctx ends, when the volume is unmanaged, or after issueTimeout on the injected clock.
// It logs and counts the outcome.
func (m *Manager) attemptLocked(ctx context.Context, v *volume, release func()) error {
	defer release()
	// A Requeue that arrived before this attempt is answered by it.
	select {
	case <-v.requeue:
	default:
	}
	ctx, cancel := m.attemptContext(ctx, v)
	err := m.issue(ctx, v)
	// Stop the deadline timer before the outcome is visible (logs, metrics), so an observer that
	// sees the outcome never sees the attempt's timer still pending.
	cancel()
	switch {
	case err == nil:
		v.log.V(2).Info("Certificate issued")
	case errors.Is(err, ErrNotReadyToRequest):
		v.log.V(4).Info("Not ready to request a certificate yet", "reason", err.Error())
		m.opts.Metrics.IncrementGatePendingCountTotal(m.nodeNameHash, v.id)
	case v.ctx.Err() != nil:
		// Unmanaged or stopped mid-attempt: not an issuance failure.
		err = errStopped
	default:
		v.log.Error(err, "Issuance attempt failed")
		m.opts.Metrics.IncrementIssueErrorCountTotal(m.nodeNameHash, v.id)
	}
	return err
}

// attemptContext derives the context of one attempt: it ends with parent, with the volume, or
// after issueTimeout on the injected clock. The returned cancel stops the timer synchronously,
// so a fake clock shows no stray waiter once the attempt is over.
func (m *Manager) attemptContext(parent context.Context, v *volume) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	stopWithVolume := context.AfterFunc(v.ctx, func() { cancel(errStopped) })
	var stopTimer func() bool
	if dc, ok := m.clock.(clock.WithDelayedExecution); ok {
		// No goroutine per attempt: the clock calls back when the deadline passes.
		stopTimer = dc.AfterFunc(issueTimeout, func() { cancel(errAttemptTimeout) }).Stop
	} else {
		t := m.clock.NewTimer(issueTimeout)
		stopTimer = t.Stop
		go func() {
			select {
			case <-t.C():
				cancel(errAttemptTimeout)
			case <-ctx.Done():
			}
		}()
	}
	return ctx, func() {
		stopTimer()
		stopWithVolume()
		cancel(nil)
	}
}
