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
	"context"
	"errors"
	"math/rand"
	"testing"
	"time"
)

// TestVolumeContext: a volume's context ends only with cancel; contexts derived from it end with
// it, and leave nothing registered on it once they are done.
func TestVolumeContext(t *testing.T) {
	v := newVolume("v", start, false)
	if v.ctx.Err() != nil {
		t.Fatal("a new volume's context has ended")
	}
	if _, ok := v.ctx.Deadline(); ok || v.ctx.Value("k") != nil {
		t.Fatal("a volume's context has a deadline or values")
	}

	// A derived context that is done before the volume leaves nothing behind.
	done, cancelDone := context.WithCancel(&v.ctx)
	cancelDone()
	if done.Err() == nil {
		t.Fatal("derived context not cancelled")
	}
	stopped := context.AfterFunc(&v.ctx, func() { t.Error("a stopped AfterFunc ran") })
	if !stopped() || stopped() {
		t.Fatal("stop must report true once, then false")
	}
	v.ctx.mu.Lock()
	left := len(v.ctx.funcs)
	v.ctx.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d functions left registered on the volume's context", left)
	}

	// A live derived context and an AfterFunc end with the volume.
	live, cancelLive := context.WithCancelCause(&v.ctx)
	defer cancelLive(nil)
	ran := make(chan struct{})
	context.AfterFunc(&v.ctx, func() { close(ran) })
	v.ctx.cancel()
	v.ctx.cancel() // a second cancel does nothing
	if !errors.Is(v.ctx.Err(), context.Canceled) {
		t.Fatalf("Err = %v after cancel", v.ctx.Err())
	}
	select {
	case <-live.Done():
	case <-time.After(pollTimeout):
		t.Fatal("a derived context did not end with the volume")
	}
	select {
	case <-ran:
	case <-time.After(pollTimeout):
		t.Fatal("an AfterFunc did not run when the volume ended")
	}
	// Registered after the end: runs at once.
	late := make(chan struct{})
	context.AfterFunc(&v.ctx, func() { close(late) })
	select {
	case <-late:
	case <-time.After(pollTimeout):
		t.Fatal("an AfterFunc registered after the end did not run")
	}
}

// TestVolumeStatusFollowsItsModel drives volumeStatus.apply with random sequences of events
// (fixed seeds) and compares the state after each with a reference model that reads the state
// off the events' history: the worst condition since the last key pair written wins, and a
// volume holds a certificate once its metadata or a write said so. apply must also report
// exactly the events that changed the status.
func TestVolumeStatusFollowsItsModel(t *testing.T) {
	events := []volumeEvent{eventHasCertificate, eventWritten, eventGatePending, eventFailed, eventOverdue, eventExpired}
	model := func(history []volumeEvent) string {
		since := history
		everCertificate := false
		for i, ev := range history {
			if ev == eventWritten {
				since = history[i+1:]
			}
			everCertificate = everCertificate || ev == eventWritten || ev == eventHasCertificate
		}
		has := func(want volumeEvent) bool {
			for _, ev := range since {
				if ev == want {
					return true
				}
			}
			return false
		}
		lastOutcome := ""
		for _, ev := range since {
			switch ev {
			case eventGatePending:
				lastOutcome = "gate_pending"
			case eventFailed:
				lastOutcome = "failing"
			}
		}
		switch {
		case has(eventExpired):
			return "expired"
		case has(eventOverdue):
			return "overdue"
		case lastOutcome != "":
			return lastOutcome
		case everCertificate:
			return "issued"
		default:
			return "pending"
		}
	}
	for seed := int64(1); seed <= 200; seed++ {
		rng := rand.New(rand.NewSource(seed))
		var s volumeStatus
		var history []volumeEvent
		for step := 0; step < 40; step++ {
			ev := events[rng.Intn(len(events))]
			before := s
			changed := s.apply(ev)
			history = append(history, ev)
			if changed != (s != before) {
				t.Fatalf("seed %d step %d: apply(%d) reported changed=%v, status %+v -> %+v", seed, step, ev, changed, before, s)
			}
			if got, want := s.state(), model(history); got != want {
				t.Fatalf("seed %d step %d: after %v the state is %q, the model says %q", seed, step, history, got, want)
			}
		}
	}
}
