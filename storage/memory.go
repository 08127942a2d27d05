package storage

import (
	"encoding/json"
	"fmt"
	"sync"

	"github.com/go-logr/logr"
	"k8s.io/mount-utils"

	"github.com/cert-manager/csi-lib/metadata"
)

// MemoryFS is an in-memory Interface for tests. It follows the same rules as Filesystem:
// volume-ID validation, the legacy "mounted" decoding (metadata is kept as JSON and decoded on
// every read), monotonic Mounted, atomic metadata and data writes. It is safe for concurrent use.
type MemoryFS struct {
	// FSGroupVolumeAttributeKey is as in Filesystem: it only affects fsGroup validation here.
	FSGroupVolumeAttributeKey string

	// Mounter, if set, is used by Sweep to unmount target paths of never-mounted volumes.
	Mounter mount.Interface

	mu      sync.RWMutex
	volumes map[string]*memVolume
}

type memVolume struct {
	meta  []byte // JSON, decoded through metadata.Metadata's decoder on every read
	files map[string][]byte
}

var _ Interface = &MemoryFS{}

// NewMemoryFS returns an empty in-memory store.
func NewMemoryFS() *MemoryFS {
	return &MemoryFS{volumes: make(map[string]*memVolume)}
}

// PathForVolume returns a fake path for the volume's data; nothing exists there.
func (m *MemoryFS) PathForVolume(volumeID string) string {
	if ValidateVolumeID(volumeID) != nil {
		return ""
	}
	return "/memoryfs/" + volumeID + "/data"
}

// RemoveVolume removes the volume. Removing a missing volume succeeds.
func (m *MemoryFS) RemoveVolume(volumeID string) error {
	if err := ValidateVolumeID(volumeID); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.volumes, volumeID)
	return nil
}

// ListVolumes returns the IDs of all volumes.
func (m *MemoryFS) ListVolumes() ([]string, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	ids := make([]string, 0, len(m.volumes))
	for id := range m.volumes {
		ids = append(ids, id)
	}
	return ids, nil
}

// ReadMetadata decodes the volume's stored metadata.
func (m *MemoryFS) ReadMetadata(volumeID string) (metadata.Metadata, error) {
	if err := ValidateVolumeID(volumeID); err != nil {
		return metadata.Metadata{}, err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.readLocked(volumeID)
}

func (m *MemoryFS) readLocked(volumeID string) (metadata.Metadata, error) {
	v, ok := m.volumes[volumeID]
	if !ok || v.meta == nil {
		return metadata.Metadata{}, fmt.Errorf("volume %q: %w", volumeID, ErrNotFound)
	}
	return decodeMetadata(volumeID, v.meta)
}

// WriteMetadata replaces the metadata of an existing volume, keeping a stored Mounted true.
func (m *MemoryFS) WriteMetadata(volumeID string, meta metadata.Metadata) error {
	if err := ValidateVolumeID(volumeID); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.volumes[volumeID]
	if !ok {
		return fmt.Errorf("volume %q: %w", volumeID, ErrNotFound)
	}
	if stored, err := m.readLocked(volumeID); err == nil {
		meta = keepMonotonic(meta, stored)
	}
	return v.setMeta(meta)
}

// RegisterMetadata creates the volume if missing, or rewrites its metadata when the volume
// context changed, keeping NextIssuanceTime and Mounted. Corrupt metadata is an error.
func (m *MemoryFS) RegisterMetadata(meta metadata.Metadata) (bool, error) {
	if err := ValidateVolumeID(meta.VolumeID); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.volumes[meta.VolumeID]
	if !ok {
		v = &memVolume{}
		meta.Mounted = false
		if err := v.setMeta(meta); err != nil {
			return false, err
		}
		m.volumes[meta.VolumeID] = v
		return true, nil
	}
	stored, err := m.readLocked(meta.VolumeID)
	if err != nil {
		return false, err
	}
	merged, changed := registerMerge(meta, stored)
	if !changed {
		return false, nil
	}
	return true, v.setMeta(merged)
}

func (v *memVolume) setMeta(meta metadata.Metadata) error {
	raw, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	v.meta = raw
	return nil
}

// SetRawMetadata stores raw bytes as a volume's metadata, creating the volume if needed. Tests
// use it to load metadata in older formats, or corrupt metadata.
func (m *MemoryFS) SetRawMetadata(volumeID string, raw []byte) error {
	if err := ValidateVolumeID(volumeID); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.volumes[volumeID]
	if !ok {
		v = &memVolume{}
		m.volumes[volumeID] = v
	}
	v.meta = append([]byte(nil), raw...)
	return nil
}

// ValidateMetadata reports whether WriteFiles would reject meta (an invalid fsGroup).
func (m *MemoryFS) ValidateMetadata(meta metadata.Metadata) error {
	if err := ValidateVolumeID(meta.VolumeID); err != nil {
		return err
	}
	_, err := fsGroupOf(meta, m.FSGroupVolumeAttributeKey)
	return err
}

// WriteFiles replaces the volume's files with a copy of files.
func (m *MemoryFS) WriteFiles(meta metadata.Metadata, files map[string][]byte) error {
	if err := m.ValidateMetadata(meta); err != nil {
		return err
	}
	copied := make(map[string][]byte, len(files))
	for name, content := range files {
		if err := validateFileName(name); err != nil {
			return err
		}
		copied[name] = append([]byte(nil), content...)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.volumes[meta.VolumeID]
	if !ok {
		return fmt.Errorf("volume %q: %w", meta.VolumeID, ErrNotFound)
	}
	v.files = copied
	return nil
}

// ReadFiles returns a copy of the volume's files.
func (m *MemoryFS) ReadFiles(volumeID string) (map[string][]byte, error) {
	if err := ValidateVolumeID(volumeID); err != nil {
		return nil, err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	v, ok := m.volumes[volumeID]
	if !ok {
		return nil, fmt.Errorf("volume %q: %w", volumeID, ErrNotFound)
	}
	out := make(map[string][]byte, len(v.files))
	for name, content := range v.files {
		out[name] = append([]byte(nil), content...)
	}
	return out, nil
}

// ReadFile returns a copy of one of the volume's files.
func (m *MemoryFS) ReadFile(volumeID, name string) ([]byte, error) {
	files, err := m.ReadFiles(volumeID)
	if err != nil {
		return nil, err
	}
	if err := validateFileName(name); err != nil {
		return nil, err
	}
	b, ok := files[name]
	if !ok {
		return nil, fmt.Errorf("file %q of volume %q: %w", name, volumeID, ErrNotFound)
	}
	return b, nil
}

// Sweep applies the start-up sweep to the in-memory volumes (see Filesystem.Sweep), using
// Mounter if set. A test calls it to simulate a driver restart on a shared store.
func (m *MemoryFS) Sweep(log logr.Logger) SweepResult {
	return sweep(log, m, m.Mounter, func(id string) bool {
		m.mu.RLock()
		defer m.mu.RUnlock()
		_, ok := m.volumes[id]
		return ok
	})
}
