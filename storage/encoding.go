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
	"fmt"

	"github.com/cert-manager/csi-lib/metadata"
)

// encodeOnDisk is the Filesystem's encoding of metadata: upstream's bytes (json.Marshal with
// Mounted false) followed by an explicit "mounted" key, for example
// {"volumeID":"v1","targetPath":"/t","mounted":false}. The explicit key is what tells this
// fork's files from upstream's: upstream ignores it (so a rollback reads these files), and a
// file without it was written by upstream (see decodeOnDisk).
func encodeOnDisk(meta metadata.Metadata) ([]byte, error) {
	raw, err := upstreamJSON(meta)
	if err != nil {
		return nil, err
	}
	// raw, ours alone, is a JSON object with at least volumeID and targetPath: it ends in '}'.
	return fmt.Appendf(raw[:len(raw)-1], `,"mounted":%t}`, meta.Mounted), nil
}

// upstreamJSON is upstream's encoding of metadata: json.Marshal with Mounted false, so that
// the omitted "mounted" key leaves exactly upstream's bytes.
func upstreamJSON(meta metadata.Metadata) ([]byte, error) {
	meta.Mounted = false
	return json.Marshal(meta)
}

// decodeOnDisk decodes metadata written by encodeOnDisk or by upstream. A file without a
// "mounted" key (or with null) was written by upstream, before an upgrade or after a rollback:
// such a volume is mounted exactly when nextIssuanceTime is present (a zero time counts), which
// was upstream's own rule for resuming a volume. Undecodable bytes wrap ErrInvalidJSON, with the
// error of a decode into metadata.Metadata.
func decodeOnDisk(raw []byte) (metadata.Metadata, error) {
	var file onDiskFile
	if err := json.Unmarshal(raw, &file); err != nil {
		var meta metadata.Metadata
		if metaErr := json.Unmarshal(raw, &meta); metaErr != nil {
			err = metaErr
		}
		return metadata.Metadata{}, fmt.Errorf("%w: %v", ErrInvalidJSON, err)
	}
	meta := file.Metadata
	if file.Mounted != nil {
		meta.Mounted = *file.Mounted
	} else {
		meta.Mounted = meta.NextIssuanceTime != nil
	}
	return meta, nil
}

// onDiskFile is a metadata file's keys for one decode: its Mounted, nearer the top than the
// embedded Metadata's, takes the "mounted" key, and tells a missing key (or null) from false.
type onDiskFile struct {
	metadata.Metadata
	Mounted *bool `json:"mounted"`
}
