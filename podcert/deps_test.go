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
	"os/exec"
	"strings"
	"testing"
)

// TestImportsStayLight: a driver, or any program that writes pod-certificate files, imports this
// package for its few functions; it must bring nothing but the standard library, and in
// particular no client, gRPC server, metrics registry or the manager.
func TestImportsStayLight(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the package's dependencies: %v", err)
	}
	const self = "github.com/cert-manager/csi-lib/podcert"
	out, err := exec.Command(goTool, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", self).Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg != self {
			t.Errorf("podcert depends on %s, which is not in the standard library", pkg)
		}
	}
}
