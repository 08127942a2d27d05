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

package outage

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	testclock "k8s.io/utils/clock/testing"

	"github.com/cert-manager/csi-lib/internal/lifetime"
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

func (p *probes) probe(context.Context) error {
	p.calls <- struct{}{}
	return <-p.answers
}

// noticed is an Outage on a fake clock, told of a failure, whose ID it returns; its first probe
// has been called and waits for its answer on p.answers. The outages its ended hook is told of
// go to p.ended.
func noticed(t *testing.T) (*testclock.FakeClock, *probes, *Outage, ID) {
	clk := testclock.NewFakeClock(time.Now())
	life := lifetime.New()
	t.Cleanup(life.End)
	p := newProbes()
	o := New(clk, p.probe, life, func(id ID) { p.ended <- id })
	id := o.Noticed()
	<-p.calls
	return clk, p, o, id
}

// waitForTimer yields until the probing goroutine has armed its timer on clk.
func waitForTimer(clk *testclock.FakeClock) {
	for !clk.HasWaiters() {
		runtime.Gosched()
	}
}

// notEnded fails the test if the ended hook was told of an outage.
func notEnded(t *testing.T, p *probes, why string) {
	t.Helper()
	select {
	case <-p.ended:
		t.Fatal(why)
	default:
	}
}

// TestAnOutageEndsWhenAProbeAnswersAfterOneFailed: New's ended hook is told of the outage's ID
// once a probe answers after one failed, and not before; probes repeat every ProbeInterval on
// the clock; a second Noticed during the outage shares the first's probe and ID, and a failure
// after the outage ended belongs to another.
func TestAnOutageEndsWhenAProbeAnswersAfterOneFailed(t *testing.T) {
	clk, p, o, id := noticed(t)
	p.answers <- errors.New("connection refused")
	waitForTimer(clk)
	if o.Noticed() != id || !o.Probing() {
		t.Fatal("a second Noticed during the outage did not share the running probe")
	}
	clk.Step(ProbeInterval - time.Nanosecond)
	select {
	case <-p.calls:
		t.Fatal("probed again before ProbeInterval")
	default:
	}
	clk.Step(time.Nanosecond)
	<-p.calls
	notEnded(t, p, "the outage ended before a probe answered")
	p.answers <- nil
	if ended := <-p.ended; ended != id {
		t.Errorf("the ended hook was told of outage %d, want %d", ended, id)
	}
	for o.Probing() {
		runtime.Gosched()
	}
	if next := o.Noticed(); next == id {
		t.Error("a failure after the outage ended got the ended outage's ID")
	}
	<-p.calls
	p.answers <- nil
}

// TestAFailureTheFirstProbeContradictsWasNoOutage: when the first probe answers, the failure was
// not an outage: nothing is told it ended (its loop waits its backoff in full), and the next
// failure belongs to the same outage.
func TestAFailureTheFirstProbeContradictsWasNoOutage(t *testing.T) {
	_, p, o, id := noticed(t)
	p.answers <- nil
	for o.Probing() {
		runtime.Gosched()
	}
	notEnded(t, p, "a failure the first probe contradicted was reported as an outage that ended")
	if next := o.Noticed(); next != id {
		t.Errorf("the next failure belongs to outage %d, want %d", next, id)
	}
	<-p.calls
	p.answers <- nil
}
