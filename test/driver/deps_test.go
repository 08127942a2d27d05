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

package driver_test

import (
	"strings"
	"testing"

	"github.com/cert-manager/csi-lib/test/testkit"
)

// maxHarnessDeps bounds what a driver's test build compiles through test/driver and test/util:
// upstream's pair depends on about 670 packages.
const maxHarnessDeps = 700

// heavyDeps are module paths that must never enter a driver's test build through the harness:
// they belong to the envtest control plane of this project's own integration tests.
var heavyDeps = []string{
	"sigs.k8s.io/controller-runtime",
	"/envtest",
}

// TestHarnessImportsStayLight: drivers import test/driver and test/util in their own tests, so
// what those packages compile is part of the drop-in contract. go list reads the import graph
// from the module cache; it builds nothing.
func TestHarnessImportsStayLight(t *testing.T) {
	deps := testkit.Deps(t, true, "github.com/cert-manager/csi-lib/test/driver", "github.com/cert-manager/csi-lib/test/util")
	for _, pkg := range deps {
		for _, heavy := range heavyDeps {
			if strings.Contains(pkg, heavy) {
				t.Errorf("test/driver or test/util depends on %s", pkg)
				break
			}
		}
	}
	if len(deps) > maxHarnessDeps {
		t.Errorf("test/driver and test/util depend on %d packages, more than %d", len(deps), maxHarnessDeps)
	}
	t.Logf("test/driver and test/util depend on %d packages", len(deps))
}
