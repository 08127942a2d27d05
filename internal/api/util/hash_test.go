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

package util

import "testing"

func TestHashIdentifier(t *testing.T) {
	if got := HashIdentifier("test-node"); got != "f56fd9f8b" {
		t.Fatalf("HashIdentifier(test-node) = %q, want f56fd9f8b", got)
	}
	if HashIdentifier("a") == HashIdentifier("b") {
		t.Fatal("different IDs hash alike")
	}
}
