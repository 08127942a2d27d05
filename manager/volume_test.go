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
	"context"
	"errors"
	"math/rand"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/types"
)

// TestVolumeLogNamesItsVolumeAndPod: a volume's log lines carry its ID, and its pod's name once
// its metadata names the pod, the current pod only.
func TestVolumeLogNamesItsVolumeAndPod(t *testing.T) {
	var last string
	log := funcr.New(func(_, args string) { last = args }, funcr.Options{})
	v := newVolume(log, "v1", start, false)
	v.logger().Info("one")
	if want := `"level"=0 "msg"="one" "volume_id"="v1"`; last != want {
		t.Fatalf("log values %s, want %s", last, want)
	}
	for _, pod := range []string{"first", "second"} {
		v.setPod(&volumePod{uid: types.UID("uid-" + pod), namespace: "ns", name: pod})
		v.logger().Info("two")
		if want := `"level"=0 "msg"="two" "volume_id"="v1" "pod"="` + pod + `"`; last != want {
			t.Fatalf("log values %s, want %s", last, want)
		}
	}
	v.setPod(nil)
	v.logger().Info("three")
	if strings.Contains(last, "pod") {
		t.Fatalf("log values %s name a pod after the metadata named none", last)
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

// TestVolumeEndsAnAttemptThatStartsAsItCloses: an attempt that starts before, after or while
// its volume closes (or its pod terminates) is ended with the cause, whichever side comes
// first; the concurrent rounds cover the orders a single goroutine cannot.
func TestVolumeEndsAnAttemptThatStartsAsItCloses(t *testing.T) {
	for _, c := range []struct {
		name  string
		end   func(v *managedVolume)
		cause error
	}{
		{"close", func(v *managedVolume) { v.close() }, errStopped},
		{"pod terminates", (*managedVolume).podTerminates, ErrPodTerminating},
	} {
		check := func(order string, run func(v *managedVolume, start func())) {
			v := newVolume(logr.Discard(), "v1", start, false)
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			run(v, func() { v.attemptStarted(cancel) })
			if got := context.Cause(ctx); !errors.Is(got, c.cause) {
				t.Fatalf("%s, %s: the attempt's cause is %v, want %v", c.name, order, got, c.cause)
			}
		}
		check("attempt first", func(v *managedVolume, start func()) { start(); c.end(v) })
		check("attempt last", func(v *managedVolume, start func()) { c.end(v); start() })
		for i := 0; i < 500; i++ {
			check("concurrently", func(v *managedVolume, start func()) {
				var wg sync.WaitGroup
				wg.Add(2)
				go func() { defer wg.Done(); start() }()
				go func() { defer wg.Done(); c.end(v) }()
				wg.Wait()
			})
		}
	}
}

// TestVolumeFenceWaitsForARunningWrite: fence returns only once a WriteKeypair that started
// before it has ended, and no write starts after it.
func TestVolumeFenceWaitsForARunningWrite(t *testing.T) {
	v := newVolume(logr.Discard(), "v1", start, false)
	if !v.writeStarts() {
		t.Fatal("a write was refused before the fence")
	}
	fenced := make(chan struct{})
	go func() { v.fence(); close(fenced) }()
	for !v.is(flagFenced) {
		runtime.Gosched()
	}
	select {
	case <-fenced:
		t.Fatal("fence returned while a write was running")
	default:
	}
	v.writeEnded(&keypairWrite{at: start})
	<-fenced
	if v.writeStarts() {
		t.Fatal("a write started after the fence")
	}
	v.fence() // no write runs: returns at once
}
