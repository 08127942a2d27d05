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
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cert-manager/csi-lib/metadata"
)

// gateAsks records when (since start, on the fake clock) the driver's gate is asked.
type gateAsks struct {
	mu sync.Mutex
	at []time.Duration
}

// recordGateAsks makes e's gate record each ask.
func recordGateAsks(e **env) (*gateAsks, func(*Options)) {
	g := &gateAsks{}
	return g, func(o *Options) {
		gate := o.ReadyToRequest
		o.ReadyToRequest = func(meta metadata.Metadata) (bool, string) {
			g.mu.Lock()
			g.at = append(g.at, (*e).clock.Now().Sub(start))
			g.mu.Unlock()
			return gate(meta)
		}
	}
}

func (g *gateAsks) times() []time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.at)
}

func seconds(s ...float64) []time.Duration {
	d := make([]time.Duration, len(s))
	for i, v := range s {
		d[i] = time.Duration(v * float64(time.Second))
	}
	return d
}

// TestGateScheduleAfterAClosedPublish pins, step by step on the fake clock (the default gate
// backoff without jitter: 1 s, doubling, 10 s cap), when the gate of a volume published with
// ContinueOnNotReady is asked while it stays closed: by the publish at 0 s; by the loop's first
// turn at once; then, as upstream's loop asks it (its first check one 1 s tick after the volume
// is managed, then after each step of the gate backoff), at 1, 2, 4, 8, 16 and 26 s. The first
// turn's refusal waits the gate backoff's first step without taking it. RequeuePod still ends a
// gate wait at once, and a refusal in a later due period steps the backoff from its first step.
func TestGateScheduleAfterAClosedPublish(t *testing.T) {
	var e *env
	asks, record := recordGateAsks(&e)
	e = newEnv(t, record)
	e.gateOpen.Store(false)
	meta := e.register("v1", false)
	meta.NextIssuanceTime = &time.Time{} // ContinueOnNotReady's "no certificate yet"
	if err := e.store.WriteMetadata("v1", meta); err != nil {
		t.Fatal(err)
	}
	m := e.start()
	if err := m.ManageVolumeForPublish(context.Background(), meta, true); err != nil {
		t.Fatalf("a publish with ContinueOnNotReady and a closed gate: %v", err)
	}

	// The loop's first turn attempts at once, and its refusal waits the first step, untaken;
	// each refusal after it takes a step: 1 s, 2 s, 4 s, 8 s, then the 10 s cap, twice.
	waits := seconds(1, 1, 2, 4, 8, 10, 10)
	e.expectAttemptThenWait(waits[0])
	for i := 1; i < len(waits); i++ {
		e.stepWait(waits[i-1])
		e.expectAttemptThenWait(waits[i])
	}
	if got, want := asks.times(), seconds(0, 0, 1, 2, 4, 8, 16, 26); !slices.Equal(got, want) {
		t.Fatalf("gate asked at %v, want %v", got, want)
	}

	// RequeuePod ends the gate wait at once: the attempt finds the gate open and issues.
	e.gateOpen.Store(true)
	m.RequeuePod("uid-v1")
	if d := e.nextTimer(); d != issueTimeout {
		t.Fatalf("RequeuePod did not end the gate wait (got a %v timer)", d)
	}
	e.issuePending()
	e.expectWait(40 * time.Minute) // due at two thirds of the 1 h certificate

	// A refusal in a later due period is not the first turn's: it takes the first step.
	e.gateOpen.Store(false)
	e.stepWait(40 * time.Minute)
	e.expectAttemptThenWait(time.Second)
	e.stepWait(time.Second)
	e.expectAttemptThenWait(2 * time.Second)
	renewal := 26*time.Second + 40*time.Minute
	want := append(seconds(0, 0, 1, 2, 4, 8, 16, 26, 26), renewal, renewal+time.Second)
	if got := asks.times(); !slices.Equal(got, want) {
		t.Fatalf("gate asked at %v, want %v", got, want)
	}
}

// TestFirstTurnErrorThenGate: the first turn's allowance is for its own gate refusal; after
// an issuance error in it, the class rule holds as in any turn: the gate backoff starts at its
// first step, which the next refusal takes.
func TestFirstTurnErrorThenGate(t *testing.T) {
	e := newEnv(t, nil)
	e.failKeygen.Store(true)
	e.register("v1", true)
	e.start() // resumes the mounted volume: due at once
	e.expectAttemptThenWait(30 * time.Second)
	e.failKeygen.Store(false)
	e.gateOpen.Store(false)
	e.stepWait(30 * time.Second)
	e.expectAttemptThenWait(time.Second)
	e.stepWait(time.Second)
	e.expectAttemptThenWait(2 * time.Second)
}
