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

package approval

import (
	"strings"
	"testing"

	"github.com/cert-manager/csi-lib/internal/origin"
	"github.com/cert-manager/csi-lib/test/testkit"
)

// TestImportsStayLight: an approver imports this package for the check alone; it must not
// bring a client, a gRPC server or a metrics registry into the approver's build.
func TestImportsStayLight(t *testing.T) {
	deps := testkit.Deps(t, true, "github.com/cert-manager/csi-lib/approval")
	for _, pkg := range deps {
		for _, heavy := range []string{"k8s.io/client-go", "google.golang.org/grpc", "github.com/prometheus", "github.com/cert-manager/csi-lib/manager"} {
			if strings.HasPrefix(pkg, heavy) {
				t.Errorf("approval depends on %s", pkg)
			}
		}
	}
	const most = 300
	if len(deps) > most {
		t.Errorf("approval depends on %d packages, more than %d", len(deps), most)
	}
	t.Logf("approval depends on %d packages", len(deps))
}

// TestPodSpecImportsStayLight: the pod-spec rule names metadata.Metadata, which brings the CSI
// spec's gRPC types, and nothing more of a driver: no client, no manager, no metrics.
func TestPodSpecImportsStayLight(t *testing.T) {
	for _, pkg := range testkit.Deps(t, true, "github.com/cert-manager/csi-lib/approval/podspec") {
		for _, heavy := range []string{"k8s.io/client-go", "github.com/prometheus", "github.com/cert-manager/csi-lib/manager", "github.com/cert-manager/csi-lib/driver"} {
			if strings.HasPrefix(pkg, heavy) {
				t.Errorf("approval/podspec depends on %s", pkg)
			}
		}
	}
}

// TestDriversDoNotLinkTheChecks: the manager writes the origin annotations from internal/origin,
// so that a driver's build links none of this package's checks.
func TestDriversDoNotLinkTheChecks(t *testing.T) {
	for _, pkg := range testkit.Deps(t, false, "github.com/cert-manager/csi-lib/driver") {
		if strings.HasPrefix(pkg, "github.com/cert-manager/csi-lib/approval") {
			t.Errorf("the driver package depends on %s", pkg)
		}
	}
}

// TestAnnotationKeysAreTheManagers: the keys exported here, written out so that the
// documentation shows them, are the ones the manager writes.
func TestAnnotationKeysAreTheManagers(t *testing.T) {
	for exported, written := range map[string]string{
		NodeNameAnnotationKey:             origin.NodeNameAnnotationKey,
		PodNamespaceAnnotationKey:         origin.PodNamespaceAnnotationKey,
		PodNameAnnotationKey:              origin.PodNameAnnotationKey,
		PodUIDAnnotationKey:               origin.PodUIDAnnotationKey,
		PodServiceAccountAnnotationKey:    origin.PodServiceAccountAnnotationKey,
		PodServiceAccountUIDAnnotationKey: origin.PodServiceAccountUIDAnnotationKey,
	} {
		if exported != written {
			t.Errorf("approval's key %q, the manager's %q", exported, written)
		}
	}
}
