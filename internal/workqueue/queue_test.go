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
	"math/rand"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	testclock "k8s.io/utils/clock/testing"

	"github.com/cert-manager/csi-lib/internal/lifetime"
)

// processed is one processing: the key, the state it was handed, whether a Wake ended its wait,
// and when (on the fake clock).
type processed struct {
	key   int
	state int
	early bool
	at    time.Duration
}

func (p processed) String() string {
	return fmt.Sprintf("key %d state %d early %v at %v", p.key, p.state, p.early, p.at)
}

// harness is a queue of int keys and int states on a fake clock; each key's processing returns
// the next of that key's decisions.
type harness struct {
	t     *testing.T
	clock *testclock.FakeClock
	start time.Time
	life  *lifetime.Lifetime
	q     *Queue[int, int]

	mu        sync.Mutex
	log       []processed
	decide    func(key, n int) Next[int] // the key's n-th decision
	count     map[int]int
	inFlight  [128]atomic.Int32
	concurred atomic.Bool
	turnGate
}

// turnGate holds the processings that start while it is held, until it is released; both
// harnesses (this queue's and client-go's) embed it.
type turnGate struct {
	mu sync.Mutex
	// block, if not nil, holds every processing until it is closed.
	block chan struct{}
}

func newHarness(t *testing.T, decide func(key, n int) Next[int]) *harness {
	start := time.Unix(1_000_000, 0)
	h := &harness{t: t, clock: testclock.NewFakeClock(start), start: start, life: lifetime.New(), decide: decide, count: map[int]int{}}
	h.q = New(h.clock, h.life, h.process)
	t.Cleanup(func() {
		h.release()
		h.q.Stop()
		h.life.End()
	})
	return h
}

// hold makes the processings that start from now on wait until release.
func (g *turnGate) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.block = make(chan struct{})
}

// release lets the held processings go on, and the next ones run freely.
func (g *turnGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.block != nil {
		close(g.block)
		g.block = nil
	}
}

// held is the channel the processings starting now wait for; nil when nothing is held.
func (g *turnGate) held() chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.block
}

// pass waits until the processings held now are released.
func (g *turnGate) pass() {
	if block := g.held(); block != nil {
		<-block
	}
}

func (h *harness) process(_ *lifetime.Tracked, k int, s int, early bool) Next[int] {
	if h.inFlight[k].Add(1) != 1 {
		h.concurred.Store(true)
	}
	defer h.inFlight[k].Add(-1)
	h.mu.Lock()
	h.log = append(h.log, processed{key: k, state: s, early: early, at: h.clock.Since(h.start)})
	n := h.count[k]
	h.count[k]++
	h.mu.Unlock()
	h.pass()
	return h.decide(k, n)
}

// untilProcessed waits, bounded, until n processings were logged, and returns the log.
func (h *harness) untilProcessed(n int) []processed {
	h.t.Helper()
	for i := 0; ; i++ {
		h.mu.Lock()
		got := append([]processed(nil), h.log...)
		h.mu.Unlock()
		if len(got) >= n {
			return got
		}
		if i > 200_000 {
			h.t.Fatalf("%d processings, want %d: %v", len(got), n, got)
		}
		runtime.Gosched()
	}
}

// untilIdle waits, bounded, until no worker runs.
func (h *harness) untilIdle() {
	h.t.Helper()
	for i := 0; h.q.Workers() != 0; i++ {
		if i > 200_000 {
			h.t.Fatalf("%d workers still run", h.q.Workers())
		}
		runtime.Gosched()
	}
}

func waitThen(d time.Duration, s int) Next[int] { return Next[int]{After: d, State: s} }

// TestAKeyWaitsOnTheClock: an added key is processed at once with its state; the wait its
// processing decides ends on the clock, not a moment before, and the next processing is handed
// the state that wait was given; a dropped key leaves the queue and can be added again.
func TestAKeyWaitsOnTheClock(t *testing.T) {
	h := newHarness(t, func(_, n int) Next[int] {
		if n == 0 {
			return waitThen(time.Second, 7)
		}
		return Next[int]{Drop: true}
	})
	if !h.q.Add(1, 3) || h.q.Add(1, 4) {
		t.Fatal("Add of a new key must succeed, of a key in the queue fail")
	}
	h.untilProcessed(1)
	for !h.clock.HasWaiters() {
		runtime.Gosched()
	}
	h.clock.Step(time.Second - time.Nanosecond)
	h.untilIdle()
	if got := h.untilProcessed(1); len(got) != 1 {
		t.Fatalf("processed before its wait ended: %v", got)
	}
	h.clock.Step(time.Nanosecond)
	got := h.untilProcessed(2)
	want := []processed{{1, 3, false, 0}, {1, 7, false, time.Second}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	h.untilIdle()
	if keys, _ := h.q.Len(); keys != 0 || h.clock.HasWaiters() {
		t.Fatalf("a dropped key is still in the queue (%d keys) or on the clock", keys)
	}
	if !h.q.Add(1, 5) {
		t.Fatal("a dropped key could not be added again")
	}
}

// TestWakeEndsOnlyAMatchingWait: Wake ends a waiting key's wait, told early, only if match
// accepts its state, and stops its timer; WakeAll does so for every matching key.
func TestWakeEndsOnlyAMatchingWait(t *testing.T) {
	h := newHarness(t, func(k, n int) Next[int] { return waitThen(time.Hour, 10*k+n) })
	h.q.Add(1, 0)
	h.q.Add(2, 0)
	h.q.Add(3, 0)
	h.untilProcessed(3)
	for h.clock.Waiters() != 3 {
		runtime.Gosched()
	}
	if h.q.Wake(1, func(s int) bool { return s != 10 }) {
		t.Fatal("Wake ended a wait its match refused")
	}
	if !h.q.Wake(1, func(s int) bool { return s == 10 }) {
		t.Fatal("Wake did not end a wait its match accepted")
	}
	got := h.untilProcessed(4)
	if last := got[3]; last != (processed{1, 10, true, 0}) {
		t.Fatalf("the woken processing is %v", last)
	}
	for h.clock.Waiters() != 3 {
		runtime.Gosched()
	}
	if n := h.q.WakeAll(func(s int) bool { return s >= 20 }); n != 2 {
		t.Fatalf("WakeAll woke %d keys, want 2", n)
	}
	got = h.untilProcessed(6)
	woken := map[int]bool{}
	for _, p := range got[4:] {
		woken[p.key] = p.early
	}
	if !woken[2] || !woken[3] {
		t.Fatalf("WakeAll did not wake keys 2 and 3 early: %v", got[4:])
	}
	h.untilIdle()
	if keys, waits := h.q.Len(); keys != 3 || waits != 3 || h.clock.Waiters() != 3 {
		t.Fatalf("%d keys, %d waiting, %d timers: want 3 of each (the woken timers stopped)", keys, waits, h.clock.Waiters())
	}
}

// TestAWakeDuringProcessingEndsTheNextWait: a Wake that comes while the key is processed ends
// the wait that processing decides, if match accepts it, and is forgotten otherwise.
func TestAWakeDuringProcessingEndsTheNextWait(t *testing.T) {
	h := newHarness(t, func(_, n int) Next[int] { return waitThen(time.Hour, n) })
	h.hold()
	h.q.Add(1, -1)
	h.untilProcessed(1)
	h.q.Wake(1, func(s int) bool { return s == 0 })
	held := h.held()
	h.hold()
	close(held)
	if got := h.untilProcessed(2); got[1] != (processed{1, 0, true, 0}) {
		t.Fatalf("the kept Wake did not end the next wait: %v", got)
	}
	h.q.Wake(1, func(s int) bool { return s == 0 }) // refuses state 1
	h.release()
	h.untilIdle()
	if got := h.untilProcessed(2); len(got) != 2 || h.clock.Waiters() != 1 {
		t.Fatalf("a kept Wake that refused the next wait ended it: %v", got)
	}
}

// TestWakeAllsDuringProcessingAddUp: WakeAlls that come while a key is processing are kept
// beside each other and beside the key's last Wake, and the wait the processing decides ends at
// once if any of them accepts its state.
func TestWakeAllsDuringProcessingAddUp(t *testing.T) {
	h := newHarness(t, func(_, n int) Next[int] { return waitThen(time.Hour, 10*n) })
	is := func(want int) func(int) bool { return func(s int) bool { return s == want } }
	h.hold()
	h.q.Add(1, -1)
	h.untilProcessed(1)
	h.q.WakeAll(is(0))
	h.q.WakeAll(is(99))
	h.q.Wake(1, is(98))
	held := h.held()
	h.hold()
	close(held)
	if got := h.untilProcessed(2); got[1] != (processed{1, 0, true, 0}) {
		t.Fatalf("the first of two kept WakeAlls did not end the next wait: %v", got)
	}
	h.q.WakeAll(is(-5))
	h.q.WakeAll(is(10))
	h.q.Wake(1, is(98))
	held = h.held()
	h.hold()
	close(held)
	if got := h.untilProcessed(3); got[2] != (processed{1, 10, true, 0}) {
		t.Fatalf("the second of two kept WakeAlls, after a Wake, did not end the next wait: %v", got)
	}
	h.q.WakeAll(is(99))
	h.release()
	h.untilIdle()
	if got := h.untilProcessed(3); len(got) != 3 || h.clock.Waiters() != 1 {
		t.Fatalf("a kept WakeAll that refused the next wait ended it: %v", got)
	}
}

// TestUnwakeDropsTheWakesBeforeIt: a processing that calls Unwake drops the Wake kept so far,
// so the wait it decides runs its time; a Wake after its Unwake is kept, and ends that wait.
func TestUnwakeDropsTheWakesBeforeIt(t *testing.T) {
	all := func(int) bool { return true }
	var h *harness
	h = newHarness(t, func(k, n int) Next[int] {
		h.q.Unwake(k)
		if n == 1 {
			h.q.Wake(k, all)
		}
		return waitThen(time.Hour, n)
	})
	h.hold()
	h.q.Add(1, -1)
	h.untilProcessed(1)
	h.q.Wake(1, all) // kept, then dropped by the processing's Unwake
	h.release()
	h.untilIdle()
	if got := h.untilProcessed(1); len(got) != 1 || h.clock.Waiters() != 1 {
		t.Fatalf("a Wake that Unwake dropped ended the next wait: %v", got)
	}
	h.clock.Step(time.Hour)
	got := h.untilProcessed(3)
	want := []processed{{1, -1, false, 0}, {1, 0, false, time.Hour}, {1, 1, true, time.Hour}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("a Wake after Unwake did not end the next wait: got %v, want %v", got, want)
	}
	h.untilIdle()
	if got := h.untilProcessed(3); len(got) != 3 || h.clock.Waiters() != 1 {
		t.Fatalf("the last wait ended early: %v", got)
	}
}

// TestRemoveAndStop: Remove takes a waiting key out and stops its timer; a processing key
// leaves after its processing, whatever it decides; Stop takes every key out, its workers end
// and Add fails.
func TestRemoveAndStop(t *testing.T) {
	h := newHarness(t, func(_, n int) Next[int] { return waitThen(time.Hour, n) })
	h.q.Add(1, 0)
	h.untilProcessed(1)
	for !h.clock.HasWaiters() {
		runtime.Gosched()
	}
	h.q.Remove(1)
	if keys, _ := h.q.Len(); keys != 0 || h.clock.HasWaiters() {
		t.Fatal("Remove left a waiting key or its timer")
	}
	h.hold()
	h.q.Add(2, 0)
	h.q.Add(3, 0)
	h.untilProcessed(3)
	if w := h.q.Workers(); w != 2 {
		t.Fatalf("%d workers for two keys processed at once, want 2", w)
	}
	h.q.Remove(2)
	h.q.Stop()
	h.release()
	h.untilIdle()
	if keys, _ := h.q.Len(); keys != 0 || h.clock.HasWaiters() {
		t.Fatalf("%d keys or a timer left after Remove and Stop", keys)
	}
	if h.q.Add(4, 0) {
		t.Fatal("Add succeeded after Stop")
	}
}

// TestALostRegistrationIsNotAskedForMore: a processing whose worker lost its registration
// (the lifetime ended while it was in a driver function) has its Next ignored, and the worker
// ends.
func TestALostRegistrationIsNotAskedForMore(t *testing.T) {
	clk := testclock.NewFakeClock(time.Now())
	life := lifetime.New()
	inside, release := make(chan struct{}), make(chan struct{})
	q := New(clk, life, func(tr *lifetime.Tracked, _ int, _ int, _ bool) Next[int] {
		tr.Outside(func() {
			close(inside)
			<-release
		})
		return waitThen(time.Hour, 1)
	})
	q.Add(1, 0)
	<-inside
	life.End() // does not wait for the processing in its driver function
	close(release)
	for q.Workers() != 0 {
		runtime.Gosched()
	}
	if keys, _ := q.Len(); keys != 0 || clk.HasWaiters() {
		t.Fatalf("the Next of a processing that lost its registration was followed: %d keys", keys)
	}
}

// model is the reference for TestQueueMatchesItsModel: each key absent or waiting until a time
// with a state; a processing follows the key's decisions at once.
type model struct {
	now    time.Duration
	keys   map[int]*modelKey
	decide func(key, n int) Next[int]
	count  map[int]int
	log    map[int][]processed // by key
	total  int
}

type modelKey struct {
	until time.Duration
	state int
}

// process processes k until it waits or leaves; kept, if not nil, is a Wake that came during
// the first processing, which ends the wait that processing decides if it accepts its state.
func (m *model) process(k, state int, early bool, kept func(int) bool) {
	for {
		m.log[k] = append(m.log[k], processed{k, state, early, m.now})
		m.total++
		next := m.decide(k, m.count[k])
		m.count[k]++
		wake := kept
		kept = nil
		switch {
		case next.Drop:
			delete(m.keys, k)
			return
		case next.After <= 0:
			state, early = next.State, false
		case wake != nil && wake(next.State):
			state, early = next.State, true
		default:
			m.keys[k] = &modelKey{until: m.now + next.After, state: next.State}
			return
		}
	}
}

func (m *model) add(k, s int) {
	if m.keys[k] == nil {
		m.keys[k] = &modelKey{}
		m.process(k, s, false, nil)
	}
}

func (m *model) wake(k int, match func(int) bool) {
	if e := m.keys[k]; e != nil && match(e.state) {
		m.process(k, e.state, true, nil)
	}
}

func (m *model) step(d time.Duration) {
	m.now += d
	for k, e := range m.keys {
		if e.until <= m.now {
			m.process(k, e.state, false, nil)
		}
	}
}

// TestQueueMatchesItsModel drives the queue on the fake clock with random Adds, Wakes (also
// while the key is processing), WakeAlls, Removes and steps of the clock (fixed seeds), each key's processing deciding at
// random to wait, to be ready again at once or to leave, and compares every key's processings
// (state handed, early, time) with the model's. No key may be processed twice at once.
func TestQueueMatchesItsModel(t *testing.T) {
	const keys = 6
	for seed := int64(1); seed <= 40; seed++ {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			decisions := map[[2]int]Next[int]{}
			var dmu sync.Mutex
			decide := func(k, n int) Next[int] {
				dmu.Lock()
				defer dmu.Unlock()
				if d, ok := decisions[[2]int{k, n}]; ok {
					return d
				}
				r := rand.New(rand.NewSource(seed*1_000_003 + int64(k)*7919 + int64(n)))
				var d Next[int]
				switch x := r.Intn(20); {
				case x == 0:
					d = Next[int]{Drop: true}
				case x <= 2:
					d = Next[int]{State: 1000*k + n}
				default:
					d = waitThen(time.Duration(1+r.Intn(10))*time.Second, 1000*k+n)
				}
				decisions[[2]int{k, n}] = d
				return d
			}
			h := newHarness(t, decide)
			m := &model{keys: map[int]*modelKey{}, decide: decide, count: map[int]int{}, log: map[int][]processed{}}
			r := rand.New(rand.NewSource(seed))
			odd := func(s int) bool { return s%2 == 1 }
			even := func(s int) bool { return s%2 == 0 && s > 0 }
			for op := 0; op < 150; op++ {
				k := r.Intn(keys)
				switch x := r.Intn(10); {
				case x <= 1:
					s := -1 - r.Intn(100)
					h.q.Add(k, s)
					m.add(k, s)
				case x == 2:
					h.q.Wake(k, odd)
					m.wake(k, odd)
				case x == 3:
					h.q.WakeAll(odd)
					for k := range keys {
						m.wake(k, odd)
					}
				case x == 4:
					h.q.Remove(k)
					delete(m.keys, k)
				case x == 5 && m.keys[k] != nil:
					// A Wake while the key is processing: the processing is held until the
					// kept Wake is in.
					// Half of them with a WakeAll too, kept beside the Wake.
					always := func(int) bool { return true }
					h.hold()
					h.q.Wake(k, always)
					h.untilProcessed(m.total + 1)
					h.q.Wake(k, odd)
					kept := odd
					if r.Intn(2) == 0 {
						h.q.WakeAll(even)
						for j := range keys {
							if j != k {
								m.wake(j, even)
							}
						}
						kept = func(s int) bool { return odd(s) || even(s) }
					}
					h.release()
					m.process(k, m.keys[k].state, true, kept)
				default:
					d := time.Duration(1+r.Intn(4)) * time.Second
					h.clock.Step(d)
					m.step(d)
				}
				got := h.untilProcessed(m.total)
				h.untilIdle()
				byKey := map[int][]processed{}
				for _, p := range got {
					byKey[p.key] = append(byKey[p.key], p)
				}
				for k := range keys {
					if fmt.Sprint(byKey[k]) != fmt.Sprint(m.log[k]) {
						t.Fatalf("after op %d, key %d: processed %v, the model %v", op, k, byKey[k], m.log[k])
					}
				}
				if n, waits := h.q.Len(); n != len(m.keys) || waits != len(m.keys) || h.clock.Waiters() != len(m.keys) {
					t.Fatalf("after op %d: %d keys, %d waiting, %d timers; the model has %d waiting", op, n, waits, h.clock.Waiters(), len(m.keys))
				}
			}
			if h.concurred.Load() {
				t.Fatal("a key was processed twice at once")
			}
		})
	}
}
