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

// Command faultbench runs the library against a real kube-apiserver (envtest) with faults
// injected between the manager's client and the apiserver (test/testkit/faults), a signer on
// its own unfaulted client, and prints, per fault: requests per issuance, the most requests of
// one volume alive at once, the requests left over at the end, signed -> written p50 and p99,
// and the recovery after an outage. make bench runs it; KUBEBUILDER_ASSETS names the binaries.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/cert-manager/csi-lib/test/testkit/controlplane"
	"github.com/cert-manager/csi-lib/test/testkit/faults"
)

func main() {
	volumes := flag.Int("volumes", 20, "volumes per scenario")
	lifetime := flag.Duration("lifetime", 24*time.Second, "certificate lifetime (renewed at two thirds)")
	seed := flag.Int64("seed", 1, "seed of the faults")
	only := flag.String("only", "", "run the scenarios whose name contains this")
	flag.Parse()
	if err := run(*volumes, *lifetime, *seed, *only); err != nil {
		fmt.Fprintln(os.Stderr, "faultbench:", err)
		os.Exit(1)
	}
}

func run(volumes int, lifetime time.Duration, seed int64, only string) error {
	cp, err := controlplane.Start(controlplane.Options{})
	if err != nil {
		return err
	}
	defer func() { _ = cp.Stop() }()
	scenarios := []struct {
		name string
		s    faults.Scenario
	}{
		{"none", faults.Scenario{}},
		{"create forwarded, response lost (p = 0.3)", faults.Scenario{Settings: faults.Settings{LostAfter: 0.3, Resource: "certificaterequests"}}},
		{"every create's first response lost", faults.Scenario{Settings: faults.Settings{FirstCreateLost: true, Resource: "certificaterequests"}}},
		{"429 with Retry-After on half the creates", faults.Scenario{Settings: faults.Settings{TooManyRequests: 0.5, Resource: "certificaterequests"}}},
		{"watch streams down 3 s of every 5 s", faults.Scenario{WatchCuts: true}},
		{"lost responses (p = 0.3) and watch cuts", faults.Scenario{Settings: faults.Settings{LostAfter: 0.3, Resource: "certificaterequests"}, WatchCuts: true}},
		{"apiserver refusing connections for 20 s", faults.Scenario{Outage: 20 * time.Second, Duration: 3 * lifetime}},
	}
	fmt.Printf("csi-lib against a real kube-apiserver with faults (%s, %d CPUs, %s)\n", runtime.Version(), runtime.NumCPU(), time.Now().Format("2006-01-02"))
	fmt.Printf("%d volumes, %v certificates renewed at 2/3, retry backoff 2 s doubling to 30 s, seed %d\n\n", volumes, lifetime, seed)
	fmt.Printf("%-42s %9s %9s %8s %8s %10s %10s %12s\n", "fault", "req/iss.", "issuances", "max alive", "orphans", "s->w p50", "s->w p99", "recovery p50")
	for i, sc := range scenarios {
		if only != "" && !strings.Contains(sc.name, only) {
			continue
		}
		s := sc.s
		s.Config, s.Name, s.Volumes, s.Lifetime, s.Seed = cp.Config, fmt.Sprintf("s%d", i), volumes, lifetime, seed
		f, err := s.Run(context.Background())
		if err != nil {
			return fmt.Errorf("%s: %w", sc.name, err)
		}
		recovery := "-"
		if len(f.Recovery) > 0 {
			recovery = fmt.Sprintf("%v (%d)", faults.Percentile(f.Recovery, 50).Round(time.Millisecond), len(f.Recovery))
		}
		fmt.Printf("%-42s %9.2f %9d %8d %8d %10v %10v %12s\n", sc.name, f.RequestsPerIssuance(), f.Issuances, f.MaxAlive, f.Orphans,
			faults.Percentile(f.SignedToWritten, 50).Round(time.Millisecond), faults.Percentile(f.SignedToWritten, 99).Round(time.Millisecond), recovery)
	}
	return nil
}
