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
	"os"
	"testing"

	"github.com/cert-manager/csi-lib/internal/csilibdebug"
)

// TestMain runs the package's tests without a CSILIBDEBUG from the environment that runs them:
// a test that needs a setting sets it (t.Setenv).
func TestMain(m *testing.M) {
	os.Unsetenv(csilibdebug.EnvironmentVariable)
	os.Exit(m.Run())
}
