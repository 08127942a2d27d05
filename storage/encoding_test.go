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

package storage

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/cert-manager/csi-lib/metadata"
)

// decodeOnDiskTwice is the reference for decodeOnDisk: the file decoded as metadata.Metadata,
// then again for its "mounted" key alone.
func decodeOnDiskTwice(raw []byte) (metadata.Metadata, error) {
	var meta metadata.Metadata
	if err := json.Unmarshal(raw, &meta); err != nil {
		return metadata.Metadata{}, fmt.Errorf("%w: %v", ErrInvalidJSON, err)
	}
	var probe struct {
		Mounted *bool `json:"mounted"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		return metadata.Metadata{}, fmt.Errorf("%w: %v", ErrInvalidJSON, err)
	}
	if probe.Mounted != nil {
		meta.Mounted = *probe.Mounted
	} else {
		meta.Mounted = meta.NextIssuanceTime != nil
	}
	return meta, nil
}

// TestDecodeOnDiskIsTheTwoDecodes: decodeOnDisk decodes a file in one pass to what a decode as
// metadata.Metadata and a second for the "mounted" key give, and fails with the same text.
func TestDecodeOnDiskIsTheTwoDecodes(t *testing.T) {
	for _, raw := range []string{
		`{"volumeID":"v","targetPath":"/t","mounted":true}`,
		`{"volumeID":"v","targetPath":"/t","mounted":false}`,
		`{"volumeID":"v","targetPath":"/t","nextIssuanceTime":"2026-12-06T10:00:00Z","mounted":false}`,
		`{"volumeID":"v","targetPath":"/t","nextIssuanceTime":"2026-12-06T10:00:00Z"}`,
		`{"volumeID":"v","targetPath":"/t","nextIssuanceTime":"0001-01-01T00:00:00Z"}`,
		`{"volumeID":"v","targetPath":"/t"}`,
		`{"volumeID":"v","targetPath":"/t","mounted":null,"nextIssuanceTime":"2026-12-06T10:00:00Z"}`,
		`{"volumeID":"v","targetPath":"/t","volumeContext":{"a":"b"},"volumeMountGroup":"2000","mounted":true,"other":1}`,
		`{"volumeID":"v","targetPath":"/t","mounted":"yes"}`,
		`{"volumeID":1,"targetPath":"/t","mounted":true}`,
		`{"volumeID":"v","targetPath":"/t","nextIssuanceTime":"tomorrow"}`,
		`{"volumeID":"v","targetPath":"/t","volumeContext":[1]}`,
		`{"volumeID":"v",`,
		`null`,
		``,
	} {
		got, gotErr := decodeOnDisk([]byte(raw))
		want, wantErr := decodeOnDiskTwice([]byte(raw))
		if !reflect.DeepEqual(got, want) {
			t.Errorf("decodeOnDisk(%s) = %+v, want %+v", raw, got, want)
		}
		if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || errors.Is(gotErr, ErrInvalidJSON) != errors.Is(wantErr, ErrInvalidJSON) {
			t.Errorf("decodeOnDisk(%s) error = %v, want %v", raw, gotErr, wantErr)
		}
	}
}
