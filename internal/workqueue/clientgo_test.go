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

package workqueue

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	cgworkqueue "k8s.io/client-go/util/workqueue"
	testclock "k8s.io/utils/clock/testing"
)

// This file measures the figures of the package documentation: client-go's rate-limited work
// queue (NewTypedRateLimitingQueueWithConfig on the fake clock, with a per-item exponential
// rate limiter) driven in the manager's patterns, beside this queue in the same scenario. Each
// test logs its figure ("figure: ...") and fails if either queue's figure changes, so the
// documentation cannot go stale unnoticed:
//
//	go test -count=1 -v -run 'TestClientGo' ./internal/workqueue/
//
// The manager's patterns on client-go's queue: a turn that decides a wait calls AddAfter; a
// Requeue calls Add if the key's wait is one a Requeue ends; removing a key calls Forget (the
// rate limiter's; the queue has nothing else); workers start on demand, one goroutine per Get,
// so no fixed pool holds a turn up.

// cgHarness is client-go's queue of int keys on a fake clock; each key's n-th turn decides the
// wait turn returns (AddAfter; zero: none).
type cgHarness struct {
	t     *testing.T
	clock *testclock.FakeClock
	start time.Time
	q     cgworkqueue.TypedRateLimitingInterface[int]
	turn  func(key, n int) time.Duration

	mu    sync.Mutex
	log   []processed // early is not known to client-go's queue: always false
	count map[int]int
	ended int // turns returned
	turnGate
}

func newCGHarness(t *testing.T, turn func(key, n int) time.Duration) *cgHarness {
	start := time.Unix(1_000_000, 0)
	h := &cgHarness{t: t, clock: testclock.NewFakeClock(start), start: start, turn: turn, count: map[int]int{}}
	h.q = cgworkqueue.NewTypedRateLimitingQueueWithConfig(
		cgworkqueue.NewTypedItemExponentialFailureRateLimiter[int](time.Second, 10*time.Second),
		cgworkqueue.TypedRateLimitingQueueConfig[int]{Clock: h.clock})
	go func() {
		for {
			k, shutdown := h.q.Get()
			if shutdown {
				return
			}
			go h.process(k)
		}
	}()
	t.Cleanup(func() {
		h.release()
		h.q.ShutDown()
	})
	return h
}

func (h *cgHarness) process(k int) {
	defer h.q.Done(k)
	h.mu.Lock()
	h.log = append(h.log, processed{key: k, at: h.clock.Since(h.start)})
	n := h.count[k]
	h.count[k]++
	h.mu.Unlock()
	h.pass()
	if d := h.turn(k, n); d > 0 {
		h.q.AddAfter(k, d)
	}
	h.mu.Lock()
	h.ended++
	h.mu.Unlock()
}

// until waits, bounded, until cond holds of the log and the count of turns that returned.
func (h *cgHarness) until(what string, cond func(log []processed, ended int) bool) []processed {
	h.t.Helper()
	deadline := time.Now().Add(pollBound)
	for {
		h.mu.Lock()
		got, ended := append([]processed(nil), h.log...), h.ended
		h.mu.Unlock()
		if cond(got, ended) {
			return got
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("client-go's queue: no %s; processed %v, %d turns returned, %d timers", what, got, ended, h.clock.Waiters())
		}
		runtime.Gosched()
	}
}

// pollBound bounds, in real time, each wait for what client-go's queue does on its own
// goroutines: a count of Gosched calls ran out in a tenth of a second on a busy machine.
const pollBound = 10 * time.Second

// untilWaiters waits, bounded, until the fake clock has n waiters.
func untilWaiters(t *testing.T, clk *testclock.FakeClock, n int) {
	t.Helper()
	deadline := time.Now().Add(pollBound)
	for clk.Waiters() != n {
		if time.Now().After(deadline) {
			t.Fatalf("the clock has %d waiters, want %d", clk.Waiters(), n)
		}
		runtime.Gosched()
	}
}

func times(log []processed) []time.Duration {
	var ts []time.Duration
	for _, p := range log {
		ts = append(ts, p.at)
	}
	return ts
}

// TestClientGoEachWaitIsATimer: with 100 keys waiting, and after the queue stops, the fake
// clock's waiters. This queue arms one timer per wait and stops it when the wait ends or the
// queue stops, so a test sees that every volume waits (and Stop left nothing) by counting the
// clock's waiters. client-go's queue keeps the waits in a heap behind one timer for the
// earliest, beside a 10 s heartbeat ticker; ShutDown stops neither on a fake clock.
func TestClientGoEachWaitIsATimer(t *testing.T) {
	const n = 100
	ours := newHarness(t, func(_, _ int) Next[int] { return waitThen(time.Hour, 0) })
	for k := range n {
		ours.q.Add(k, 0)
	}
	ours.untilProcessed(n)
	untilWaiters(t, ours.clock, n)
	ourWaits := ours.clock.Waiters()
	ours.q.Stop()
	ourLeft := ours.clock.Waiters()

	cg := newCGHarness(t, func(_, n int) time.Duration {
		if n == 0 {
			return time.Hour
		}
		return 0
	})
	idle := cg.clock.Waiters()
	for k := range n {
		cg.q.Add(k)
	}
	cg.until("first turns", func(_ []processed, ended int) bool { return ended == n })
	untilWaiters(t, cg.clock, 2)
	cgWaits := cg.clock.Waiters()
	cg.clock.Step(time.Hour)
	// Every key did wait: each is processed again when the hour is over.
	cg.until("second turns", func(_ []processed, ended int) bool { return ended == 2*n })
	cg.q.AddAfter(-1, time.Hour)
	untilWaiters(t, cg.clock, 2)
	cg.q.ShutDown()
	cgLeft := cg.clock.Waiters()

	t.Logf("figure: fake-clock waiters with %d keys waiting: this queue %d, client-go's %d; with none: this queue 0, client-go's %d; after Stop (ShutDown) with a key waiting: this queue %d, client-go's %d",
		n, ourWaits, cgWaits, idle, ourLeft, cgLeft)
	if ourWaits != n || ourLeft != 0 {
		t.Errorf("this queue: %d waiters for %d waits, %d after Stop", ourWaits, n, ourLeft)
	}
	if cgWaits != 2 || idle != 1 || cgLeft != 2 {
		t.Errorf("client-go's queue changed: %d waiters for %d waits, %d idle, %d after ShutDown; the package documentation's figure is stale", cgWaits, n, idle, cgLeft)
	}
}

// TestClientGoStepRightAfterAddAfter: N rounds of AddAfter(d) then at once Step(d): how many
// rounds' keys do not become ready (client-go arms its timer on its own goroutine). Logged,
// not a reason this queue stays: client-go's queue reads the ready time in AddAfter itself.
func TestClientGoStepRightAfterAddAfter(t *testing.T) {
	const rounds = 1000
	cg := newCGHarness(t, func(_, _ int) time.Duration { return 0 })
	missed := 0
	for k := range rounds {
		cg.q.AddAfter(k, time.Second)
		cg.clock.Step(time.Second)
		// Either the key is processed, or its timer was armed after the step, relative to the
		// stepped clock: then the clock has that timer beside the heartbeat and nothing else
		// happens until the heartbeat's 10 s.
		cg.until("processing or late timer", func(log []processed, _ int) bool {
			if len(log) == k+1 {
				return true
			}
			if cg.clock.Waiters() == 2 {
				missed++
				cg.clock.Step(10 * time.Second)
				return false
			}
			return false
		})
	}
	t.Logf("figure: steps of the fake clock right after AddAfter that miss the wait: client-go's queue %d of %d", missed, rounds)
}

// TestClientGoRequeueDuringAGateWait: a key's turns wait the gate backoff's steps (1 s, 2 s,
// 4 s); a Requeue at 0.5 s ends the first wait. This queue ends that wait (its timer stops) and
// the next turn waits the 2 s step. client-go's queue cannot end a wait: the Requeue's Add
// makes a turn, the 1 s timer makes another at 1 s, and AddAfter(2 s) at 0.5 s keeps the
// earlier ready time, so the 2 s step is skipped (issue: "the gate is asked 3 times").
func TestClientGoRequeueDuringAGateWait(t *testing.T) {
	steps := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}
	const gateWait = 1
	ours := newHarness(t, func(_, n int) Next[int] { return waitThen(steps[n], gateWait) })
	ours.q.Add(1, 0)
	ours.untilProcessed(1)
	untilWaiters(t, ours.clock, 1)
	ours.clock.Step(500 * time.Millisecond)
	ours.q.Wake(1, func(s int) bool { return s == gateWait })
	ours.untilProcessed(2)
	ours.untilIdle()
	ours.clock.Step(500 * time.Millisecond)
	ours.untilIdle()
	ours.clock.Step(1500 * time.Millisecond)
	ourLog := ours.untilProcessed(3)

	cg := newCGHarness(t, func(_, n int) time.Duration { return steps[n] })
	cg.q.Add(1)
	cg.until("first turn", func(_ []processed, ended int) bool { return ended == 1 })
	untilWaiters(t, cg.clock, 2)
	cg.clock.Step(500 * time.Millisecond)
	// The Requeue's turn is held while the clock reaches 1 s: were its AddAfter on its way when
	// the clock steps, client-go's waiting loop could re-arm its timer from a reading taken
	// before the step, one step late (about once in ten runs), and the turn would not come.
	cg.hold()
	cg.q.Add(1) // the Requeue: the key waits for the gate
	cg.until("the Requeue's turn", func(log []processed, _ int) bool { return len(log) == 2 })
	cg.clock.Step(500 * time.Millisecond)
	cg.release()
	cgLog := cg.until("third turn", func(log []processed, _ int) bool { return len(log) == 3 })

	t.Logf("figure: turns (gate asks) of a key whose 1 s gate wait a Requeue ends at 0.5 s: this queue at %v, client-go's at %v", times(ourLog), times(cgLog))
	if fmt.Sprint(times(ourLog)) != "[0s 500ms 2.5s]" {
		t.Errorf("this queue's turns at %v, want [0s 500ms 2.5s]", times(ourLog))
	}
	if fmt.Sprint(times(cgLog)) != "[0s 500ms 1s]" {
		t.Errorf("client-go's turns at %v; the package documentation's figure is stale", times(cgLog))
	}
}

// TestClientGoRequeueDuringATurn: a Requeue that comes while a key's turn runs, before its
// attempt (which answers it). This queue drops it (Unwake) and the turn's wait runs its time;
// client-go's queue marks the key dirty and hands it out again as soon as the turn is done.
func TestClientGoRequeueDuringATurn(t *testing.T) {
	var ours *harness
	ours = newHarness(t, func(k, _ int) Next[int] {
		ours.q.Unwake(k) // the attempt starts: it answers every Requeue so far
		return waitThen(time.Hour, 1)
	})
	ours.hold()
	ours.q.Add(1, 0)
	ours.untilProcessed(1)
	ours.q.Wake(1, func(int) bool { return true })
	ours.release()
	ours.untilIdle()
	untilWaiters(t, ours.clock, 1)
	ourTurns := len(ours.untilProcessed(1))

	cg := newCGHarness(t, func(_, _ int) time.Duration { return time.Hour })
	cg.hold()
	cg.q.Add(1)
	cg.until("first turn", func(log []processed, _ int) bool { return len(log) == 1 })
	cg.q.Add(1) // the Requeue
	cg.release()
	cgLog := cg.until("second turn", func(log []processed, _ int) bool { return len(log) == 2 })

	t.Logf("figure: turns, with no step of the clock, after one Requeue during a turn before its attempt: this queue %d, client-go's %d (at %v)", ourTurns, len(cgLog), times(cgLog))
	if ourTurns != 1 {
		t.Errorf("this queue: %d turns, want 1", ourTurns)
	}
	if len(cgLog) != 2 {
		t.Errorf("client-go's queue: %d turns; the package documentation's figure is stale", len(cgLog))
	}
}

// TestClientGoForgetAWaitingKey: 100 keys wait an hour and are then taken out (their volumes
// unmanaged). This queue stops their timers and forgets them at once; client-go's queue has no
// call that takes a key out of its waits: it holds each until its hour is over, then hands it
// out for a turn.
func TestClientGoForgetAWaitingKey(t *testing.T) {
	const n = 100
	ours := newHarness(t, func(_, _ int) Next[int] { return waitThen(time.Hour, 0) })
	for k := range n {
		ours.q.Add(k, 0)
	}
	ours.untilProcessed(n)
	untilWaiters(t, ours.clock, n)
	for k := range n {
		ours.q.Remove(k)
	}
	keys, _ := ours.q.Len()
	timers := ours.clock.Waiters()
	ours.clock.Step(time.Hour)
	ours.untilIdle()
	ourTurns := len(ours.untilProcessed(n)) - n

	cg := newCGHarness(t, func(_, n int) time.Duration {
		if n == 0 {
			return time.Hour
		}
		return 0
	})
	for k := range n {
		cg.q.Add(k)
	}
	cg.until("first turns", func(_ []processed, ended int) bool { return ended == n })
	for k := range n {
		cg.q.Forget(k)
	}
	cg.clock.Step(time.Hour)
	cgTurns := len(cg.until("turns of forgotten keys", func(_ []processed, ended int) bool { return ended == 2*n })) - n

	t.Logf("figure: of %d waiting keys taken out, turns when their wait would have ended: this queue %d (keys %d, timers %d right after Remove), client-go's %d", n, ourTurns, keys, timers, cgTurns)
	if ourTurns != 0 || keys != 0 || timers != 0 {
		t.Errorf("this queue: %d turns, %d keys, %d timers after Remove", ourTurns, keys, timers)
	}
	if cgTurns != n {
		t.Errorf("client-go's queue: %d turns of forgotten keys; the package documentation's figure is stale", cgTurns)
	}
}

// TestClientGoBackoffJitter: the first failure's wait of 100 keys, by the manager's default gate
// backoff (wait.Backoff 1 s, factor 2, jitter 0.5, cap 10 s) and by client-go's per-item
// exponential rate limiter at the same base and cap, which has no jitter: keys that fail
// together retry together.
func TestClientGoBackoffJitter(t *testing.T) {
	const n = 100
	limiter := cgworkqueue.NewTypedItemExponentialFailureRateLimiter[int](time.Second, 10*time.Second)
	ours, theirs := map[time.Duration]bool{}, map[time.Duration]bool{}
	for k := range n {
		b := wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.5, Cap: 10 * time.Second, Steps: 1 << 30}
		ours[b.Step()] = true
		theirs[limiter.When(k)] = true
	}
	t.Logf("figure: distinct first waits of %d keys: wait.Backoff with jitter %d, client-go's exponential rate limiter %d", n, len(ours), len(theirs))
	if len(ours) < n/2 {
		t.Errorf("wait.Backoff gave %d distinct waits of %d", len(ours), n)
	}
	if len(theirs) != 1 {
		t.Errorf("client-go's rate limiter gave %d distinct waits; the package documentation's figure is stale", len(theirs))
	}
}

// TestClientGoWorkersOnDemand: 64 keys whose turns all block (attempts waiting for their
// signatures) start at once on both queues: here a worker starts for each ready key, and the
// manager's pattern on client-go's queue runs a goroutine per Get. Logged, not a reason this
// queue stays.
func TestClientGoWorkersOnDemand(t *testing.T) {
	const n = 64
	ours := newHarness(t, func(_, _ int) Next[int] { return Next[int]{Drop: true} })
	ours.hold()
	for k := range n {
		ours.q.Add(k, 0)
	}
	ourTurns := len(ours.untilProcessed(n))

	cg := newCGHarness(t, func(_, _ int) time.Duration { return 0 })
	cg.hold()
	for k := range n {
		cg.q.Add(k)
	}
	cgTurns := len(cg.until("every turn started", func(log []processed, _ int) bool { return len(log) == n }))

	t.Logf("figure: turns running at once, none returning, for %d ready keys: this queue %d, client-go's with a goroutine per Get %d", n, ourTurns, cgTurns)
	if ourTurns != n || cgTurns != n {
		t.Errorf("turns at once: this queue %d, client-go's %d; want %d", ourTurns, cgTurns, n)
	}
}
