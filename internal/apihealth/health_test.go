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

package apihealth

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	testclock "k8s.io/utils/clock/testing"

	"github.com/cert-manager/csi-lib/internal/lifetime"
)

var (
	connectionRefused = &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	connectionReset   = &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
)

// probes is a probe that reports each call on calls and answers with the next error of answers.
type probes struct {
	calls   chan struct{}
	answers chan error
	ended   chan ID
}

func newProbes() *probes {
	return &probes{calls: make(chan struct{}), answers: make(chan error), ended: make(chan ID, 1)}
}

// probe reports its call and returns the answer it is given, or the context's end: a test that
// fails early leaves no probe behind.
func (p *probes) probe(ctx context.Context) error {
	select {
	case p.calls <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-p.answers:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// called waits, with a bound, for the next probe.
func (p *probes) called(t *testing.T) {
	t.Helper()
	select {
	case <-p.calls:
	case <-time.After(10 * time.Second):
		t.Fatal("the apiserver was not probed")
	}
}

// noticed is a Health on a fake clock, told of an attempt that failed for want of the apiserver,
// whose outage ID it returns; its first probe has been called and waits for its answer on
// p.answers. The outages its outageEnded hook is told of go to p.ended.
func noticed(t *testing.T) (*testclock.FakeClock, *probes, *Health, ID) {
	clk := testclock.NewFakeClock(time.Now())
	life := lifetime.New()
	t.Cleanup(life.End)
	p := newProbes()
	h := New(clk, p.probe, life, func(id ID) { p.ended <- id })
	id, probed := h.AttemptFailed(connectionRefused)
	if !probed {
		t.Fatal("an unreachable apiserver's outage will not be told to end")
	}
	p.called(t)
	return clk, p, h, id
}

// waitForTimer yields until the probing goroutine has armed its timer on clk.
func waitForTimer(clk *testclock.FakeClock) {
	for !clk.HasWaiters() {
		runtime.Gosched()
	}
}

// notEnded fails the test if the outageEnded hook was told of an outage.
func notEnded(t *testing.T, p *probes, why string) {
	t.Helper()
	select {
	case <-p.ended:
		t.Fatal(why)
	default:
	}
}

func suspect(h *Health) bool {
	s, _ := h.WatchSuspect()
	return s
}

// TestAnOutageEndsWhenAProbeAnswersAfterOneFailed: New's outageEnded hook is told of the
// outage's ID once a probe answers after one failed, and not before; probes repeat every
// ProbeInterval on the clock; a second failure during the outage shares the first's probe and
// ID, and a failure after the outage ended belongs to another.
func TestAnOutageEndsWhenAProbeAnswersAfterOneFailed(t *testing.T) {
	clk, p, h, id := noticed(t)
	p.answers <- errors.New("connection refused")
	waitForTimer(clk)
	if next, _ := h.AttemptFailed(connectionReset); next != id || !h.Probing() {
		t.Fatal("a second failure during the outage did not share the running probe")
	}
	clk.Step(ProbeInterval - time.Nanosecond)
	select {
	case <-p.calls:
		t.Fatal("probed again before ProbeInterval")
	default:
	}
	clk.Step(time.Nanosecond)
	p.called(t)
	notEnded(t, p, "the outage ended before a probe answered")
	p.answers <- nil
	if ended := <-p.ended; ended != id {
		t.Errorf("the ended hook was told of outage %d, want %d", ended, id)
	}
	for h.Probing() {
		runtime.Gosched()
	}
	if next, _ := h.AttemptFailed(connectionRefused); next == id {
		t.Error("a failure after the outage ended got the ended outage's ID")
	}
	p.called(t)
	p.answers <- nil
}

// TestAFailureTheFirstProbeContradictsWasNoOutage: when the first probe answers, the failure was
// not an outage: nothing is told it ended (its loop waits its backoff in full), and the next
// failure belongs to the same outage.
func TestAFailureTheFirstProbeContradictsWasNoOutage(t *testing.T) {
	_, p, h, id := noticed(t)
	p.answers <- nil
	for h.Probing() {
		runtime.Gosched()
	}
	notEnded(t, p, "a failure the first probe contradicted was reported as an outage that ended")
	if next, _ := h.AttemptFailed(connectionRefused); next != id {
		t.Errorf("the next failure belongs to outage %d, want %d", next, id)
	}
	p.called(t)
	p.answers <- nil
}

// An error that is no answer at all (a refused or reset connection) makes the watch suspect
// (client-go retries a refused watch without telling the informer): from a call, alone; from a
// renewal attempt, with the outage's probe started, both at once. An answer, even a refusal, or
// the caller's own deadline does neither. An open watch, or an event through one, clears the
// suspicion, and leaves the probe running.
func TestAnUnansweredCallMakesTheWatchSuspectAndAFailedAttemptStartsTheProbe(t *testing.T) {
	for name, tc := range map[string]struct {
		err        error
		unanswered bool
	}{
		"refused connection": {connectionRefused, true},
		"reset connection":   {connectionReset, true},
		"a 500":              {apierrors.NewInternalError(errors.New("etcd")), false},
		"a 429":              {apierrors.NewTooManyRequests("slow down", 1), false},
		"the deadline":       {context.DeadlineExceeded, false},
	} {
		for _, attempt := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, attempt %v", name, attempt), func(t *testing.T) {
				life := lifetime.New()
				defer life.End()
				p := newProbes()
				h := New(testclock.NewFakeClock(time.Now()), p.probe, life, nil)
				_, becomes := h.WatchSuspect()
				err := fmt.Errorf("creating CertificateRequest: %w", tc.err)
				probed := false
				if attempt {
					_, probed = h.AttemptFailed(err)
				} else {
					h.CallFailed(err)
				}
				select {
				case <-becomes:
					if !tc.unanswered {
						t.Error("the channel of WatchSuspect was closed, the watch not being suspect")
					}
				default:
					if tc.unanswered {
						t.Error("the channel of WatchSuspect was not closed")
					}
				}
				if got := suspect(h); got != tc.unanswered {
					t.Errorf("suspect %v, want %v", got, tc.unanswered)
				}
				outage := attempt && tc.unanswered
				if probed != outage || h.Probing() != outage {
					t.Fatalf("the outage will be told: %v, probing %v; want %v", probed, h.Probing(), outage)
				}
				h.watchLive()
				if suspect(h) {
					t.Error("an open watch left the watch suspect")
				}
				if outage {
					p.called(t)
					if !h.Probing() {
						t.Error("an open watch ended the probe")
					}
					p.answers <- nil
				}
			})
		}
	}
}

// Without a probe (Options.DisableOutageProbe), an attempt that failed for want of the apiserver
// still makes the watch suspect, and no outage's end will be told.
func TestWithoutAProbeTheWatchIsStillSuspect(t *testing.T) {
	h := New(testclock.NewFakeClock(time.Now()), nil, nil, nil)
	if _, probed := h.AttemptFailed(connectionRefused); probed || h.Probing() {
		t.Error("an outage is probed without a probe")
	}
	if !suspect(h) {
		t.Error("the watch is not suspect")
	}
}
