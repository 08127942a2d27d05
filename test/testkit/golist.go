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

package testkit

import (
	"os/exec"
	"strings"
	"testing"
)

// Deps lists the packages pkgs depend on, themselves included, as `go list -deps` gives them
// (read from the module cache; nothing is built); with standard false, the standard library's
// packages are left out. It fails the test if the go command cannot be run.
func Deps(t *testing.T, standard bool, pkgs ...string) []string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list dependencies: %v", err)
	}
	args := []string{"list", "-deps"}
	if !standard {
		args = append(args, "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}")
	}
	out, err := exec.Command(goTool, append(args, pkgs...)...).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", strings.Join(pkgs, " "), err)
	}
	return strings.Fields(string(out))
}
