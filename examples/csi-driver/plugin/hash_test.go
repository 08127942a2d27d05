/*
Copyright 2026 The cert-manager Authors.

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

package plugin

import (
	"testing"

	"github.com/cert-manager/csi-lib/internal/api/util"
)

// TestNodeIDHashIsTheManagersLabel: the example's metrics informer selects the node's requests
// by the very label value the manager writes, so upstream's request families count them.
func TestNodeIDHashIsTheManagersLabel(t *testing.T) {
	for _, id := range []string{"test-node", "node-a", "ip-10-0-0-1.ec2.internal", ""} {
		if got, want := nodeIDHash(id), util.HashIdentifier(id); got != want {
			t.Errorf("nodeIDHash(%q) = %q, the manager labels %q", id, got, want)
		}
	}
	if got := nodeIDHash("test-node"); got != "f56fd9f8b" {
		t.Errorf("nodeIDHash(test-node) = %q, want upstream's f56fd9f8b", got)
	}
}
