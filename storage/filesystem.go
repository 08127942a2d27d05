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
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"

	"github.com/go-logr/logr"
	"k8s.io/mount-utils"

	"github.com/cert-manager/csi-lib/internal/csilibdebug"
	"github.com/cert-manager/csi-lib/internal/keylock"
	"github.com/cert-manager/csi-lib/metadata"
)

const (
	// inMemoryDirName is the directory under the base directory that holds all volumes; it is a
	// tmpfs mount unless FilesystemOptions.PlainDirectory is set.
	inMemoryDirName  = "inmemfs"
	metadataFileName = "metadata.json"
	dataDirName      = "data"
	// pendingKeyFileName holds the private key of the volume's pending request (0600), beside
	// the metadata and outside data/.
	pendingKeyFileName = "pending-key.pem"

	// The volume directory has no x bits (only root, which the driver is,
	// enters it), the data directory is readable by its group (the fsGroup) and nobody else.
	rootDirMode     = 0o700
	volumeDirMode   = 0o644
	dataDirMode     = 0o550
	metadataMode    = 0o600
	generationMode  = 0o755
	projectFileMode = 0o440
	// sweptKeysDirMode: the swept pending keys are as private as the volume directories.
	sweptKeysDirMode = 0o700
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

	// SkipSweep disables the start-up sweep. Default false: sweep once before returning. An
	// operator skips it without a rebuild with CSILIBDEBUG=startupsweep=0 (docs/upgrading.md);
	// true here wins over the variable.
	SkipSweep bool
}

// Filesystem stores volumes in directories under <baseDir>/inmemfs/<volumeID>/, each with a
// metadata.json and a data/ directory that is bind-mounted into the pod. The process must run
// as root: volume directories have mode 0644 and data directories 0550.
//
// Metadata is written atomically:
//  1. write the new content to a temporary file in the volume's directory,
//  2. fsync it,
//  3. rename it over metadata.json,
//  4. fsync the directory.
//
// On disk, metadata carries an explicit "mounted" key; a file without one was written by
// upstream csi-lib and is read by upstream's rule: mounted exactly when nextIssuanceTime is
// present.
//
// Data files are projected atomically as a set (see WriteFiles). Writers of one volume are
// serialised by a per-volume lock; readers take no lock. A volume directory, data directory or
// "..data" link that is not what the store made (a symlink put in its place) is refused, so no
// operation leads outside the base directory. Filesystem is safe for concurrent use, and
// comparable (its mutable state sits behind one pointer).
type Filesystem struct {
	// FSGroupVolumeAttributeKey names a volume attribute whose integer value, when present and
	// not empty, overrides VolumeMountGroup as the group that owns the data directory and files.
	FSGroupVolumeAttributeKey string

	log     logr.Logger
	baseDir string // as given, for PathForVolume
	root    string // absolute <baseDir>/inmemfs, for everything else
	mounter mount.Interface
	state   *filesystemState
}

// filesystemState is the part of a Filesystem that is not comparable.
type filesystemState struct {
	locks        keylock.Locks
	startupSweep SweepResult
	// projectHook is nil except in tests, which set it while no other goroutine uses the store,
	// to interrupt WriteFiles at the points of projectFiles.
	projectHook func(projectPoint)
}

var (
	_ Interface       = &Filesystem{}
	_ MountRecorder   = &Filesystem{}
	_ PendingKeyStore = &Filesystem{}
	_ SweptKeyStore   = &Filesystem{}
)

// NewFilesystem returns a store rooted at <baseDir>/inmemfs, mounting a tmpfs there unless one is
// already mounted, and sweeps it once (see Sweep). baseDir may be absolute or relative.
func NewFilesystem(log logr.Logger, baseDir string) (*Filesystem, error) {
	return NewFilesystemWithOptions(log, baseDir, FilesystemOptions{})
}

// NewFilesystemWithOptions is NewFilesystem with options; see FilesystemOptions. It reads the
// environment variable CSILIBDEBUG for its startupsweep setting, and fails, touching nothing,
// when the variable holds anything it does not know.
func NewFilesystemWithOptions(log logr.Logger, baseDir string, opts FilesystemOptions) (*Filesystem, error) {
	_, operator, err := csilibdebug.FromEnvironment()
	if err != nil {
		return nil, err
	}
	skipSweep, sweepTaken := operator.Off(csilibdebug.StartupSweep, opts.SkipSweep)
	absBase, err := filepath.Abs(baseDir)
	if err != nil {
		return nil, fmt.Errorf("resolving base directory %q: %w", baseDir, err)
	}
	if opts.Mounter == nil {
		opts.Mounter = mount.New("")
	}
	f := &Filesystem{
		log:     log,
		baseDir: baseDir,
		root:    filepath.Join(absBase, inMemoryDirName),
		mounter: opts.Mounter,
		state:   &filesystemState{},
	}
	if err := os.MkdirAll(f.root, rootDirMode); err != nil {
		return nil, fmt.Errorf("creating %s: %w", f.root, err)
	}
	if !opts.PlainDirectory {
		notMounted, err := f.mounter.IsLikelyNotMountPoint(f.root)
		if err != nil {
			return nil, fmt.Errorf("checking whether %s is a mount point: %w", f.root, err)
		}
		if notMounted {
			if err := f.mounter.Mount("tmpfs", f.root, "tmpfs", nil); err != nil {
				return nil, fmt.Errorf("mounting tmpfs at %s (use FilesystemOptions.PlainDirectory where mounting is not allowed): %w", f.root, err)
			}
			log.Info("Mounted tmpfs for volume data", "path", f.root)
		}
	}
	log.Info("Start-up sweep of never-published volumes: 1 on, 0 off as upstream (docs/csilibdebug.md)", csilibdebug.StartupSweep, sweepTaken)
	if !skipSweep {
		f.state.startupSweep = f.Sweep()
	}
	return f, nil
}

// StartupSweep returns what the sweep in NewFilesystem did.
func (f *Filesystem) StartupSweep() SweepResult { return f.state.startupSweep }

func (f *Filesystem) volumeDir(volumeID string) string { return filepath.Join(f.root, volumeID) }

// sweptKeysDir is where the start-up sweep keeps removed volumes' pending keys, one file per
// volume ID (see SweptKeyStore).
func (f *Filesystem) sweptKeysDir() string { return filepath.Join(f.root, sweptKeysName) }

func (f *Filesystem) dataDir(volumeID string) string {
	return filepath.Join(f.root, volumeID, dataDirName)
}

// checkDir returns an error matching ErrNotFound and fs.ErrNotExist when path does not exist,
// and errNotDirectory when it is anything but a real directory (a symlink in particular).
func checkDir(path string) error {
	st, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s: %w (%w)", path, ErrNotFound, fs.ErrNotExist)
	case err != nil:
		return err
	case !st.IsDir():
		return fmt.Errorf("%s: %w", path, errNotDirectory)
	}
	return nil
}

// makeDir makes the directory path, or keeps the real directory already there, and gives it
// exactly mode; anything else at path (a symlink in particular) is refused with checkDir's error.
func makeDir(path string, mode os.FileMode) error {
	if err := os.Mkdir(path, mode); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if err := checkDir(path); err != nil {
		return err
	}
	// Mkdir's mode passes through the umask; set it exactly.
	return os.Chmod(path, mode)
}

// checkVolume checks that the volume directory and its data directory are real directories,
// with checkDir's errors.
func (f *Filesystem) checkVolume(volumeID string) error {
	if err := checkDir(f.volumeDir(volumeID)); err != nil {
		return err
	}
	return checkDir(f.dataDir(volumeID))
}

// PathForVolume returns <baseDir>/inmemfs/<volumeID>/data with baseDir as given to
// NewFilesystem (a relative baseDir gives a relative path). It returns "" for an
// invalid volume ID.
func (f *Filesystem) PathForVolume(volumeID string) string {
	if ValidateVolumeID(volumeID) != nil {
		return ""
	}
	return filepath.Join(f.baseDir, inMemoryDirName, volumeID, dataDirName)
}

// locked runs do with the volume locked once volumeID is known to be valid (ErrInvalidVolumeID
// otherwise).
func (f *Filesystem) locked(volumeID string, do func() error) error {
	if err := ValidateVolumeID(volumeID); err != nil {
		return err
	}
	unlock := f.state.locks.LockNoContext(volumeID)
	defer unlock()
	return do()
}

// RemoveVolume removes the volume's directory. Removing a missing volume succeeds.
func (f *Filesystem) RemoveVolume(volumeID string) error {
	return f.locked(volumeID, func() error {
		// RemoveAll does not follow symlinks: a replaced directory only loses the link.
		return os.RemoveAll(f.volumeDir(volumeID))
	})
}

// ListVolumes returns the IDs of all volume directories in name order, nil when there are none.
// Stray files and names that are not valid volume IDs are skipped. It never modifies anything.
func (f *Filesystem) ListVolumes() ([]string, error) {
	return listIDs(f.root, fs.ModeDir)
}

// ReadMetadata reads and decodes the volume's metadata.json. A missing volume or file gives
// "reading metadata file: not found" (errors.Is ErrNotFound), undecodable content wraps
// ErrInvalidJSON.
func (f *Filesystem) ReadMetadata(volumeID string) (metadata.Metadata, error) {
	if err := ValidateVolumeID(volumeID); err != nil {
		return metadata.Metadata{}, err
	}
	return f.readMetadata(volumeID)
}

func (f *Filesystem) readMetadata(volumeID string) (metadata.Metadata, error) {
	raw, err := readFileIn(f.volumeDir(volumeID), metadataFileName)
	if errors.Is(err, ErrNotFound) {
		err = ErrNotFound // upstream's text: "reading metadata file: not found"
	}
	if err != nil {
		return metadata.Metadata{}, fmt.Errorf("reading metadata file: %w", err)
	}
	meta, err := decodeOnDisk(raw)
	if err != nil {
		return metadata.Metadata{}, fmt.Errorf("reading metadata file of volume %q: %w", volumeID, err)
	}
	return meta, nil
}

// WriteMetadata atomically replaces the metadata of an existing volume, keeping a stored
// Mounted true. A missing volume directory gives an error matching both fs.ErrNotExist and
// ErrNotFound.
func (f *Filesystem) WriteMetadata(volumeID string, meta metadata.Metadata) error {
	return f.writeInVolume(volumeID, "metadata", func() error {
		// Missing or corrupt metadata is replaced (a good write repairs it); stored is then zero.
		stored, err := f.readMetadata(volumeID)
		if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrInvalidJSON) {
			return err
		}
		meta.Mounted = meta.Mounted || stored.Mounted
		return f.writeMetadata(volumeID, meta)
	})
}

// writeInVolume runs write with the volume locked (see locked) once its directory is known to
// be a real one; what names the written thing in that check's error, which matches ErrNotFound
// and fs.ErrNotExist for a missing directory.
func (f *Filesystem) writeInVolume(volumeID, what string, write func() error) error {
	return f.locked(volumeID, func() error {
		if err := checkDir(f.volumeDir(volumeID)); err != nil {
			return fmt.Errorf("writing %s of volume %q: %w", what, volumeID, err)
		}
		return write()
	})
}

// SetMounted records, in one locked read-modify-write, that the volume's publish succeeded.
func (f *Filesystem) SetMounted(volumeID string) error {
	return f.locked(volumeID, func() error {
		stored, err := f.readMetadata(volumeID)
		if err != nil {
			return err
		}
		if stored.Mounted {
			return nil
		}
		stored.Mounted = true
		return f.writeMetadata(volumeID, stored)
	})
}

// RegisterMetadata creates the volume if it does not exist (Mounted false) and reports true.
// For an existing volume with the same volume context it reports false; with a changed one it
// keeps the stored record and replaces only its VolumeContext. Corrupt
// existing metadata is an error (wrapping ErrInvalidJSON) and is left untouched.
func (f *Filesystem) RegisterMetadata(meta metadata.Metadata) (bool, error) {
	if err := ValidateVolumeID(meta.VolumeID); err != nil {
		return false, err
	}
	unlock := f.state.locks.LockNoContext(meta.VolumeID)
	defer unlock()
	stored, err := f.readMetadata(meta.VolumeID)
	isNew := errors.Is(err, ErrNotFound)
	switch {
	case isNew:
		stored = meta
		stored.Mounted = false
	case err != nil:
		return false, err
	case maps.Equal(meta.VolumeContext, stored.VolumeContext):
		return false, nil
	default:
		stored.VolumeContext = meta.VolumeContext
	}
	// Encoded before the volume's directories are made, so that metadata that cannot be
	// encoded changes nothing.
	raw, err := encodeOnDisk(stored)
	if err != nil {
		return false, fmt.Errorf("encoding metadata of volume %q: %w", meta.VolumeID, err)
	}
	if isNew {
		err := makeDir(f.volumeDir(meta.VolumeID), volumeDirMode)
		if err == nil {
			err = makeDir(f.dataDir(meta.VolumeID), dataDirMode)
		}
		if err != nil {
			return false, fmt.Errorf("creating volume %q: %w", meta.VolumeID, err)
		}
	}
	if err := writeFileAtomic(f.volumeDir(meta.VolumeID), metadataFileName, raw, metadataMode); err != nil {
		return false, err
	}
	return true, nil
}

func (f *Filesystem) writeMetadata(volumeID string, meta metadata.Metadata) error {
	raw, err := encodeOnDisk(meta)
	if err != nil {
		return fmt.Errorf("encoding metadata of volume %q: %w", volumeID, err)
	}
	return writeFileAtomic(f.volumeDir(volumeID), metadataFileName, raw, metadataMode)
}

// ValidateMetadata reports whether WriteFiles would reject meta (an invalid fsGroup).
func (f *Filesystem) ValidateMetadata(meta metadata.Metadata) error {
	if err := ValidateVolumeID(meta.VolumeID); err != nil {
		return err
	}
	_, err := fsGroupOf(meta, f.FSGroupVolumeAttributeKey)
	return err
}

// WriteFiles projects files into the volume's data directory atomically as a set, as kubelet's
// atomic writer does: every file goes into a new hidden generation directory, a rename of the
// "..data" symlink swaps the whole set in, each visible name is a symlink through "..data", and
// names no longer in the set and older generations are removed. Names follow kubelet's rules:
// not empty, relative, no ".." element, elements of at most 255 bytes, at most 4096 bytes in
// all, and no first element starting with ".." that is longer than two characters; sub-paths
// such as "certs/tls.crt" work, and names are cleaned ("./a" is "a"). Files are 0440; with an
// fsGroup the data directory and the files belong to that group. Every check happens before anything is written: an error changes nothing. A
// volume without a directory is an error matching ErrNotFound: it was removed, and is not
// recreated behind an unpublish.
func (f *Filesystem) WriteFiles(meta metadata.Metadata, files map[string][]byte) error {
	if err := ValidateVolumeID(meta.VolumeID); err != nil {
		return err
	}
	cleaned := make(map[string][]byte, len(files))
	for name, content := range files {
		clean, err := cleanFilePath(name)
		if err != nil {
			return err
		}
		cleaned[clean] = content
	}
	gid, err := fsGroupOf(meta, f.FSGroupVolumeAttributeKey)
	if err != nil {
		return err
	}
	unlock := f.state.locks.LockNoContext(meta.VolumeID)
	defer unlock()
	if err := f.checkVolume(meta.VolumeID); err != nil {
		return fmt.Errorf("writing files of volume %q: %w", meta.VolumeID, err)
	}
	return projectFiles(f.dataDir(meta.VolumeID), cleaned, gid, f.state.projectHook)
}

// ReadFile reads one data file of a volume through the current projection. name may be a
// sub-path; nothing outside the data directory is ever read ("..", or symlinks leading out, are
// not found). Any failure to open gives a bare ErrNotFound.
func (f *Filesystem) ReadFile(volumeID, name string) ([]byte, error) {
	if ValidateVolumeID(volumeID) != nil || f.checkVolume(volumeID) != nil {
		return nil, ErrNotFound
	}
	root, err := os.OpenRoot(f.dataDir(volumeID))
	if err != nil {
		return nil, ErrNotFound
	}
	defer root.Close()
	file, err := root.Open(name)
	if err != nil {
		return nil, ErrNotFound
	}
	defer file.Close()
	return io.ReadAll(file)
}

// WritePendingKey atomically writes the volume's pending key beside its metadata (mode 0600).
func (f *Filesystem) WritePendingKey(volumeID string, data []byte) error {
	return f.writeInVolume(volumeID, "pending key", func() error {
		return writeFileAtomic(f.volumeDir(volumeID), pendingKeyFileName, data, metadataMode)
	})
}

// ReadPendingKey reads the volume's pending key; ErrNotFound if there is none.
func (f *Filesystem) ReadPendingKey(volumeID string) ([]byte, error) {
	return readKey(volumeID, "pending key", f.volumeDir(volumeID), pendingKeyFileName)
}

// RemovePendingKey removes the volume's pending key; removing none succeeds.
func (f *Filesystem) RemovePendingKey(volumeID string) error {
	return f.removeKey(volumeID, f.volumeDir(volumeID), pendingKeyFileName)
}

// SweptPendingKeys returns the IDs of the volumes whose pending key the start-up sweep kept, in
// name order; nil when there are none.
func (f *Filesystem) SweptPendingKeys() ([]string, error) {
	if err := checkDir(f.sweptKeysDir()); errors.Is(err, ErrNotFound) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	return listIDs(f.sweptKeysDir(), 0)
}

// ReadSweptPendingKey returns the pending key the sweep kept for a removed volume; ErrNotFound
// if there is none.
func (f *Filesystem) ReadSweptPendingKey(volumeID string) ([]byte, error) {
	return readKey(volumeID, "swept pending key", f.sweptKeysDir(), volumeID)
}

// RemoveSweptPendingKey removes the pending key the sweep kept for a removed volume; removing
// none succeeds.
func (f *Filesystem) RemoveSweptPendingKey(volumeID string) error {
	return f.removeKey(volumeID, f.sweptKeysDir(), volumeID)
}

// readKey reads the key file name in dir for the volume volumeID (which names, together with
// what, the key in the error); ErrNotFound if there is none.
func readKey(volumeID, what, dir, name string) ([]byte, error) {
	if err := ValidateVolumeID(volumeID); err != nil {
		return nil, err
	}
	data, err := readFileIn(dir, name)
	if err != nil {
		return nil, fmt.Errorf("reading %s of volume %q: %w", what, volumeID, err)
	}
	return data, nil
}

// removeKey removes the key file name in the real directory dir with the volume locked; a
// missing directory or file is nothing to remove.
func (f *Filesystem) removeKey(volumeID, dir, name string) error {
	return f.locked(volumeID, func() error {
		err := checkDir(dir)
		if err == nil {
			err = os.Remove(filepath.Join(dir, name))
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	})
}

// readFileIn reads the file name in the real directory dir through an os.Root, so that nothing
// resolves outside dir. A missing directory or file is an error matching ErrNotFound.
func readFileIn(dir, name string) ([]byte, error) {
	if err := checkDir(dir); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	data, err := root.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotFound
	}
	return data, err
}

// listIDs lists, in name order, the entries of dir of the given type (fs.ModeDir, or 0 for a
// regular file) whose names are valid volume IDs; nil when there are none. A failure is
// os.ReadDir's error, which names dir.
func listIDs(dir string, kind fs.FileMode) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		if e.Type() == kind && ValidateVolumeID(e.Name()) == nil {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}
