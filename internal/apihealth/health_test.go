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

// noticed is a Health on a fake clock, told of a call that found the apiserver unreachable,
// whose outage ID it returns; its first probe has been called and waits for its answer on
// p.answers. The outages its outageEnded hook is told of go to p.ended.
func noticed(t *testing.T) (*testclock.FakeClock, *probes, *Health, ID) {
	clk := testclock.NewFakeClock(time.Now())
	life := lifetime.New()
	t.Cleanup(life.End)
	p := newProbes()
	h := New(clk, p.probe, life, func(id ID) { p.ended <- id })
	id, probed := h.CallFailed(connectionRefused)
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
	if next, _ := h.CallFailed(connectionReset); next != id || !h.Probing() {
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
	if next, _ := h.CallFailed(connectionRefused); next == id {
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
	if next, _ := h.CallFailed(connectionRefused); next != id {
		t.Errorf("the next failure belongs to outage %d, want %d", next, id)
	}
	p.called(t)
	p.answers <- nil
}

// A call that got no answer at all makes the watch suspect (client-go retries a refused watch
// without telling the informer) and starts the probe, both at once; an answer, even a refusal,
// or the caller's own deadline does neither. An open watch, or an event through one, clears the
// suspicion, and leaves the probe running.
func TestAnUnansweredCallMakesTheWatchSuspectAndStartsTheProbe(t *testing.T) {
	for name, tc := range map[string]struct {
		err     error
		outage  bool
		suspect bool
	}{
		"refused connection": {connectionRefused, true, true},
		"reset connection":   {connectionReset, true, true},
		"a 500":              {apierrors.NewInternalError(errors.New("etcd")), false, false},
		"a 429":              {apierrors.NewTooManyRequests("slow down", 1), false, false},
		"the deadline":       {context.DeadlineExceeded, false, false},
	} {
		t.Run(name, func(t *testing.T) {
			life := lifetime.New()
			defer life.End()
			p := newProbes()
			h := New(testclock.NewFakeClock(time.Now()), p.probe, life, nil)
			_, becomes := h.WatchSuspect()
			_, probed := h.CallFailed(fmt.Errorf("creating CertificateRequest: %w", tc.err))
			select {
			case <-becomes:
				if !tc.suspect {
					t.Error("the channel of WatchSuspect was closed, the watch not being suspect")
				}
			default:
				if tc.suspect {
					t.Error("the channel of WatchSuspect was not closed")
				}
			}
			if got := suspect(h); got != tc.suspect {
				t.Errorf("suspect %v, want %v", got, tc.suspect)
			}
			if probed != tc.outage || h.Probing() != tc.outage {
				t.Fatalf("the outage will be told: %v, probing %v; want %v", probed, h.Probing(), tc.outage)
			}
			h.watchLive()
			if suspect(h) {
				t.Error("an open watch left the watch suspect")
			}
			if tc.outage {
				p.called(t)
				if !h.Probing() {
					t.Error("an open watch ended the probe")
				}
				p.answers <- nil
			}
		})
	}
}

// Without a probe (Options.DisableOutageProbe), a call that found the apiserver unreachable
// still makes the watch suspect, and no outage's end will be told.
func TestWithoutAProbeTheWatchIsStillSuspect(t *testing.T) {
	h := New(testclock.NewFakeClock(time.Now()), nil, nil, nil)
	if _, probed := h.CallFailed(connectionRefused); probed || h.Probing() {
		t.Error("an outage is probed without a probe")
	}
	if !suspect(h) {
		t.Error("the watch is not suspect")
	}
}
