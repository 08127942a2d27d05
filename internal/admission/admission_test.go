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

package admission

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	testclock "k8s.io/utils/clock/testing"
)

var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const pollTimeout = 10 * time.Second

// recorder counts the waits and records every queue length reported.
type recorder struct {
	mu      sync.Mutex
	lengths []int
	waits   int
}

func (r *recorder) config(c Config) Config {
	c.WaitingChanged = func(n int) { r.mu.Lock(); r.lengths = append(r.lengths, n); r.mu.Unlock() }
	c.Waited = func() { r.mu.Lock(); r.waits++; r.mu.Unlock() }
	return c
}

func (r *recorder) snapshot() (lengths []int, waits int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.lengths...), r.waits
}

func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(pollTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// waiting returns how many callers are waiting in l's queue.
func waiting(l *Limits) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.queue.Len()
}

// admitted is one Wait's outcome.
type admitted struct {
	i       int
	release func()
	err     error
}

// startWaiters starts n waiters one after the other, each queued before the next starts, and
// returns the channel their outcomes arrive on.
func startWaiters(t *testing.T, l *Limits, ctxs []context.Context) <-chan admitted {
	t.Helper()
	out := make(chan admitted, len(ctxs))
	before := waiting(l)
	for i, ctx := range ctxs {
		go func() {
			release, err := l.Wait(ctx)
			out <- admitted{i, release, err}
		}()
		poll(t, "the waiter to queue", func() bool { return waiting(l) == before+i+1 })
	}
	return out
}

func receive(t *testing.T, c <-chan admitted) admitted {
	t.Helper()
	select {
	case a := <-c:
		return a
	case <-time.After(pollTimeout):
		t.Fatal("no waiter admitted")
		return admitted{}
	}
}

func nothingOn(t *testing.T, c <-chan admitted) {
	t.Helper()
	select {
	case a := <-c:
		t.Fatalf("waiter %d ended (err %v) with no slot or token free", a.i, a.err)
	case <-time.After(10 * time.Millisecond):
	}
}

// TestTokenTimerIsExact: at any rate, the time the timer waits for the next token is exactly
// when the bucket holds one: not a nanosecond earlier, and at that time (a fake clock stepped by
// exactly that long admits).
func TestTokenTimerIsExact(t *testing.T) {
	for _, perSecond := range []float64{1, 3, 7, 0.3, 1000.0 / 3, 1e6, 123456.789} {
		clk := testclock.NewFakeClock(start)
		a := New(Config{Clock: clk, Slots: math.MaxInt, PerSecond: perSecond, Burst: 1, WaitingChanged: func(int) {}, Waited: func() {}})
		for i := 0; i < 5; i++ {
			if _, ok := a.TryAcquire(); !ok {
				t.Fatalf("%v/s, token %d: not admitted when due", perSecond, i)
			}
			a.mu.Lock()
			d := a.untilTokenLocked()
			a.mu.Unlock()
			clk.Step(d - 1)
			if _, ok := a.TryAcquire(); ok {
				t.Fatalf("%v/s, token %d: admitted 1 ns before the token was due (%v)", perSecond, i+1, d)
			}
			clk.Step(1)
		}
	}
}

// TestSlotsFirstComeFirstServed: with every slot taken, waiters are admitted one per freed slot,
// in the order they queued; the waits and every queue length are reported.
func TestSlotsFirstComeFirstServed(t *testing.T) {
	var r recorder
	l := New(r.config(Config{Clock: testclock.NewFakeClock(start), Slots: 2}))
	var held []func()
	for i := 0; i < 2; i++ {
		release, ok := l.TryAcquire()
		if !ok {
			t.Fatalf("slot %d: not admitted with a slot free", i)
		}
		held = append(held, release)
	}
	if _, ok := l.TryAcquire(); ok {
		t.Fatal("admitted with every slot taken")
	}
	out := startWaiters(t, l, []context.Context{context.Background(), context.Background(), context.Background()})
	nothingOn(t, out)
	for i, release := range held {
		release()
		if a := receive(t, out); a.i != i || a.err != nil {
			t.Fatalf("admitted waiter %d (err %v), want %d", a.i, a.err, i)
		}
	}
	nothingOn(t, out)
	lengths, waits := r.snapshot()
	if want := []int{1, 2, 3, 2, 1}; !slices.Equal(lengths, want) || waits != 3 {
		t.Fatalf("lengths %v, waits %d; want %v and 3", lengths, waits, want)
	}
}

// TestReleaseTwiceFreesOnce: calling a release twice frees its slot once.
func TestReleaseTwiceFreesOnce(t *testing.T) {
	l := New(Config{Clock: testclock.NewFakeClock(start), Slots: 1, WaitingChanged: func(int) {}, Waited: func() {}})
	release, ok := l.TryAcquire()
	if !ok {
		t.Fatal("not admitted with the slot free")
	}
	release()
	release()
	if _, ok := l.TryAcquire(); !ok {
		t.Fatal("not admitted after the release")
	}
	if _, ok := l.TryAcquire(); ok {
		t.Fatal("a second release freed a second slot")
	}
}

// TestTryAcquireNeverJumpsTheQueue: once a waiter's token is earned, TryAcquire does not take
// it: the waiter does.
func TestTryAcquireNeverJumpsTheQueue(t *testing.T) {
	clk := testclock.NewFakeClock(start)
	l := New(Config{Clock: clk, Slots: math.MaxInt, PerSecond: 1, Burst: 1, WaitingChanged: func(int) {}, Waited: func() {}})
	if _, ok := l.TryAcquire(); !ok {
		t.Fatal("not admitted with a full bucket")
	}
	out := startWaiters(t, l, []context.Context{context.Background()})
	clk.Step(time.Second)
	if _, ok := l.TryAcquire(); ok {
		t.Fatal("TryAcquire took the token the waiter was waiting for")
	}
	if a := receive(t, out); a.err != nil {
		t.Fatal(a.err)
	}
	if _, ok := l.TryAcquire(); ok {
		t.Fatal("admitted with the bucket empty")
	}
}

// TestEndedWaitLeavesTheQueue: a waiter whose context ends returns its cause and leaves the
// queue, and the slot it did not get goes to the waiter behind it.
func TestEndedWaitLeavesTheQueue(t *testing.T) {
	var r recorder
	l := New(r.config(Config{Clock: testclock.NewFakeClock(start), Slots: 1}))
	release, ok := l.TryAcquire()
	if !ok {
		t.Fatal("not admitted with the slot free")
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	out := startWaiters(t, l, []context.Context{ctx, context.Background()})
	cause := errors.New("the caller's deadline")
	cancel(cause)
	if a := receive(t, out); a.i != 0 || !errors.Is(a.err, cause) || a.release != nil {
		t.Fatalf("waiter %d ended with %v, want waiter 0 with the caller's cause", a.i, a.err)
	}
	if n := waiting(l); n != 1 {
		t.Fatalf("%d waiting, want 1", n)
	}
	release()
	if a := receive(t, out); a.i != 1 || a.err != nil {
		t.Fatalf("admitted waiter %d (err %v), want 1", a.i, a.err)
	}
	if lengths, waits := r.snapshot(); !slices.Equal(lengths, []int{1, 2, 1, 0}) || waits != 2 {
		t.Fatalf("lengths %v, waits %d; want [1 2 1 0] and 2", lengths, waits)
	}
}

// TestCloseStopsTheTokenTimer: a queue waiting for a token has one timer on the clock, and
// Close stops it; the waiter ends through its context.
func TestCloseStopsTheTokenTimer(t *testing.T) {
	clk := testclock.NewFakeClock(start)
	l := New(Config{Clock: clk, Slots: 1, PerSecond: 0.001, Burst: 1, WaitingChanged: func(int) {}, Waited: func() {}})
	release, ok := l.TryAcquire()
	if !ok {
		t.Fatal("not admitted with a full bucket")
	}
	release()
	ctx, cancel := context.WithCancel(context.Background())
	out := startWaiters(t, l, []context.Context{ctx})
	if w := clk.Waiters(); w != 1 {
		t.Fatalf("%d timers on the clock, want 1", w)
	}
	l.Close()
	if w := clk.Waiters(); w != 0 {
		t.Fatalf("%d timers on the clock after Close, want 0", w)
	}
	cancel()
	if a := receive(t, out); !errors.Is(a.err, context.Canceled) {
		t.Fatalf("waiter ended with %v, want context.Canceled", a.err)
	}
	if w := clk.Waiters(); w != 0 {
		t.Fatalf("%d timers on the clock after the wait ended, want 0", w)
	}
}
