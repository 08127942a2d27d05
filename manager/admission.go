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

package manager

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

// admission implements Options.MaxConcurrentIssuances and Options.IssuanceRateLimit (their
// field docs give the rules): slots, a token bucket, and one queue in front of both, so the
// head of the queue is admitted before anyone behind it. A wait ends at once when the waiter's
// context does.
type admission struct {
	clock clock.Clock
	max   int
	// bucket is the token bucket, asked with explicit times on the injected clock; nil: no rate
	// limit. It only answers whether a token is there and takes it: the queue is ours, so the
	// head of the queue is always the next one served.
	bucket *rate.Limiter
	// waitingChanged reports the queue length after every change; waited counts one wait.
	waitingChanged func(n int)
	waited         func()

	mu        sync.Mutex
	inFlight  int
	queue     list.List // of *admissionWaiter
	stopTimer func() bool
	closed    bool
}

type admissionWaiter struct {
	ready    chan struct{}
	elem     *list.Element
	admitted bool
	token    *rate.Reservation // the token taken when admitted; nil without a bucket
}

func newAdmission(o Options, waitingChanged func(int), waited func()) *admission {
	a := &admission{
		clock:          o.Clock,
		max:            o.MaxConcurrentIssuances,
		waitingChanged: waitingChanged,
		waited:         waited,
	}
	if rl := o.IssuanceRateLimit; rl != nil {
		a.bucket = rate.NewLimiter(rate.Limit(rl.PerSecond), rl.Burst) // starts full
	}
	return a
}

// tryAcquire admits the caller at once if nobody is waiting and a slot and a token are free.
func (a *admission) tryAcquire() (release func(), ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.queue.Len() > 0 || !a.canAdmitLocked() {
		return nil, false
	}
	a.takeLocked()
	return a.releaseFunc(), true
}

// wait queues the caller behind everyone already waiting and returns once it is admitted, or
// with ctx's cause when ctx ends first (its place then goes to the next waiter).
func (a *admission) wait(ctx context.Context) (release func(), err error) {
	w := &admissionWaiter{ready: make(chan struct{})}
	a.mu.Lock()
	w.elem = a.queue.PushBack(w)
	a.waited()
	a.waitingChanged(a.queue.Len())
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
			w.token.CancelAt(a.clock.Now())
		}
	} else {
		a.queue.Remove(w.elem)
		a.waitingChanged(a.queue.Len())
	}
	a.admitLocked()
	return nil, context.Cause(ctx)
}

// releaseFunc returns the function that frees an admitted attempt's slot; calling it more than
// once frees it once.
func (a *admission) releaseFunc() func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.inFlight--
			a.admitLocked()
		})
	}
}

// close stops the token timer; waiters end through their contexts.
func (a *admission) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	if a.stopTimer != nil {
		a.stopTimer()
		a.stopTimer = nil
	}
}

// canAdmitLocked reports whether a slot and a token are free now.
func (a *admission) canAdmitLocked() bool {
	return a.inFlight < a.max && (a.bucket == nil || a.bucket.TokensAt(a.clock.Now()) >= 1)
}

// takeLocked takes a slot and a token, and returns the token's reservation (nil without a
// bucket).
func (a *admission) takeLocked() *rate.Reservation {
	a.inFlight++
	if a.bucket == nil {
		return nil
	}
	return a.bucket.ReserveN(a.clock.Now(), 1)
}

// untilTokenLocked is how long until the bucket holds a whole token, rounded up to the
// nanosecond.
func (a *admission) untilTokenLocked() time.Duration {
	missing := 1 - a.bucket.TokensAt(a.clock.Now())
	return time.Duration(math.Ceil(missing / float64(a.bucket.Limit()) * float64(time.Second)))
}

// admitLocked admits waiters from the head of the queue while a slot and a token are free. If
// the head lacks only a token, a timer on the clock wakes the queue when the token is earned.
func (a *admission) admitLocked() {
	for a.queue.Len() > 0 && a.canAdmitLocked() {
		w := a.queue.Remove(a.queue.Front()).(*admissionWaiter)
		w.token = a.takeLocked()
		w.admitted = true
		close(w.ready)
		a.waitingChanged(a.queue.Len())
	}
	if a.queue.Len() == 0 || a.inFlight >= a.max || a.bucket == nil || a.stopTimer != nil || a.closed {
		return
	}
	a.stopTimer = clockutil.AfterFunc(a.clock, a.untilTokenLocked(), func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.stopTimer = nil
		if !a.closed {
			a.admitLocked()
		}
	})
}
