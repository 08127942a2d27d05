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
	"maps"
	"slices"
	"sync"

	"github.com/go-logr/logr"
	"k8s.io/mount-utils"

	"github.com/cert-manager/csi-lib/metadata"
)

// MemoryFS is an in-memory Interface for drivers' tests: each volume is one map of file name to bytes, and "metadata.json" is an ordinary entry of it holding exactly
// json.Marshal of the stored metadata (Mounted false), so drivers' tests that compare those
// bytes keep passing. Errors are the bare sentinels (err == ErrNotFound holds).
//
// Beyond that map: hostile volume IDs are rejected with ErrInvalidVolumeID, and
// Mounted is kept in a separate per-volume flag that never goes back to false (ReadMetadata
// reports it; the bytes never show it). It is safe for concurrent use.
type MemoryFS struct {
	// FSGroupVolumeAttributeKey is accepted for symmetry with Filesystem; MemoryFS checks no
	// fsGroup.
	FSGroupVolumeAttributeKey string

	// Mounter, if set, is used by Sweep to unmount target paths of never-mounted volumes.
	Mounter mount.Interface

	mu      sync.Mutex
	volumes map[string]*memVolume
	// sweptKeys are the pending keys Sweep kept from the volumes it removed, by volume ID.
	sweptKeys map[string][]byte
}

type memVolume struct {
	files   map[string][]byte // "metadata.json" included; never nil
	mounted bool
	// pendingKey is kept beside the files, so ReadFiles stays upstream's map.
	pendingKey []byte
}

var (
	_ Interface       = &MemoryFS{}
	_ MountRecorder   = &MemoryFS{}
	_ PendingKeyStore = &MemoryFS{}
	_ SweptKeyStore   = &MemoryFS{}
)

// locked runs f under the lock once volumeID is known to be valid (ErrInvalidVolumeID
// otherwise).
func (m *MemoryFS) locked(volumeID string, f func() error) error {
	if err := ValidateVolumeID(volumeID); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return f()
}

// volume runs f under the lock on the volume: ErrNotFound for an unknown volume unless create
// is set, in which case the volume is created.
func (m *MemoryFS) volume(volumeID string, create bool, f func(v *memVolume) error) error {
	return m.locked(volumeID, func() error {
		v, ok := m.volumes[volumeID]
		if !ok {
			if !create {
				return ErrNotFound
			}
			v = &memVolume{files: make(map[string][]byte)}
			m.volumes[volumeID] = v
		}
		return f(v)
	})
}

// NewMemoryFS returns an empty in-memory store.
func NewMemoryFS() *MemoryFS {
	return &MemoryFS{volumes: make(map[string]*memVolume), sweptKeys: make(map[string][]byte)}
}

// PathForVolume returns the volume ID itself (fake mounters record it
// as the mount source); "" for an invalid ID.
func (m *MemoryFS) PathForVolume(volumeID string) string {
	if ValidateVolumeID(volumeID) != nil {
		return ""
	}
	return volumeID
}

// RemoveVolume removes the volume. Removing a missing volume succeeds.
func (m *MemoryFS) RemoveVolume(volumeID string) error {
	return m.locked(volumeID, func() error {
		delete(m.volumes, volumeID)
		return nil
	})
}

// ListVolumes returns the IDs of all volumes in map order, nil when there are none.
func (m *MemoryFS) ListVolumes() ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Collect(maps.Keys(m.volumes)), nil
}

// ReadMetadata decodes the volume's "metadata.json" entry: ErrNotFound when the volume or the
// entry is missing, ErrInvalidJSON when it does not decode. Mounted comes from the volume's flag.
func (m *MemoryFS) ReadMetadata(volumeID string) (metadata.Metadata, error) {
	var meta metadata.Metadata
	err := m.volume(volumeID, false, func(v *memVolume) error {
		raw, ok := v.files[metadataFileName]
		if !ok {
			return ErrNotFound
		}
		if err := json.Unmarshal(raw, &meta); err != nil {
			return ErrInvalidJSON
		}
		meta.Mounted = v.mounted
		return nil
	})
	if err != nil {
		return metadata.Metadata{}, err
	}
	return meta, nil
}

// WriteMetadata replaces the metadata of an existing volume (ErrNotFound otherwise). The stored
// bytes are upstream's; a Mounted true sets the volume's flag, a false never clears it.
func (m *MemoryFS) WriteMetadata(volumeID string, meta metadata.Metadata) error {
	return m.volume(volumeID, false, func(v *memVolume) error { return v.setMetadata(meta) })
}

// SetMounted records that the volume's publish succeeded.
func (m *MemoryFS) SetMounted(volumeID string) error {
	return m.volume(volumeID, false, func(v *memVolume) error {
		v.mounted = true
		return nil
	})
}

// RegisterMetadata creates the volume if missing and reports true. For an existing volume whose
// volume context is the same (nil equals empty) it reports false; an undecodable entry gives
// the JSON decoder's error. Otherwise the whole record is replaced by meta, keeping only the
// Mounted flag.
func (m *MemoryFS) RegisterMetadata(meta metadata.Metadata) (bool, error) {
	// Encoded first, so that metadata that cannot be encoded changes nothing.
	raw, err := upstreamJSON(meta)
	if err != nil {
		return false, err
	}
	wrote := false
	err = m.volume(meta.VolumeID, true, func(v *memVolume) error {
		if storedRaw, ok := v.files[metadataFileName]; ok {
			var stored metadata.Metadata
			if err := json.Unmarshal(storedRaw, &stored); err != nil {
				return err
			}
			if maps.Equal(meta.VolumeContext, stored.VolumeContext) {
				return nil
			}
		}
		wrote = true
		v.files[metadataFileName] = raw // the Mounted flag is kept; a registration never sets it
		return nil
	})
	return wrote, err
}

// setMetadata stores upstream's bytes of meta and sets the Mounted flag if meta.Mounted is true.
func (v *memVolume) setMetadata(meta metadata.Metadata) error {
	raw, err := upstreamJSON(meta)
	if err != nil {
		return err
	}
	v.files[metadataFileName] = raw
	v.mounted = v.mounted || meta.Mounted
	return nil
}

// SetRawMetadata stores raw bytes as a volume's "metadata.json", creating the volume if needed.
// Tests use it to load metadata in older formats, or corrupt metadata. The Mounted flag is set
// as the Filesystem would read those bytes from disk: an explicit "mounted" key wins, and
// without one a volume is mounted exactly when nextIssuanceTime is present.
func (m *MemoryFS) SetRawMetadata(volumeID string, raw []byte) error {
	return m.volume(volumeID, true, func(v *memVolume) error {
		v.files[metadataFileName] = append([]byte(nil), raw...)
		if meta, err := decodeOnDisk(raw); err == nil {
			v.mounted = meta.Mounted
		}
		return nil
	})
}

// ValidateMetadata accepts every metadata with a valid volume ID: MemoryFS checks nothing else.
func (m *MemoryFS) ValidateMetadata(meta metadata.Metadata) error {
	return ValidateVolumeID(meta.VolumeID)
}

// WriteFiles copies files into the volume's map (ErrNotFound for an unknown volume). It merges:
// names not in files stay, and a file named "metadata.json" replaces the metadata bytes. Any
// name is accepted and no fsGroup is checked.
func (m *MemoryFS) WriteFiles(meta metadata.Metadata, files map[string][]byte) error {
	return m.volume(meta.VolumeID, false, func(v *memVolume) error {
		for name, content := range files {
			v.files[name] = append([]byte(nil), content...)
		}
		return nil
	})
}

// ReadFiles returns a copy of the volume's map: every data file and "metadata.json".
func (m *MemoryFS) ReadFiles(volumeID string) (map[string][]byte, error) {
	var out map[string][]byte
	err := m.volume(volumeID, false, func(v *memVolume) error {
		out = make(map[string][]byte, len(v.files))
		for name, content := range v.files {
			out[name] = append([]byte(nil), content...)
		}
		return nil
	})
	return out, err
}

// ReadFile returns what ReadFiles would hold for name ("metadata.json" included); ErrNotFound
// for an unknown volume or name.
func (m *MemoryFS) ReadFile(volumeID, name string) ([]byte, error) {
	var out []byte
	err := m.volume(volumeID, false, func(v *memVolume) (err error) {
		out, err = lookup(v.files, name)
		return err
	})
	return out, err
}

// lookup returns a copy of files[name]; ErrNotFound when there is no such entry.
func lookup(files map[string][]byte, name string) ([]byte, error) {
	b, ok := files[name]
	if !ok {
		return nil, ErrNotFound
	}
	return append([]byte(nil), b...), nil
}

// Sweep applies the start-up sweep to the in-memory volumes (see Filesystem.Sweep), using
// Mounter if set. A test calls it to simulate a driver restart on a shared store.
func (m *MemoryFS) Sweep(log logr.Logger) SweepResult {
	return sweep(log, m, m.Mounter, nil)
}

// keepPendingKey sets a volume's pending key aside among the swept keys; see sweepStore.
func (m *MemoryFS) keepPendingKey(volumeID string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.volumes[volumeID]
	if !ok || v.pendingKey == nil {
		return false, nil
	}
	m.sweptKeys[volumeID] = v.pendingKey
	v.pendingKey = nil
	return true, nil
}

// SweptPendingKeys returns the IDs of the volumes whose pending key Sweep kept, in map order;
// nil when there are none.
func (m *MemoryFS) SweptPendingKeys() ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Collect(maps.Keys(m.sweptKeys)), nil
}

// ReadSweptPendingKey returns the pending key Sweep kept for a removed volume; ErrNotFound if
// there is none.
func (m *MemoryFS) ReadSweptPendingKey(volumeID string) ([]byte, error) {
	var out []byte
	err := m.locked(volumeID, func() (err error) {
		out, err = lookup(m.sweptKeys, volumeID)
		return err
	})
	return out, err
}

// RemoveSweptPendingKey removes the pending key Sweep kept for a removed volume; removing none
// succeeds.
func (m *MemoryFS) RemoveSweptPendingKey(volumeID string) error {
	return m.locked(volumeID, func() error {
		delete(m.sweptKeys, volumeID)
		return nil
	})
}

// WritePendingKey replaces the volume's pending key (kept beside its files, not among them).
func (m *MemoryFS) WritePendingKey(volumeID string, data []byte) error {
	return m.volume(volumeID, false, func(v *memVolume) error {
		v.pendingKey = append([]byte(nil), data...)
		return nil
	})
}

// ReadPendingKey returns the volume's pending key; ErrNotFound if there is none.
func (m *MemoryFS) ReadPendingKey(volumeID string) ([]byte, error) {
	var out []byte
	err := m.volume(volumeID, false, func(v *memVolume) error {
		if v.pendingKey == nil {
			return ErrNotFound
		}
		out = append([]byte(nil), v.pendingKey...)
		return nil
	})
	return out, err
}

// RemovePendingKey removes the volume's pending key; removing none succeeds.
func (m *MemoryFS) RemovePendingKey(volumeID string) error {
	return m.locked(volumeID, func() error {
		if v, ok := m.volumes[volumeID]; ok {
			v.pendingKey = nil
		}
		return nil
	})
}
