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
	"fmt"
	"math/rand"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"

	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/storage"
)

// This file holds the reference model of a Requeue's effect on a loop whose readiness gate
// stays closed, and the tests that drive the real manager on the fake clock with a Requeue at
// every point of a turn and compare its gate asks and the waits between them with the model.

// requeuePoint is where the test calls Requeue: at a point of the loop's next turn, from the
// loop's own goroutine, or while the loop waits.
type requeuePoint int32

const (
	noRequeue    requeuePoint = iota
	beforeRead                // the turn is about to read the metadata
	duringRead                // the read has read and not returned yet
	beforeGate                // the attempt started, the gate is not asked yet (requestsRead)
	atGate                    // the gate is asked and has not answered yet
	afterAttempt              // the attempt is over, the turn has not decided its wait yet
	duringWait                // the loop waits
	requeuePoints
)

func (p requeuePoint) String() string {
	return [...]string{"none", "before the read", "during the read", "before the gate", "at the gate", "after the attempt", "during the wait"}[p]
}

// requeueModel is the reference model of the rule stated on requeueEnds, for a loop whose
// gate refuses every attempt of a volume that is always due. Each turn asks the gate; a
// refusal waits the gate backoff's next step (base, doubling to cap), the refusal of a
// registration's first turn its first step without taking it. A Requeue ends a wait at once;
// one that comes in a turn before its attempt starts is answered by that attempt, one that
// comes after ends the wait the turn decides. So each Requeue adds at most one gate ask, and
// the waits after consecutive refusals are the backoff's steps in order, whenever a Requeue
// came.
type requeueModel struct {
	base, cap time.Duration
	taken     int  // gate backoff steps taken in this registration
	first     bool // the registration's first turn is next
	now       time.Duration
	wakeAt    time.Duration
}

// turn is one turn at now with a Requeue at p (noRequeue: none); it reports the wait the turn
// decides, and whether a Requeue ended it at once.
func (m *requeueModel) turn(p requeuePoint) (wait time.Duration, ended bool) {
	wait = backoffStep(m.base, m.cap, m.taken)
	if !m.first {
		m.taken++
	}
	m.first = false
	ended = p == beforeGate || p == atGate || p == afterAttempt
	m.wakeAt = m.now + wait
	return wait, ended
}

// requeueHarness drives the real manager and records its gate asks.
type requeueHarness struct {
	t     *testing.T
	e     *env
	id    string
	point atomic.Int32 // the requeuePoint of the next turn
	asked chan time.Duration
	asks  []time.Duration // the gate asks seen, since start
	trace []string
}

func (h *requeueHarness) fail(format string, args ...any) {
	h.t.Helper()
	h.t.Fatalf("%s\nlast actions:\n  %s", fmt.Sprintf(format, args...), strings.Join(h.trace[max(0, len(h.trace)-12):], "\n  "))
}

func (h *requeueHarness) note(format string, args ...any) {
	h.trace = append(h.trace, fmt.Sprintf(format, args...))
}

// at calls Requeue if the next turn's point is p, once.
func (h *requeueHarness) at(p requeuePoint) {
	if h.point.CompareAndSwap(int32(p), int32(noRequeue)) {
		h.e.m.Requeue(h.id)
	}
}

// hookedReader is the store as the manager reads it, with the test's points around each read.
type hookedReader struct {
	storage.MetadataReader
	h *requeueHarness
}

func (r hookedReader) ReadMetadata(id string) (metadata.Metadata, error) {
	r.h.at(beforeRead)
	meta, err := r.MetadataReader.ReadMetadata(id)
	r.h.at(duringRead)
	return meta, err
}

func newRequeueHarness(t *testing.T, base, cap time.Duration) *requeueHarness {
	h := &requeueHarness{t: t, id: "v1", asked: make(chan time.Duration, 1)}
	h.e = newEnv(t, func(o *Options) {
		o.GateBackoffConfig = noJitter(base, cap)
		o.testHooks.requestsRead = func(string) { h.at(beforeGate) }
		o.MetadataReader = hookedReader{MetadataReader: o.MetadataReader, h: h}
		// The turn logs this line after the attempt, before it decides its wait.
		log := funcr.New(func(_, args string) {
			if strings.Contains(args, `"Waiting before the next issuance attempt"`) {
				h.at(afterAttempt)
			}
		}, funcr.Options{Verbosity: 4})
		o.Log = &log
	})
	h.e.opts.ReadyToRequest = func(metadata.Metadata) (bool, string) {
		h.asked <- h.e.clock.Since(start)
		h.at(atGate)
		return false, "closed for the test"
	}
	// Not mounted, so that the manager does not resume it as it starts: the loop starts with
	// ManageVolume, once the hooks are in place.
	h.e.register(h.id, false)
	m := h.e.start()
	if !m.ManageVolume(h.id) {
		t.Fatal("ManageVolume = false")
	}
	return h
}

// turn checks one turn of the real loop against the model's: an attempt, its gate ask at the
// model's now, then the model's wait, or, where a Requeue ended it, none (the next turn follows).
func (h *requeueHarness) turn(m *requeueModel, p requeuePoint) (ended bool) {
	h.t.Helper()
	wait, ended := m.turn(p)
	h.note("  model: ask at %v, wait %v (ended by the Requeue: %v)", m.now, wait, ended)
	if d := h.e.nextTimer(); d != issueTimeout {
		h.fail("expected an attempt (a %v deadline timer), got a %v timer", issueTimeout, d)
	}
	select {
	case at := <-h.asked:
		h.asks = append(h.asks, at)
		if at != m.now {
			h.fail("gate asked at %v, the model's at %v", at, m.now)
		}
	case <-time.After(pollTimeout):
		h.fail("the gate was not asked")
	}
	if ended {
		return true
	}
	switch d := h.e.nextTimer(); {
	case d == issueTimeout && wait != issueTimeout:
		h.fail("the loop attempts again at once (a %v deadline timer), the model waits %v", d, wait)
	case d != wait:
		h.fail("the loop waits %v, the model %v", d, wait)
	}
	h.untilWaiters(1)
	if p := requeuePoint(h.point.Load()); p != noRequeue {
		h.fail("the turn never reached the point %v", p)
	}
	return false
}

// wake runs the turns that follow a wake-up, with a Requeue at p in the first.
func (h *requeueHarness) wake(m *requeueModel, p requeuePoint) {
	h.t.Helper()
	for h.turn(m, p) {
		p = noRequeue
	}
}

// untilWaiters waits, bounded, until the fake clock has n waiters.
func (h *requeueHarness) untilWaiters(n int) {
	h.t.Helper()
	deadline := time.Now().Add(pollTimeout)
	for i := 0; h.e.clock.Waiters() != n; i++ {
		if time.Now().After(deadline) {
			h.fail("the clock has %d waiters, want %d", h.e.clock.Waiters(), n)
		}
		if i < 100 {
			runtime.Gosched()
		} else {
			time.Sleep(20 * time.Microsecond)
		}
	}
}

// nothing checks that the loop still waits and made no timer.
func (h *requeueHarness) nothing() {
	h.t.Helper()
	if w := h.e.clock.Waiters(); w != 1 || len(h.e.clock.Timers) != 0 {
		h.fail("the loop acted where the model does nothing (waiters %d, new timers %d)", w, len(h.e.clock.Timers))
	}
}

// step moves the clock by s, with a Requeue at p in the turn it starts, if any.
func (h *requeueHarness) step(m *requeueModel, s time.Duration, p requeuePoint) {
	h.t.Helper()
	h.note("step %v (wake in %v), Requeue %v", s, m.wakeAt-m.now, p)
	if m.now+s < m.wakeAt {
		p = noRequeue
	}
	h.point.Store(int32(p))
	h.e.clock.Step(s)
	m.now += s
	if m.now < m.wakeAt {
		h.nothing()
		return
	}
	h.wake(m, p)
}

// requeue calls Requeue while the loop waits, with another at p in the turn it starts.
func (h *requeueHarness) requeue(m *requeueModel, p requeuePoint) {
	h.t.Helper()
	h.note("Requeue during the wait, then %v", p)
	h.point.Store(int32(p))
	h.e.m.Requeue(h.id)
	h.wake(m, p)
}

// manage registers the volume again: a first turn, and fresh backoffs.
func (h *requeueHarness) manage(m *requeueModel) {
	h.t.Helper()
	h.note("manage (a first turn)")
	h.e.m.ManageVolume(h.id)
	m.first, m.taken = true, 0
	h.wake(m, noRequeue)
}

func (h *requeueHarness) unmanage() {
	h.t.Helper()
	h.note("unmanage")
	h.e.m.UnmanageVolume(h.id)
	h.untilWaiters(0)
}

// TestARequeueAtEachPointOfATurn: with the gate backoff 1 s doubling to 10 s and a gate that
// stays closed, the loop's first turn asks at 0 s and waits the first step without taking it;
// a Requeue at each point of the next turn (at 1 s) gives the gate asks below. Before the attempt
// starts it is answered by that attempt; after, it ends the wait the turn decides, at the cost
// of one ask; during a wait it ends that wait. The waits after the refusals are 1, 1, 2, 4 s
// in every case: no step skipped.
func TestARequeueAtEachPointOfATurn(t *testing.T) {
	for _, tc := range []struct {
		p    requeuePoint
		asks []time.Duration
	}{
		{noRequeue, []time.Duration{0, 1 * time.Second, 2 * time.Second, 4 * time.Second}},
		{beforeRead, []time.Duration{0, 1 * time.Second, 2 * time.Second, 4 * time.Second}},
		{duringRead, []time.Duration{0, 1 * time.Second, 2 * time.Second, 4 * time.Second}},
		{beforeGate, []time.Duration{0, 1 * time.Second, 1 * time.Second, 3 * time.Second}},
		{atGate, []time.Duration{0, 1 * time.Second, 1 * time.Second, 3 * time.Second}},
		{afterAttempt, []time.Duration{0, 1 * time.Second, 1 * time.Second, 3 * time.Second}},
		{duringWait, []time.Duration{0, 1 * time.Second, 1500 * time.Millisecond, 3500 * time.Millisecond}},
	} {
		t.Run(tc.p.String(), func(t *testing.T) {
			h := newRequeueHarness(t, time.Second, 10*time.Second)
			m := &requeueModel{base: time.Second, cap: 10 * time.Second, first: true}
			h.wake(m, noRequeue)
			if tc.p == duringWait {
				h.step(m, time.Second, noRequeue)
				h.step(m, 500*time.Millisecond, noRequeue)
				h.requeue(m, noRequeue)
			} else {
				h.step(m, time.Second, tc.p)
			}
			for len(h.asks) < len(tc.asks) {
				h.step(m, m.wakeAt-m.now, noRequeue)
			}
			if fmt.Sprint(h.asks) != fmt.Sprint(tc.asks) {
				t.Fatalf("gate asked at %v, want %v", h.asks, tc.asks)
			}
		})
	}
}

// TestRequeueTimingMatchesModel drives the real manager on the fake clock through random
// sequences (fixed seeds) of clock steps of every size, Requeues at every point of a turn
// (before, during and after the metadata read, in the attempt before and at the gate, after the
// attempt) and while the loop waits, often several in a row, and new registrations, with a gate
// that stays closed. Every gate ask's instant and every wait must be the reference model's.
func TestRequeueTimingMatchesModel(t *testing.T) {
	seeds, actions := []int64{1, 2, 3, 4}, 1500
	if testing.Short() {
		actions = 100
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			base := []time.Duration{250 * time.Millisecond, time.Second, 3 * time.Second}[rng.Intn(3)]
			cap := base * time.Duration(1+rng.Intn(10))
			h := newRequeueHarness(t, base, cap)
			m := &requeueModel{base: base, cap: cap, first: true}
			h.wake(m, noRequeue)
			point := func() requeuePoint { return requeuePoint(rng.Intn(int(duringWait))) }
			for i := 0; i < actions; i++ {
				switch r := rng.Intn(100); {
				case r < 40:
					left := m.wakeAt - m.now
					s := []time.Duration{left, left, left + time.Duration(rng.Int63n(int64(2*cap))), max(left-time.Nanosecond, 1), time.Duration(1 + rng.Int63n(int64(left)))}[rng.Intn(5)]
					h.step(m, s, point())
				case r < 70:
					h.requeue(m, point())
				case r < 95:
					h.step(m, time.Duration(1+rng.Int63n(int64(base))), point())
				default:
					h.unmanage()
					h.manage(m)
				}
			}
			t.Logf("%d gate asks over %v of the fake clock", len(h.asks), m.now)
		})
	}
}
