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
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"testing"
	"time"

	"github.com/cert-manager/csi-lib/internal/certs"
	"github.com/cert-manager/csi-lib/test/testkit"
)

func signedChain(t *testing.T, ca *testkit.CA, notBefore time.Time, life time.Duration) []byte {
	t.Helper()
	key, _ := testkit.NewKey()
	csr, err := testkit.CSR(&x509.CertificateRequest{Subject: pkix.Name{CommonName: "x"}}, key)
	if err != nil {
		t.Fatal(err)
	}
	chain, err := ca.Sign(csr, notBefore, life)
	if err != nil {
		t.Fatal(err)
	}
	return chain
}

// scheduleOf is renewalSchedule's time for the leaf of chain.
func scheduleOf(t *testing.T, chain []byte, volumeID string, jitter float64) time.Time {
	t.Helper()
	leaf, err := certs.ParseLeaf(chain)
	if err != nil {
		t.Fatal(err)
	}
	at, _ := renewalSchedule(leaf, volumeID, jitter)
	return at
}

// TestRenewalJitterWindow: every draw lies in [R − f·(R − NotBefore), R], never after upstream's
// point R; the draws spread over the window; the same volume and certificate always give the
// same time (so a restarted manager computes what the first one did); zero is upstream's R.
func TestRenewalJitterWindow(t *testing.T) {
	ca, err := testkit.NewCA("ca")
	if err != nil {
		t.Fatal(err)
	}
	const f = 0.3
	life := time.Hour
	lowest, highest := time.Duration(1<<62), time.Duration(0)
	for i := 0; i < 200; i++ {
		chain := signedChain(t, ca, start, life)
		id := fmt.Sprintf("vol-%d", i)
		r, _ := defaultNextIssuanceTime(chain)
		got := scheduleOf(t, chain, id, f)
		window := time.Duration(f * float64(r.Sub(start)))
		if got.After(r) || got.Before(r.Add(-window)) {
			t.Fatalf("draw %v outside [%v, %v]", got, r.Add(-window), r)
		}
		earlier := r.Sub(got)
		lowest, highest = min(lowest, earlier), max(highest, earlier)
		if again := scheduleOf(t, chain, id, f); !again.Equal(got) {
			t.Fatalf("the draw for one volume and certificate changed: %v then %v", got, again)
		}
		if off := scheduleOf(t, chain, id, 0); !off.Equal(r) {
			t.Fatalf("jitter 0 gave %v, want upstream's %v", off, r)
		}
	}
	window := time.Duration(f * float64(40*time.Minute))
	if lowest > window/10 || highest < window*9/10 {
		t.Fatalf("200 draws span only %v..%v of a %v window", lowest, highest, window)
	}
}

// TestRenewalJitterEndToEnd: the drawn time is what WriteKeypair persists, a restarted manager
// waits for that same time, and NewManager rejects values outside [0, 1).
func TestRenewalJitterEndToEnd(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.RenewalJitter = 0.5 })
	e.register("v1", false)
	m := e.start()
	issued := e.manageAndIssue("v1")
	want := scheduleOf(t, issued.Status.Certificate, "v1", 0.5)
	upstream, _ := defaultNextIssuanceTime(issued.Status.Certificate)
	stored, _ := e.store.ReadMetadata("v1")
	if stored.NextIssuanceTime == nil || !stored.NextIssuanceTime.Equal(want) || !want.Before(upstream) {
		t.Fatalf("stored %v, want the draw %v (before upstream's %v)", stored.NextIssuanceTime, want, upstream)
	}

	// A restarted manager schedules the volume at the same drawn time: it is not re-rolled.
	if err := e.store.SetMounted("v1"); err != nil {
		t.Fatal(err)
	}
	m.Stop()
	for len(e.clock.Timers) > 0 {
		<-e.clock.Timers
	}
	restarted, err := NewManager(e.opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(restarted.Stop)
	if d := e.nextTimer(); d != want.Sub(e.clock.Now()) {
		t.Fatalf("restarted manager waits %v, want %v (until the stored draw)", d, want.Sub(e.clock.Now()))
	}

	for _, bad := range []float64{-0.1, 1, 2} {
		o := e.opts
		o.RenewalJitter = bad
		if _, err := NewManager(o); err == nil {
			t.Errorf("RenewalJitter %v accepted", bad)
		}
	}
}
