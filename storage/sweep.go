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
	"os"
	"path/filepath"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/mount-utils"

	"github.com/cert-manager/csi-lib/metadata"
)

// SweepResult says what a start-up sweep did. Each list holds volume IDs.
type SweepResult struct {
	// RemovedWithoutMetadata are volume directories that had no metadata (a crash during
	// registration); they were removed.
	RemovedWithoutMetadata []string
	// RemovedNeverMounted are volumes whose metadata says Mounted false: their publish never
	// succeeded, so nobody will unpublish them. They were removed.
	RemovedNeverMounted []string
	// UnmountedTargets are the target paths of never-mounted volumes that were still mount
	// points (a crash between mount and persisting Mounted) and were unmounted.
	UnmountedTargets []string
	// Unreadable are volumes whose metadata could not be read or decoded; they were left alone.
	Unreadable []string
	// Failed are volumes that should have been removed but could not be; they were left alone.
	Failed []string
	// KeptPendingKeys are removed never-mounted volumes whose pending key was kept for a
	// publish of the same volume ID to resume (see SweptKeyStore).
	KeptPendingKeys []string
	// Kept is the number of mounted volumes left in place.
	Kept int
	// RemovedLeftovers are files a crash left inside kept volumes, as "<volume ID>/<path>":
	// temporary files of interrupted metadata or key writes, and data generations or temporary
	// links that no "..data" points to.
	RemovedLeftovers []string
}

// Sweep removes what a crash or a missed NodeUnpublishVolume left behind; see the package
// documentation. It never fails as a whole: problems with one volume are logged and recorded in
// the result. Call it only before the driver serves, never concurrently with publishes.
func (f *Filesystem) Sweep() SweepResult {
	return sweep(f.log, f, f.mounter, f.removeCrashLeftovers)
}

// keepPendingKey moves a volume's pending key, if it has one, out of the volume's directory
// into the directory of swept keys (see SweptKeyStore). It reports whether there was one.
func (f *Filesystem) keepPendingKey(id string) (bool, error) {
	unlock := f.state.locks.LockNoContext(id)
	defer unlock()
	src := filepath.Join(f.volumeDir(id), pendingKeyFileName)
	if _, err := os.Lstat(src); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err := makeDir(f.sweptKeysDir(), sweptKeysDirMode); err != nil {
		return false, err
	}
	if err := os.Rename(src, filepath.Join(f.sweptKeysDir(), id)); err != nil {
		return false, err
	}
	return true, syncDir(f.sweptKeysDir())
}

// removeCrashLeftovers removes what a crash left inside a kept volume: temporary files of
// interrupted atomic writes in the volume directory, and generations and temporary links in
// data/ that "..data" does not point to. It returns what it removed, as "<id>/<path>".
func (f *Filesystem) removeCrashLeftovers(id string) ([]string, error) {
	unlock := f.state.locks.LockNoContext(id)
	defer unlock()
	if err := f.checkVolume(id); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(f.volumeDir(id))
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, e := range entries {
		// The temporary file of an interrupted writeFileAtomic: "."+name+".tmp-*".
		if strings.HasPrefix(e.Name(), ".") && strings.Contains(e.Name(), ".tmp-") {
			if err := os.Remove(filepath.Join(f.volumeDir(id), e.Name())); err != nil {
				return removed, err
			}
			removed = append(removed, id+"/"+e.Name())
		}
	}
	// A "..data" that is missing or names no entry of data/ (a link leading out) keeps nothing.
	current, _ := os.Readlink(filepath.Join(f.dataDir(id), dataLinkName))
	stale, err := removeStale(f.dataDir(id), current, nil)
	for _, name := range stale {
		removed = append(removed, id+"/"+dataDirName+"/"+name)
	}
	return removed, err
}

// sweepStore is what sweep needs of a store.
type sweepStore interface {
	MetadataReader
	RemoveVolume(volumeID string) error
	// keepPendingKey sets a never-mounted volume's pending key aside before the volume is
	// removed (see SweptKeyStore); it reports whether the volume had one.
	keepPendingKey(volumeID string) (bool, error)
}

// sweep removes never-mounted volumes (keeping their pending keys aside) and volumes without
// metadata from store; for every kept volume it calls tidy (nil: nothing to tidy) to remove
// what a crash left inside it. A listed volume whose metadata is not found has no metadata:
// ListVolumes lists only existing volumes, and nothing else runs during a sweep.
func sweep(log logr.Logger, store sweepStore, mounter mount.Interface, tidy func(id string) ([]string, error)) SweepResult {
	var res SweepResult
	log = log.WithName("sweep")
	ids, err := store.ListVolumes()
	if err != nil {
		log.Error(err, "Cannot list volumes; nothing swept")
		return res
	}
	for _, id := range ids {
		meta, err := store.ReadMetadata(id)
		switch {
		case errors.Is(err, ErrNotFound):
			if err := store.RemoveVolume(id); err != nil {
				log.Error(err, "Cannot remove volume without metadata", "volume_id", id)
				res.Failed = append(res.Failed, id)
				continue
			}
			log.Info("Removed volume directory without metadata", "volume_id", id)
			res.RemovedWithoutMetadata = append(res.RemovedWithoutMetadata, id)
		case err != nil:
			log.Error(err, "Cannot read volume metadata; leaving the volume alone", "volume_id", id)
			res.Unreadable = append(res.Unreadable, id)
		case meta.Mounted:
			res.Kept++
			if tidy == nil {
				continue
			}
			removed, err := tidy(id)
			if len(removed) > 0 {
				log.Info("Removed what a crash left in a kept volume", "volume_id", id, "removed", removed)
				res.RemovedLeftovers = append(res.RemovedLeftovers, removed...)
			}
			if err != nil {
				log.Error(err, "Cannot tidy a kept volume", "volume_id", id)
			}
		default:
			unmounted, err := unmountIfMountPoint(mounter, meta.TargetPath)
			if err != nil {
				log.Error(err, "Cannot unmount target path of never-published volume; leaving it alone", "volume_id", id, "target_path", meta.TargetPath)
				res.Failed = append(res.Failed, id)
				continue
			}
			if unmounted {
				res.UnmountedTargets = append(res.UnmountedTargets, meta.TargetPath)
			}
			// Losing the key only costs kubelet's retry a new request: go on without it.
			if kept, err := store.keepPendingKey(id); err != nil {
				log.Error(err, "Cannot keep the pending key of a never-published volume; a publish retry will create a new request", "volume_id", id)
			} else if kept {
				res.KeptPendingKeys = append(res.KeptPendingKeys, id)
			}
			if err := store.RemoveVolume(id); err != nil {
				log.Error(err, "Cannot remove never-published volume", "volume_id", id)
				res.Failed = append(res.Failed, id)
				continue
			}
			log.Info("Removed volume whose publish never succeeded", "volume_id", id, "pod", meta.VolumeContext[metadata.PodNameVolumeContextKey], "unmounted_target", unmounted)
			res.RemovedNeverMounted = append(res.RemovedNeverMounted, id)
		}
	}
	log.Info("Start-up sweep done", "kept", res.Kept, "kept_pending_keys", len(res.KeptPendingKeys), "removed_leftovers", len(res.RemovedLeftovers), "removed_without_metadata", len(res.RemovedWithoutMetadata),
		"removed_never_mounted", len(res.RemovedNeverMounted), "unreadable", len(res.Unreadable), "failed", len(res.Failed))
	return res
}

// unmountIfMountPoint unmounts path if it is a mount point; a missing path or an empty one is
// nothing to do.
func unmountIfMountPoint(mounter mount.Interface, path string) (bool, error) {
	if path == "" || mounter == nil {
		return false, nil
	}
	notMnt, err := mounter.IsLikelyNotMountPoint(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if notMnt {
		return false, nil
	}
	return true, mounter.Unmount(path)
}
