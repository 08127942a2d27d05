package storage

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/go-logr/logr"
	"k8s.io/mount-utils"

	"github.com/cert-manager/csi-lib/internal/keylock"
	"github.com/cert-manager/csi-lib/metadata"
)

const (
	// inMemoryDirName is the directory under the base directory that holds all volumes; it is a
	// tmpfs mount unless FilesystemOptions.PlainDirectory is set.
	inMemoryDirName  = "inmemfs"
	metadataFileName = "metadata.json"
	dataDirName      = "data"
)

// FilesystemOptions configures NewFilesystemWithOptions. The zero value gives NewFilesystem's
// behaviour.
type FilesystemOptions struct {
	// PlainDirectory keeps volumes in a plain directory at <baseDir>/inmemfs instead of mounting
	// a tmpfs there. Keys then reach whatever disk backs baseDir, so use it only where the
	// process may not mount (unit tests, the demo, CI). Default false: mount a tmpfs.
	PlainDirectory bool

	// Mounter mounts the tmpfs and unmounts leftover target paths during the start-up sweep.
	// Default: the operating system's mounter, mount.New("").
	Mounter mount.Interface

	// SkipSweep disables the start-up sweep. Default false: sweep once before returning.
	SkipSweep bool
}

// Filesystem stores volumes in directories under <baseDir>/inmemfs/<volumeID>/, each with a
// metadata.json and a data/ directory that is bind-mounted into the pod.
//
// Metadata is written atomically:
//  1. write the new content to a temporary file in the volume's directory,
//  2. fsync it,
//  3. rename it over metadata.json,
//  4. fsync the directory.
//
// Data files are projected atomically as a set (see WriteFiles). Writers of one volume are
// serialised by a per-volume lock; readers take no lock. Filesystem is safe for concurrent use.
type Filesystem struct {
	// FSGroupVolumeAttributeKey names a volume attribute whose integer value, when present,
	// overrides VolumeMountGroup as the group that owns the data directory and files.
	FSGroupVolumeAttributeKey string

	log     logr.Logger
	root    string // absolute <baseDir>/inmemfs
	mounter mount.Interface
	locks   keylock.Locks

	startupSweep SweepResult
}

var _ Interface = &Filesystem{}

// NewFilesystem returns a store rooted at <baseDir>/inmemfs, mounting a tmpfs there unless one is
// already mounted, and sweeps it once (see Sweep). baseDir may be absolute or relative.
func NewFilesystem(log logr.Logger, baseDir string) (*Filesystem, error) {
	return NewFilesystemWithOptions(log, baseDir, FilesystemOptions{})
}

// NewFilesystemWithOptions is NewFilesystem with options; see FilesystemOptions.
func NewFilesystemWithOptions(log logr.Logger, baseDir string, opts FilesystemOptions) (*Filesystem, error) {
	absBase, err := filepath.Abs(baseDir)
	if err != nil {
		return nil, fmt.Errorf("resolving base directory %q: %w", baseDir, err)
	}
	if opts.Mounter == nil {
		opts.Mounter = mount.New("")
	}
	f := &Filesystem{
		log:     log,
		root:    filepath.Join(absBase, inMemoryDirName),
		mounter: opts.Mounter,
	}
	if err := os.MkdirAll(f.root, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", f.root, err)
	}
	if !opts.PlainDirectory {
		if err := f.ensureTmpfs(); err != nil {
			return nil, err
		}
	}
	if !opts.SkipSweep {
		f.startupSweep = f.Sweep()
	}
	return f, nil
}

func (f *Filesystem) ensureTmpfs() error {
	notMounted, err := f.mounter.IsLikelyNotMountPoint(f.root)
	if err != nil {
		return fmt.Errorf("checking whether %s is a mount point: %w", f.root, err)
	}
	if !notMounted {
		return nil
	}
	if err := f.mounter.Mount("tmpfs", f.root, "tmpfs", nil); err != nil {
		return fmt.Errorf("mounting tmpfs at %s (use FilesystemOptions.PlainDirectory where mounting is not allowed): %w", f.root, err)
	}
	f.log.Info("Mounted tmpfs for volume data", "path", f.root)
	return nil
}

// StartupSweep returns what the sweep in NewFilesystem did.
func (f *Filesystem) StartupSweep() SweepResult { return f.startupSweep }

func (f *Filesystem) volumeDir(volumeID string) string { return filepath.Join(f.root, volumeID) }

func (f *Filesystem) metadataPath(volumeID string) string {
	return filepath.Join(f.root, volumeID, metadataFileName)
}

// PathForVolume returns <baseDir>/inmemfs/<volumeID>/data, the directory bind-mounted into the
// pod. It returns "" for an invalid volume ID.
func (f *Filesystem) PathForVolume(volumeID string) string {
	if ValidateVolumeID(volumeID) != nil {
		return ""
	}
	return filepath.Join(f.root, volumeID, dataDirName)
}

// RemoveVolume removes the volume's directory. Removing a missing volume succeeds.
func (f *Filesystem) RemoveVolume(volumeID string) error {
	if err := ValidateVolumeID(volumeID); err != nil {
		return err
	}
	unlock := f.locks.LockNoContext(volumeID)
	defer unlock()
	return os.RemoveAll(f.volumeDir(volumeID))
}

// ListVolumes returns the IDs of all volume directories. It never modifies anything.
func (f *Filesystem) ListVolumes() ([]string, error) {
	entries, err := os.ReadDir(f.root)
	if err != nil {
		return nil, fmt.Errorf("listing volumes: %w", err)
	}
	ids := make([]string, 0, len(entries))
	for _, e := range entries {
		if e.IsDir() && ValidateVolumeID(e.Name()) == nil {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// ReadMetadata reads and decodes the volume's metadata.json.
func (f *Filesystem) ReadMetadata(volumeID string) (metadata.Metadata, error) {
	if err := ValidateVolumeID(volumeID); err != nil {
		return metadata.Metadata{}, err
	}
	return f.readMetadata(volumeID)
}

func (f *Filesystem) readMetadata(volumeID string) (metadata.Metadata, error) {
	raw, err := os.ReadFile(f.metadataPath(volumeID))
	if errors.Is(err, fs.ErrNotExist) {
		return metadata.Metadata{}, fmt.Errorf("volume %q: %w", volumeID, ErrNotFound)
	}
	if err != nil {
		return metadata.Metadata{}, fmt.Errorf("reading metadata of volume %q: %w", volumeID, err)
	}
	return decodeMetadata(volumeID, raw)
}

func decodeMetadata(volumeID string, raw []byte) (metadata.Metadata, error) {
	var meta metadata.Metadata
	if err := json.Unmarshal(raw, &meta); err != nil {
		return metadata.Metadata{}, fmt.Errorf("metadata of volume %q: %w: %v", volumeID, ErrInvalidJSON, err)
	}
	return meta, nil
}

// WriteMetadata atomically replaces the metadata of an existing volume, keeping a stored
// Mounted true.
func (f *Filesystem) WriteMetadata(volumeID string, meta metadata.Metadata) error {
	if err := ValidateVolumeID(volumeID); err != nil {
		return err
	}
	unlock := f.locks.LockNoContext(volumeID)
	defer unlock()
	stored, err := f.readMetadata(volumeID)
	switch {
	case errors.Is(err, ErrNotFound):
		// A volume directory without metadata is still a volume (half-registered); one with no
		// directory is not.
		if _, statErr := os.Stat(f.volumeDir(volumeID)); statErr != nil {
			return fmt.Errorf("volume %q: %w", volumeID, ErrNotFound)
		}
	case errors.Is(err, ErrInvalidJSON):
		// Overwriting a corrupt file with good metadata repairs it.
	case err != nil:
		return err
	default:
		meta = keepMonotonic(meta, stored)
	}
	return f.writeMetadata(volumeID, meta)
}

// RegisterMetadata creates the volume if it does not exist, or rewrites its metadata when the
// volume context changed. Corrupt existing metadata is an error and is left untouched.
func (f *Filesystem) RegisterMetadata(meta metadata.Metadata) (bool, error) {
	if err := ValidateVolumeID(meta.VolumeID); err != nil {
		return false, err
	}
	unlock := f.locks.LockNoContext(meta.VolumeID)
	defer unlock()
	stored, err := f.readMetadata(meta.VolumeID)
	switch {
	case errors.Is(err, ErrNotFound):
		if err := os.MkdirAll(filepath.Join(f.volumeDir(meta.VolumeID), dataDirName), 0o755); err != nil {
			return false, fmt.Errorf("creating volume %q: %w", meta.VolumeID, err)
		}
		meta.Mounted = false
		if err := f.writeMetadata(meta.VolumeID, meta); err != nil {
			return false, err
		}
		return true, nil
	case err != nil:
		return false, err
	}
	merged, changed := registerMerge(meta, stored)
	if !changed {
		return false, nil
	}
	if err := f.writeMetadata(meta.VolumeID, merged); err != nil {
		return false, err
	}
	return true, nil
}

func (f *Filesystem) writeMetadata(volumeID string, meta metadata.Metadata) error {
	raw, err := json.Marshal(meta)
	if err != nil {
		return fmt.Errorf("encoding metadata of volume %q: %w", volumeID, err)
	}
	return writeFileAtomic(f.volumeDir(volumeID), metadataFileName, raw, 0o600)
}

// ValidateMetadata reports whether WriteFiles would reject meta (an invalid fsGroup).
func (f *Filesystem) ValidateMetadata(meta metadata.Metadata) error {
	if err := ValidateVolumeID(meta.VolumeID); err != nil {
		return err
	}
	_, err := fsGroupOf(meta, f.FSGroupVolumeAttributeKey)
	return err
}

// WriteFiles projects files into the volume's data directory atomically as a set; see
// projectFiles for the steps. Files are 0440; with an fsGroup the directory and files belong to
// that group.
func (f *Filesystem) WriteFiles(meta metadata.Metadata, files map[string][]byte) error {
	if err := ValidateVolumeID(meta.VolumeID); err != nil {
		return err
	}
	for name := range files {
		if err := validateFileName(name); err != nil {
			return err
		}
	}
	gid, err := fsGroupOf(meta, f.FSGroupVolumeAttributeKey)
	if err != nil {
		return err
	}
	unlock := f.locks.LockNoContext(meta.VolumeID)
	defer unlock()
	if _, err := os.Stat(f.volumeDir(meta.VolumeID)); err != nil {
		return fmt.Errorf("volume %q: %w", meta.VolumeID, ErrNotFound)
	}
	return projectFiles(filepath.Join(f.volumeDir(meta.VolumeID), dataDirName), files, gid)
}

// ReadFile reads one data file of a volume, through the current projection.
func (f *Filesystem) ReadFile(volumeID, name string) ([]byte, error) {
	if err := ValidateVolumeID(volumeID); err != nil {
		return nil, err
	}
	if err := validateFileName(name); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(f.volumeDir(volumeID), dataDirName, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("file %q of volume %q: %w", name, volumeID, ErrNotFound)
	}
	return b, err
}
