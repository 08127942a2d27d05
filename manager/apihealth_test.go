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
	"sync/atomic"
	"testing"
	"time"

	"github.com/cert-manager/csi-lib/internal/apihealth"
)

// The two facts of the apiserver's health agree where they are linked, through their one owner:
// a renewal whose create finds the apiserver unreachable makes the informer's watch suspect and
// starts the outage's probe, both; a publish whose create does makes the watch suspect and
// starts no probe (kubelet retries a publish; only a loop waits for an outage's end).
func TestAnUnreachableApiserverMakesTheWatchSuspectAndARenewalProbesIt(t *testing.T) {
	t.Run("a renewal", func(t *testing.T) {
		e := newEnv(t, nil)
		var down atomic.Bool
		down.Store(true)
		refuseWhile(e, &down)
		e.register("v1", true)
		e.start()
		if d := e.nextTimer(); d != issueTimeout {
			t.Fatalf("expected an attempt, got a %v timer", d)
		}
		// The loop's backoff step and the probe's interval, after the probe failed.
		got := map[time.Duration]bool{e.nextTimer(): true, e.nextTimer(): true}
		if !got[30*time.Second] || !got[apihealth.ProbeInterval] {
			t.Fatalf("timers %v, want the backoff step and the probe interval", got)
		}
		if !watchSuspect(e.m)() || !e.m.issuance.health.Probing() {
			t.Fatalf("watch suspect %v, probing %v; want both", watchSuspect(e.m)(), e.m.issuance.health.Probing())
		}
	})
	t.Run("a publish", func(t *testing.T) {
		e := newEnv(t, nil)
		var down atomic.Bool
		down.Store(true)
		refuseWhile(e, &down)
		e.register("v1", false)
		m := e.start()
		if _, err := m.ManageVolumeImmediate(context.Background(), "v1"); err == nil {
			t.Fatal("the publish succeeded with the apiserver unreachable")
		}
		if !watchSuspect(m)() || m.issuance.health.Probing() {
			t.Fatalf("watch suspect %v, probing %v; want true, false", watchSuspect(m)(), m.issuance.health.Probing())
		}
	})
}
