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

// Package workqueue is the manager's work queue, on an injected clock. Keys wait, each on a
// timer of the clock. They become ready in one FIFO. Workers start on demand and process
// them, never two at once for one key. What a key carries between two processings (its state:
// what it waits for, its backoffs) is the queue's: each processing is handed it and returns
// the next. A key that waits costs a timer and its state, and no goroutine.
//
// # Why not client-go's queue
//
// client-go's rate-limited work queue (NewTypedRateLimitingQueueWithConfig on the same fake
// clock, with a per-item rate limiter) was driven in the manager's patterns. It cannot meet
// these requirements:
//
//   - Each wait is one timer of the clock, stopped when the wait ends. The manager's tests see
//     that every volume waits, and that Stop left no timer, by the fake clock's waiters. With
//     100 keys waiting, the clock has 100 waiters here and 2 with client-go's queue (its
//     heartbeat ticker and one timer for the earliest wait). After Stop with a key waiting:
//     0 here, 2 with client-go's queue: its ShutDown leaves both on a fake clock.
//   - A Requeue ends a wait until due or for the gate, and the wait it ends is gone.
//     client-go's queue cannot end a wait, and AddAfter never delays a key that waits already.
//     A key waits the gate backoff's 1 s step, and a Requeue comes at 0.5 s: here its turns
//     come at 0 s, 0.5 s and 2.5 s; with client-go's queue at 0 s, 0.5 s and 1 s, so the 2 s
//     step is skipped.
//   - A Requeue that the turn's attempt answers costs nothing (Unwake). client-go's queue hands
//     a key added during its processing out again once it is done: one Requeue during a turn
//     gives 2 turns with no step of the clock, 1 here.
//   - A key taken out (its volume unmanaged) stops waiting at once. client-go's queue has no
//     call for it: of 100 waiting keys taken out, 100 are handed out when their wait would
//     have ended, 0 here.
//
// The manager could keep each key's wait beside client-go's queue, and ignore the turns it
// should not take; that is this queue again, with a second owner of every wait.
//
// The backoffs are wait.Backoff in a key's state, not a per-item rate limiter: the options
// take any wait.Backoff, and client-go's exponential limiter has no jitter. Of 100 keys'
// first waits, 100 are distinct with the default jitter of 0.5, 1 with the limiter.
//
// Two things client-go's queue does meet, so they are not why this queue stays: a step of the
// fake clock right after AddAfter is not missed (0 of 1,000 steps; but one that lands while
// its waiting loop re-arms its timer after a second AddAfter is, about once in ten runs of
// TestClientGoRequeueDuringAGateWait without the hold that test now makes), and a goroutine per Get
// starts workers on demand (64 blocked turns run at once on both).
//
// Every figure is measured by the tests in clientgo_test.go:
//
//	go test -count=1 -v -run TestClientGo ./internal/workqueue/
package workqueue
