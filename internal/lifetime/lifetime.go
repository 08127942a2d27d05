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

// Package lifetime is the life of a component that runs goroutines: a context that ends when it
// stops, and a count of its goroutines so that stopping can wait for them, except while one runs
// code the component does not control (a driver's function), which stopping never waits for.
package lifetime

import (
	"context"
	"sync/atomic"
)

// Lifetime is the manager's life: a context that ends on Stop, and a count of the manager's own
// goroutines so that Stop can wait for them, except while one is outside (Tracked.Outside), as
// the manager's goroutines are while they call the driver's functions: Stop does not wait for
// code the driver wrote. A goroutine that comes back from outside after Stop learns that the
// manager closed, and does nothing more than give back its own bookkeeping.
//
// The count and the closed mark are one atomic word, not a mutex: every turn of every volume's
// loop registers and leaves around each driver call (8 times in a renewal, measured by
// hack/lockcount), and a word changed by compare-and-swap costs those goroutines no lock.
type Lifetime struct {
	ctx    context.Context
	cancel context.CancelFunc

	// state is the number of registered goroutines, with closedBit set once End has begun.
	// Nothing registers once the bit is set, so the count only falls from then on, and exactly
	// one of End and leave sees it at zero with the bit set: that one closes idle.
	state atomic.Int64
	idle  chan struct{}
}

const closedBit = int64(1) << 62

// New returns a Lifetime whose context has not ended.
func New() *Lifetime {
	l := &Lifetime{idle: make(chan struct{})}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	return l
}

// End ends the context, refuses further goroutines and waits until every registered one has
// left. It may be called more than once.
func (l *Lifetime) End() {
	l.cancel()
	if before := l.state.Or(closedBit); before == 0 {
		close(l.idle)
	}
	<-l.idle
}

// enter registers a goroutine of the manager. It reports false once the manager is closed.
func (l *Lifetime) enter() bool {
	for {
		n := l.state.Load()
		if n&closedBit != 0 {
			return false
		}
		if l.state.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// leave unregisters a goroutine registered by enter.
func (l *Lifetime) leave() {
	if l.state.Add(-1) == closedBit {
		close(l.idle)
	}
}

// Tracked is one goroutine's registration. Outside calls it releases its registration for the
// duration of a driver function.
type Tracked struct {
	l      *Lifetime
	inside bool
}

// Track registers the calling goroutine; nil if the manager is closed.
func (l *Lifetime) Track() *Tracked {
	if !l.enter() {
		return nil
	}
	return &Tracked{l: l, inside: true}
}

// Outside runs f (a driver-supplied function) without holding up Stop. It reports false if the
// manager was closed meanwhile: the goroutine no longer counts and must return without doing
// anything more. Called again after that, it runs nothing and reports false.
func (t *Tracked) Outside(f func()) bool {
	if !t.inside {
		return false
	}
	t.l.leave()
	t.inside = false
	f()
	t.inside = t.l.enter()
	return t.inside
}

// Held reports whether the goroutine still holds its registration: false once an Outside call
// found the lifetime ended.
func (t *Tracked) Held() bool {
	return t.inside
}

// Done ends the registration (if the goroutine still holds it).
func (t *Tracked) Done() {
	if t != nil && t.inside {
		t.inside = false
		t.l.leave()
	}
}

// Context ends when Cancel or End is called.
func (l *Lifetime) Context() context.Context {
	return l.ctx
}

// Cancel ends the context without waiting for the goroutines (End waits).
func (l *Lifetime) Cancel() {
	l.cancel()
}
