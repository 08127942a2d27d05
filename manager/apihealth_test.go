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

// A renewal whose create finds the apiserver unreachable starts the outage's probe; a publish
// whose create does starts none (kubelet retries a publish; only a loop waits for an outage's
// end). Both make the informer's watch suspect too, through the same owner: internal/apihealth's
// and certrequests' tests check that half, which nothing public shows without a wait running.
func TestAnUnreachableApiserverMakesARenewalProbeIt(t *testing.T) {
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
		if n := versionReads(e); n != 1 {
			t.Fatalf("%d probes of /version, want 1", n)
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
		// Stop waits for the manager's goroutines, a probe's among them, and a probe asks
		// /version as it starts.
		m.Stop()
		if n := versionReads(e); n != 0 {
			t.Fatalf("%d probes of /version after a publish's failure, want none", n)
		}
	})
}
