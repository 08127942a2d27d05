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
	"container/list"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/cert-manager/csi-lib/internal/clockutil"
	"github.com/cert-manager/csi-lib/internal/lifetime"
)

// Next is what a processing decides for its key: wait After (zero or less: ready again at
// once, at the back of the queue) with State, or leave the queue (Drop).
type Next[S any] struct {
	After time.Duration
	State S
	Drop  bool
}

// Process processes key k with the state its last wait was given. early says Wake ended that
// wait before its time. tr is the worker's registration with the queue's lifetime: a Process
// that lets tr go (lifetime.Tracked.Outside reported false) is not asked for more, and its Next
// is ignored.
type Process[K comparable, S any] func(tr *lifetime.Tracked, k K, s S, early bool) Next[S]

// Queue is the work queue. Its lock guards every key's place and state; Process runs without it.
type Queue[K comparable, S any] struct {
	clock   clock.Clock
	life    *lifetime.Lifetime
	process Process[K, S]

	mu      sync.Mutex
	stopped bool
	keys    map[K]*entry[S]
	ready   list.List // of K, first in, first out
	// workers are the running workers; busy, those of them processing a key.
	workers, busy int
}

// place is where a key is.
type place uint8

const (
	waiting    place = iota // on its timer
	ready                   // in the FIFO
	processing              // on a worker
)

type entry[S any] struct {
	place place
	state S
	early bool
	// stopTimer stops the wait's timer; seq tells a timer that fired from the current wait.
	stopTimer func() bool
	seq       uint64
	elem      *list.Element // in the FIFO while ready
	// wake is the last Wake that came while the key was processing, wakeAll every WakeAll that
	// did: the wait the processing decides ends at once if either accepts its state. A Wake
	// replaces the one before (the manager's Requeue always passes the same match); the
	// WakeAlls add up, since each may accept a different state (one per outage that ended).
	wake, wakeAll func(S) bool
	// removed: Remove came while the key was processing.
	removed bool
}

// New returns a queue whose workers run on goroutines of life and call process.
func New[K comparable, S any](clk clock.Clock, life *lifetime.Lifetime, process Process[K, S]) *Queue[K, S] {
	return &Queue[K, S]{clock: clk, life: life, process: process, keys: make(map[K]*entry[S])}
}

// Add puts k in the queue, ready at once with state s. It reports false, and does nothing, if k
// is in the queue already or the queue is stopped.
func (q *Queue[K, S]) Add(k K, s S) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stopped || q.keys[k] != nil {
		return false
	}
	e := &entry[S]{state: s}
	q.keys[k] = e
	q.makeReadyLocked(k, e, false)
	return true
}

// Wake ends k's wait now if match says its state may be woken; the processing is told early.
// A Wake that comes while k is ready does nothing: the processing to come answers it. One that
// comes while k is processing is kept (the last one; see entry.wake), and ends the wait that
// processing decides at once if match accepts its state, unless the processing drops it first
// (Unwake). It reports whether k's wait ended.
func (q *Queue[K, S]) Wake(k K, match func(S) bool) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	e := q.keys[k]
	switch {
	case e == nil:
		return false
	case e.place == processing:
		e.wake = match
		return false
	case e.place == waiting && match(e.state):
		q.endWaitLocked(k, e, true)
		return true
	}
	return false
}

// Unwake drops the Wake and WakeAlls kept for k while it is processing, if any: the processing
// tells the queue it has reached the point that answers every wake that came before. A wake
// after Unwake is kept again.
func (q *Queue[K, S]) Unwake(k K) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if e := q.keys[k]; e != nil && e.place == processing {
		e.wake, e.wakeAll = nil, nil
	}
}

// WakeAll is Wake for every key: it ends the waits whose state match accepts, and is kept for
// each key that is processing, beside the WakeAlls kept before. It returns how many waits ended.
func (q *Queue[K, S]) WakeAll(match func(S) bool) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for k, e := range q.keys {
		switch {
		case e.place == processing && e.wakeAll == nil:
			e.wakeAll = match
		case e.place == processing:
			before := e.wakeAll
			e.wakeAll = func(s S) bool { return before(s) || match(s) }
		case e.place == waiting && match(e.state):
			q.endWaitLocked(k, e, true)
			n++
		}
	}
	return n
}

// Remove takes k out of the queue: its timer stops, or it leaves the FIFO; a processing that
// runs finishes, and k leaves after it.
func (q *Queue[K, S]) Remove(k K) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if e := q.keys[k]; e != nil {
		q.removeLocked(k, e)
	}
}

// Stop takes every key out of the queue and stops their timers. Workers finish the key they
// process, and start no other.
func (q *Queue[K, S]) Stop() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.stopped = true
	for k, e := range q.keys {
		q.removeLocked(k, e)
	}
}

// Len reports how many keys are in the queue, and how many of them are waiting.
func (q *Queue[K, S]) Len() (keys, waits int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, e := range q.keys {
		if e.place == waiting {
			waits++
		}
	}
	return len(q.keys), waits
}

// Workers reports how many workers are running.
func (q *Queue[K, S]) Workers() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.workers
}

// removeLocked takes k out of the queue, or, if it is processing, out after its processing. A
// timer that fired already finds k gone (fire).
func (q *Queue[K, S]) removeLocked(k K, e *entry[S]) {
	switch e.place {
	case processing:
		e.removed = true
		return
	case waiting:
		e.stopTimer()
	case ready:
		q.ready.Remove(e.elem)
	}
	delete(q.keys, k)
}

// endWaitLocked stops k's timer and makes it ready.
func (q *Queue[K, S]) endWaitLocked(k K, e *entry[S], early bool) {
	e.seq++
	e.stopTimer()
	q.makeReadyLocked(k, e, early)
}

// makeReadyLocked puts k at the back of the FIFO and starts a worker if fewer are free than
// keys are ready.
func (q *Queue[K, S]) makeReadyLocked(k K, e *entry[S], early bool) {
	e.place, e.early = ready, early
	e.elem = q.ready.PushBack(k)
	if q.workers-q.busy >= q.ready.Len() {
		return
	}
	tr := q.life.Track()
	if tr == nil {
		return
	}
	q.workers++
	go q.work(tr)
}

// waitLocked makes k wait d with its state, on a timer of the clock.
func (q *Queue[K, S]) waitLocked(k K, e *entry[S], d time.Duration) {
	e.place = waiting
	e.seq++
	seq := e.seq
	e.stopTimer = clockutil.AfterFunc(q.clock, d, func() { q.fire(k, e, seq) })
}

// fire ends k's wait if its timer is the current wait's.
func (q *Queue[K, S]) fire(k K, e *entry[S], seq uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.keys[k] != e || e.place != waiting || e.seq != seq {
		return
	}
	q.makeReadyLocked(k, e, false)
}

// work processes ready keys, first in first out, until none is ready (none is after Stop).
func (q *Queue[K, S]) work(tr *lifetime.Tracked) {
	defer tr.Done()
	q.mu.Lock()
	for {
		front := q.ready.Front()
		if front == nil {
			q.workers--
			q.mu.Unlock()
			return
		}
		k := q.ready.Remove(front).(K)
		e := q.keys[k]
		e.place = processing
		q.busy++
		q.mu.Unlock()

		next := q.process(tr, k, e.state, e.early)

		q.mu.Lock()
		q.busy--
		if !tr.Held() {
			// The lifetime ended while the processing was in a driver function: it touches
			// nothing more.
			delete(q.keys, k)
			q.workers--
			q.mu.Unlock()
			return
		}
		q.finishLocked(k, e, next)
	}
}

// finishLocked places k as its processing decided.
func (q *Queue[K, S]) finishLocked(k K, e *entry[S], next Next[S]) {
	wake, wakeAll := e.wake, e.wakeAll
	e.wake, e.wakeAll = nil, nil
	if next.Drop || e.removed {
		delete(q.keys, k)
		return
	}
	e.state = next.State
	switch {
	case next.After <= 0:
		q.makeReadyLocked(k, e, false)
	case wake != nil && wake(next.State), wakeAll != nil && wakeAll(next.State):
		q.makeReadyLocked(k, e, true)
	default:
		q.waitLocked(k, e, next.After)
	}
}
