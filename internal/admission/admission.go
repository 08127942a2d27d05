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

// Package admission holds back the issuance attempts of a node: at most a number of them at once
// (slots), optionally no faster than a token bucket allows, first come first served. It
// implements manager's Options.MaxConcurrentIssuances and Options.IssuanceRateLimit (their field
// docs give the rules).
//
// One queue stands in front of both the slots and the bucket, so the head of the queue is
// admitted before anyone behind it. Every time is read from the injected clock, and the timer
// that wakes the queue when a token is earned runs on it too.
package admission

import (
	"container/list"
	"context"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/utils/clock"

	"github.com/cert-manager/csi-lib/internal/clockutil"
)

// Config is what New needs: the clock, the limits and the callbacks that report the queue.
type Config struct {
	Clock clock.Clock
	// Slots is how many callers may be admitted at once; math.MaxInt for no limit.
	Slots int
	// PerSecond and Burst are the token bucket: PerSecond tokens are earned every second, up to
	// Burst, and the bucket starts full. PerSecond zero: no rate limit.
	PerSecond float64
	Burst     int
	// WaitingChanged reports the queue length after every change, under the queue's lock;
	// Waited counts one wait. Both are required.
	WaitingChanged func(n int)
	Waited         func()
}

// Limits is the node's slots, token bucket and the queue in front of both. A wait ends at once
// when the waiter's context does.
type Limits struct {
	cfg Config
	// bucket is the token bucket, asked with explicit times on the injected clock; nil: no rate
	// limit. It only answers whether a token is there and takes it: the queue is ours, so the
	// head of the queue is always the next one served.
	bucket *rate.Limiter

	mu        sync.Mutex
	inFlight  int
	queue     list.List // of *waiter
	stopTimer func() bool
	closed    bool
}

type waiter struct {
	ready    chan struct{}
	elem     *list.Element
	admitted bool
	token    *rate.Reservation // the token taken when admitted; nil without a bucket
}

// New returns the limits c describes, with every slot free and the bucket full.
func New(c Config) *Limits {
	a := &Limits{cfg: c}
	if c.PerSecond != 0 {
		a.bucket = rate.NewLimiter(rate.Limit(c.PerSecond), c.Burst) // starts full
	}
	return a
}

// TryAcquire admits the caller at once if nobody is waiting and a slot and a token are free.
// The returned release frees the slot; call it when the admitted work is over.
func (a *Limits) TryAcquire() (release func(), ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.queue.Len() > 0 || !a.canAdmitLocked() {
		return nil, false
	}
	a.takeLocked()
	return a.releaseFunc(), true
}

// Wait queues the caller behind everyone already waiting and returns once it is admitted, or
// with ctx's cause when ctx ends first (its place then goes to the next waiter). The returned
// release frees the slot; call it when the admitted work is over.
func (a *Limits) Wait(ctx context.Context) (release func(), err error) {
	w := &waiter{ready: make(chan struct{})}
	a.mu.Lock()
	w.elem = a.queue.PushBack(w)
	a.cfg.Waited()
	a.cfg.WaitingChanged(a.queue.Len())
	a.admitLocked()
	a.mu.Unlock()

	select {
	case <-w.ready:
		return a.releaseFunc(), nil
	case <-ctx.Done():
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if w.admitted {
		// Admitted as ctx ended: hand the slot back, and the token if no time has passed on
		// the clock since (the bucket's own rule: a token whose time has passed is spent).
		a.inFlight--
		if w.token != nil {
			w.token.CancelAt(a.cfg.Clock.Now())
		}
	} else {
		a.queue.Remove(w.elem)
		a.cfg.WaitingChanged(a.queue.Len())
	}
	a.admitLocked()
	return nil, context.Cause(ctx)
}

// releaseFunc returns the function that frees an admitted caller's slot; calling it more than
// once frees it once.
func (a *Limits) releaseFunc() func() {
	return sync.OnceFunc(func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.inFlight--
		a.admitLocked()
	})
}

// Close stops the token timer; waiters end through their contexts.
func (a *Limits) Close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	if a.stopTimer != nil {
		a.stopTimer()
		a.stopTimer = nil
	}
}

// canAdmitLocked reports whether a slot and a token are free now.
func (a *Limits) canAdmitLocked() bool {
	return a.inFlight < a.cfg.Slots && (a.bucket == nil || a.bucket.TokensAt(a.cfg.Clock.Now()) >= 1)
}

// takeLocked takes a slot and a token, and returns the token's reservation (nil without a
// bucket).
func (a *Limits) takeLocked() *rate.Reservation {
	a.inFlight++
	if a.bucket == nil {
		return nil
	}
	return a.bucket.ReserveN(a.cfg.Clock.Now(), 1)
}

// untilTokenLocked is how long until the bucket holds a whole token, rounded up to the
// nanosecond.
func (a *Limits) untilTokenLocked() time.Duration {
	missing := 1 - a.bucket.TokensAt(a.cfg.Clock.Now())
	return time.Duration(math.Ceil(missing / float64(a.bucket.Limit()) * float64(time.Second)))
}

// admitLocked admits waiters from the head of the queue while a slot and a token are free. If
// the head lacks only a token, a timer on the clock wakes the queue when the token is earned.
func (a *Limits) admitLocked() {
	for a.queue.Len() > 0 && a.canAdmitLocked() {
		w := a.queue.Remove(a.queue.Front()).(*waiter)
		w.token = a.takeLocked()
		w.admitted = true
		close(w.ready)
		a.cfg.WaitingChanged(a.queue.Len())
	}
	if a.queue.Len() == 0 || a.inFlight >= a.cfg.Slots || a.bucket == nil || a.stopTimer != nil || a.closed {
		return
	}
	a.stopTimer = clockutil.AfterFunc(a.cfg.Clock, a.untilTokenLocked(), func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.stopTimer = nil
		if !a.closed {
			a.admitLocked()
		}
	})
}
