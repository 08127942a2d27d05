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
	ended   chan (<-chan struct{})
}

func newProbes() *probes {
	return &probes{calls: make(chan struct{}), answers: make(chan error), ended: make(chan (<-chan struct{}), 1)}
}

func (p *probes) probe(context.Context) error {
	p.calls <- struct{}{}
	return <-p.answers
}

// noticed is an Outage on a fake clock, told of a failure; its first probe has been called and
// waits for its answer on p.answers. The outages its ended hook is told of go to p.ended.
func noticed(t *testing.T) (*testclock.FakeClock, *probes, *Outage, <-chan struct{}) {
	clk := testclock.NewFakeClock(time.Now())
	life := lifetime.New()
	t.Cleanup(life.End)
	p := newProbes()
	o := New(clk, p.probe, life, func(over <-chan struct{}) { p.ended <- over })
	over := o.Noticed()
	<-p.calls
	return clk, p, o, over
}

// waitForTimer yields until the probing goroutine has armed its timer on clk.
func waitForTimer(clk *testclock.FakeClock) {
	for !clk.HasWaiters() {
		runtime.Gosched()
	}
}

// TestAnOutageEndsWhenAProbeAnswersAfterOneFailed: the channel Noticed returns closes once a probe
// answers after one failed, and not before, and New's ended hook is then told of that channel;
// probes repeat every ProbeInterval on the clock, and a second Noticed during the outage shares
// the first's probe and channel.
func TestAnOutageEndsWhenAProbeAnswersAfterOneFailed(t *testing.T) {
	clk, p, o, over := noticed(t)
	p.answers <- errors.New("connection refused")
	waitForTimer(clk)
	if o.Noticed() != over || !o.Probing() {
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
	select {
	case <-over:
		t.Fatal("the outage ended before a probe answered")
	default:
	}
	p.answers <- nil
	<-over
	if ended := <-p.ended; ended != over {
		t.Error("the ended hook was told of another channel than the outage's")
	}
	if o.Probing() {
		t.Error("still probing after the apiserver answered")
	}
}

// TestAFailureTheFirstProbeContradictsWasNoOutage: when the first probe answers, the failure was
// not an outage: the channel stays open (its waiter waits its backoff in full).
func TestAFailureTheFirstProbeContradictsWasNoOutage(t *testing.T) {
	_, p, o, over := noticed(t)
	p.answers <- nil
	for o.Probing() {
		runtime.Gosched()
	}
	select {
	case <-over:
		t.Fatal("a failure the first probe contradicted ended an outage")
	case <-p.ended:
		t.Fatal("a failure the first probe contradicted was reported as an outage that ended")
	default:
	}
}
