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

package main

import (
	"encoding/json"

	"k8s.io/apimachinery/pkg/types"

	"github.com/cert-manager/csi-lib/internal/api/util"
)

func hashOf(id string) string { return util.HashIdentifier(id) }

func typesUID(s string) types.UID { return types.UID(s) }

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	must(err)
	return b
}
