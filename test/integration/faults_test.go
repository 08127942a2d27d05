//go:build integration

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

package integration

import (
	"context"
	"testing"
	"time"

	"github.com/cert-manager/csi-lib/test/testkit/faults"
)

// TestOneRequestPerIssuanceUnderFaults runs volumes through issuances and renewals while the
// manager's client loses create responses (after the apiserver created the request) and its
// watches are down three seconds in five: exactly one request per issuance, never two of one
// volume alive at once, none left over. A renewal that the end of the run cuts short (its request
// created, its key pair not yet written when the manager stops, as happens on a loaded machine)
// is an issuance with its one request. (How soon a signed certificate is written is a figure,
// which make bench prints, not a check.)
func TestOneRequestPerIssuanceUnderFaults(t *testing.T) {
	f, err := faults.Scenario{
		Config:    restConfig,
		Name:      "integration",
		Volumes:   5,
		Lifetime:  12 * time.Second,
		Duration:  24 * time.Second,
		Settings:  faults.Settings{LostAfter: 0.5, Resource: "certificaterequests"},
		WatchCuts: true,
		Seed:      7,
	}.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d issuances (and %d cut short by the end of the run), %d requests, %d responses lost, %d watches cut; signed -> written p50 %v, max %v",
		f.Issuances, f.InFlight, f.Requests, f.Counts.LostAfter, f.Counts.WatchesCut, faults.Percentile(f.SignedToWritten, 50), faults.Percentile(f.SignedToWritten, 100))
	if f.Counts.LostAfter == 0 || f.Counts.WatchesCut == 0 {
		t.Fatalf("no fault was injected (%+v)", f.Counts)
	}
	if f.Requests != f.Issuances+f.InFlight {
		t.Errorf("%d requests for %d issuances (%d of them cut short by the end of the run)", f.Requests, f.Issuances+f.InFlight, f.InFlight)
	}
	if f.MaxAlive > 1 {
		t.Errorf("%d volumes had more than one request alive, up to %d", f.VolumesOverOne, f.MaxAlive)
	}
	if f.Orphans != 0 {
		t.Errorf("%d requests left over", f.Orphans)
	}
}
