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

package podcert

import (
	"testing"

	"github.com/cert-manager/csi-lib/test/testkit"
)

// TestImportsStayLight: a driver, or any program that writes pod-certificate files, imports this
// package for its few functions; it must bring nothing but the standard library, and in
// particular no client, gRPC server, metrics registry or the manager.
func TestImportsStayLight(t *testing.T) {
	const self = "github.com/cert-manager/csi-lib/podcert"
	for _, pkg := range testkit.Deps(t, false, self) {
		if pkg != self {
			t.Errorf("podcert depends on %s, which is not in the standard library", pkg)
		}
	}
}
