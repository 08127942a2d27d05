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
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"k8s.io/mount-utils"

	"github.com/cert-manager/csi-lib/metadata"
)

// storeUnderTest adapts one implementation of Interface to the conformance suite.
type storeUnderTest struct {
	store Interface
	// setRaw stores raw bytes as a volume's metadata (creating the volume).
	setRaw func(t *testing.T, id string, raw []byte)
	// bareVolume creates a volume that has no metadata at all.
	bareVolume func(t *testing.T, id string)
	sweep      func() SweepResult
	mounter    *mount.FakeMounter
	// keepsRecordOnRegister: RegisterMetadata with a changed context keeps the stored record
	// and replaces only the context (Filesystem); otherwise it replaces the whole record
	// (MemoryFS), as upstream's stores do.
	keepsRecordOnRegister bool
}

func newFilesystemUnderTest(t *testing.T) storeUnderTest {
	base := t.TempDir()
	mounter := mount.NewFakeMounter(nil)
	fs, err := NewFilesystemWithOptions(testr.New(t), base, FilesystemOptions{PlainDirectory: true, Mounter: mounter})
	if err != nil {
		t.Fatal(err)
	}
	return storeUnderTest{
		store: fs,
		setRaw: func(t *testing.T, id string, raw []byte) {
			if err := os.MkdirAll(filepath.Join(fs.root, id, dataDirName), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(fs.root, id, metadataFileName), raw, 0o600); err != nil {
				t.Fatal(err)
			}
		},
		bareVolume: func(t *testing.T, id string) {
			if err := os.MkdirAll(filepath.Join(fs.root, id, dataDirName), 0o755); err != nil {
				t.Fatal(err)
			}
		},
		sweep:                 fs.Sweep,
		mounter:               mounter,
		keepsRecordOnRegister: true,
	}
}

func newMemoryUnderTest(t *testing.T) storeUnderTest {
	m := NewMemoryFS()
	mounter := mount.NewFakeMounter(nil)
	m.Mounter = mounter
	return storeUnderTest{
		store: m,
		setRaw: func(t *testing.T, id string, raw []byte) {
			if err := m.SetRawMetadata(id, raw); err != nil {
				t.Fatal(err)
			}
		},
		bareVolume: func(t *testing.T, id string) {
			m.mu.Lock()
			m.volumes[id] = &memVolume{}
			m.mu.Unlock()
		},
		sweep:   func() SweepResult { return m.Sweep(testr.New(t)) },
		mounter: mounter,
	}
}

var implementations = map[string]func(t *testing.T) storeUnderTest{
	"Filesystem": newFilesystemUnderTest,
	"MemoryFS":   newMemoryUnderTest,
}

// forEachStore runs the same test against every implementation of Interface.
func forEachStore(t *testing.T, test func(t *testing.T, s storeUnderTest)) {
	for name, newStore := range implementations {
		t.Run(name, func(t *testing.T) { test(t, newStore(t)) })
	}
}

func testMeta(id string) metadata.Metadata {
	return metadata.Metadata{
		VolumeID:      id,
		TargetPath:    "/target/" + id,
		VolumeContext: map[string]string{"csi.storage.k8s.io/pod.name": "pod-" + id},
	}
}

var invalidVolumeIDs = []string{"", ".", "..", sweptKeysName, "../x", "a/../../b", "/abs", "a/b", "x\x00y", strings.Repeat("a", 256), "\xff\xfe", "a\xc3"}

func TestValidateVolumeID(t *testing.T) {
	for _, id := range invalidVolumeIDs {
		if err := ValidateVolumeID(id); !errors.Is(err, ErrInvalidVolumeID) {
			t.Errorf("ValidateVolumeID(%q) = %v, want ErrInvalidVolumeID", id, err)
		}
	}
	for _, id := range []string{"a", "csi-0123abcd", "a..b", "...", strings.Repeat("a", 255)} {
		if err := ValidateVolumeID(id); err != nil {
			t.Errorf("ValidateVolumeID(%q) = %v, want nil", id, err)
		}
	}
}

func TestConformanceRejectsInvalidVolumeIDs(t *testing.T) {
	forEachStore(t, func(t *testing.T, s storeUnderTest) {
		if _, err := s.store.RegisterMetadata(testMeta("good")); err != nil {
			t.Fatal(err)
		}
		for _, id := range invalidVolumeIDs {
			methods := map[string]error{}
			_, methods["ReadMetadata"] = s.store.ReadMetadata(id)
			methods["WriteMetadata"] = s.store.WriteMetadata(id, testMeta(id))
			_, methods["RegisterMetadata"] = s.store.RegisterMetadata(testMeta(id))
			methods["WriteFiles"] = s.store.WriteFiles(testMeta(id), map[string][]byte{"a": nil})
			methods["RemoveVolume"] = s.store.RemoveVolume(id)
			for method, err := range methods {
				if !errors.Is(err, ErrInvalidVolumeID) {
					t.Errorf("%s(%q) = %v, want ErrInvalidVolumeID", method, id, err)
				}
			}
			if p := s.store.PathForVolume(id); p != "" {
				t.Errorf("PathForVolume(%q) = %q, want empty", id, p)
			}
		}
		ids, _ := s.store.ListVolumes()
		if len(ids) != 1 || ids[0] != "good" {
			t.Errorf("volumes after invalid calls = %v, want [good]", ids)
		}
	})
}

// A registration whose metadata cannot be encoded (a NextIssuanceTime past year 9999) reports
// false and the error, and leaves no volume behind.
func TestConformanceRegisterThatCannotBeEncodedChangesNothing(t *testing.T) {
	forEachStore(t, func(t *testing.T, s storeUnderTest) {
		meta := testMeta("v1")
		farOff := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
		meta.NextIssuanceTime = &farOff
		if wrote, err := s.store.RegisterMetadata(meta); err == nil || wrote {
			t.Fatalf("RegisterMetadata = %v, %v; want false and an error", wrote, err)
		}
		if ids, err := s.store.ListVolumes(); err != nil || len(ids) != 0 {
			t.Fatalf("ListVolumes = %v, %v; want no volume", ids, err)
		}
	})
}

func TestConformanceRegisterAndRead(t *testing.T) {
	forEachStore(t, func(t *testing.T, s storeUnderTest) {
		meta := testMeta("v1")
		meta.Mounted = true // a new volume is always registered unmounted
		wrote, err := s.store.RegisterMetadata(meta)
		if err != nil || !wrote {
			t.Fatalf("RegisterMetadata = %v, %v; want true, nil", wrote, err)
		}
		got, err := s.store.ReadMetadata("v1")
		if err != nil {
			t.Fatal(err)
		}
		if got.Mounted || got.TargetPath != meta.TargetPath || got.VolumeContext["csi.storage.k8s.io/pod.name"] != "pod-v1" {
			t.Fatalf("read back %+v", got)
		}
		// Same context: nothing to write.
		if wrote, err := s.store.RegisterMetadata(testMeta("v1")); err != nil || wrote {
			t.Fatalf("second RegisterMetadata = %v, %v; want false, nil", wrote, err)
		}
		// Issue and mount it, then register with a new context: context changes, state stays.
		nit := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
		got.NextIssuanceTime, got.Mounted = &nit, true
		if err := s.store.WriteMetadata("v1", got); err != nil {
			t.Fatal(err)
		}
		changed := testMeta("v1")
		changed.VolumeContext["extra"] = "1"
		if wrote, err := s.store.RegisterMetadata(changed); err != nil || !wrote {
			t.Fatalf("RegisterMetadata with new context = %v, %v; want true, nil", wrote, err)
		}
		got, _ = s.store.ReadMetadata("v1")
		if got.VolumeContext["extra"] != "1" || !got.Mounted {
			t.Fatalf("after re-register: %+v", got)
		}
		keptNIT := got.NextIssuanceTime != nil && got.NextIssuanceTime.Equal(nit)
		if keptNIT != s.keepsRecordOnRegister {
			t.Fatalf("after re-register NextIssuanceTime = %v; stored record kept = %v, want %v", got.NextIssuanceTime, keptNIT, s.keepsRecordOnRegister)
		}
		if _, err := s.store.ReadMetadata("missing"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("ReadMetadata(missing) = %v, want ErrNotFound", err)
		}
		if err := s.store.WriteMetadata("missing", testMeta("missing")); !errors.Is(err, ErrNotFound) {
			t.Fatalf("WriteMetadata(missing) = %v, want ErrNotFound", err)
		}
	})
}

func TestConformanceMountedNeverRegresses(t *testing.T) {
	forEachStore(t, func(t *testing.T, s storeUnderTest) {
		meta := testMeta("v1")
		if _, err := s.store.RegisterMetadata(meta); err != nil {
			t.Fatal(err)
		}
		stale := meta // a copy taken before the publish succeeded
		mounted := meta
		mounted.Mounted = true
		if err := s.store.WriteMetadata("v1", mounted); err != nil {
			t.Fatal(err)
		}
		nit := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		stale.NextIssuanceTime = &nit
		if err := s.store.WriteMetadata("v1", stale); err != nil {
			t.Fatal(err)
		}
		got, _ := s.store.ReadMetadata("v1")
		if !got.Mounted {
			t.Fatal("a stale WriteMetadata cleared mounted")
		}
		if got.NextIssuanceTime == nil || !got.NextIssuanceTime.Equal(nit) {
			t.Fatal("the stale write's other fields were not applied")
		}
	})
}

func TestConformanceConcurrentWritersKeepMounted(t *testing.T) {
	forEachStore(t, func(t *testing.T, s storeUnderTest) {
		if _, err := s.store.RegisterMetadata(testMeta("v1")); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i := 0; i < 20; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				m := testMeta("v1")
				m.Mounted = i == 0
				if err := s.store.WriteMetadata("v1", m); err != nil {
					t.Error(err)
				}
			}(i)
		}
		wg.Wait()
		got, _ := s.store.ReadMetadata("v1")
		if !got.Mounted {
			t.Fatal("a concurrent stale write cleared mounted")
		}
	})
}

func TestConformanceLegacyDecoding(t *testing.T) {
	forEachStore(t, func(t *testing.T, s storeUnderTest) {
		for file, want := range map[string]bool{
			"testdata/upstream-issued.json":       true,
			"testdata/upstream-never-issued.json": false,
		} {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			id := filepath.Base(file)
			s.setRaw(t, id, raw)
			got, err := s.store.ReadMetadata(id)
			if err != nil {
				t.Fatal(err)
			}
			if got.Mounted != want {
				t.Errorf("%s: Mounted = %v, want %v", file, got.Mounted, want)
			}
		}
		s.setRaw(t, "corrupt", []byte(`{"volumeID": "corr`))
		if _, err := s.store.ReadMetadata("corrupt"); !errors.Is(err, ErrInvalidJSON) {
			t.Fatalf("ReadMetadata(corrupt) = %v, want ErrInvalidJSON", err)
		}
	})
}

func TestConformanceSweep(t *testing.T) {
	forEachStore(t, func(t *testing.T, s storeUnderTest) {
		// never: registered, publish never succeeded, a bind mount survived the crash.
		never := testMeta("never")
		never.TargetPath = filepath.Join(t.TempDir(), "never-target")
		if err := os.MkdirAll(never.TargetPath, 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := s.store.RegisterMetadata(never); err != nil {
			t.Fatal(err)
		}
		if err := s.mounter.Mount("src", never.TargetPath, "", []string{"bind"}); err != nil {
			t.Fatal(err)
		}
		// live: published.
		live := testMeta("live")
		if _, err := s.store.RegisterMetadata(live); err != nil {
			t.Fatal(err)
		}
		live.Mounted = true
		if err := s.store.WriteMetadata("live", live); err != nil {
			t.Fatal(err)
		}
		// legacy, issued: kept; legacy, never issued: removed.
		raw, _ := os.ReadFile("testdata/upstream-issued.json")
		s.setRaw(t, "legacy-issued", raw)
		raw, _ = os.ReadFile("testdata/upstream-never-issued.json")
		s.setRaw(t, "legacy-unissued", raw)
		s.setRaw(t, "corrupt", []byte("{not json"))
		s.bareVolume(t, "bare")

		// ListVolumes is read-only, however often it is called.
		for i := 0; i < 3; i++ {
			ids, err := s.store.ListVolumes()
			if err != nil || len(ids) != 6 {
				t.Fatalf("ListVolumes = %v, %v; want 6 volumes", ids, err)
			}
		}

		res := s.sweep()
		sort.Strings(res.RemovedNeverMounted)
		if got := strings.Join(res.RemovedNeverMounted, ","); got != "legacy-unissued,never" {
			t.Errorf("RemovedNeverMounted = %s", got)
		}
		if got := strings.Join(res.RemovedWithoutMetadata, ","); got != "bare" {
			t.Errorf("RemovedWithoutMetadata = %s", got)
		}
		if got := strings.Join(res.Unreadable, ","); got != "corrupt" {
			t.Errorf("Unreadable = %s", got)
		}
		if len(res.UnmountedTargets) != 1 || res.UnmountedTargets[0] != never.TargetPath {
			t.Errorf("UnmountedTargets = %v", res.UnmountedTargets)
		}
		if res.Kept != 2 {
			t.Errorf("Kept = %d, want 2", res.Kept)
		}
		if mps, _ := s.mounter.List(); len(mps) != 0 {
			t.Errorf("mount points left: %v", mps)
		}
		ids, _ := s.store.ListVolumes()
		sort.Strings(ids)
		if got := strings.Join(ids, ","); got != "corrupt,legacy-issued,live" {
			t.Errorf("volumes after sweep = %s", got)
		}
		// A second sweep finds nothing more to do.
		res = s.sweep()
		if len(res.RemovedNeverMounted)+len(res.RemovedWithoutMetadata) != 0 || res.Kept != 2 {
			t.Errorf("second sweep = %+v", res)
		}
	})
}

// TestConformanceSweepKeepsPendingKeys: the sweep sets a removed volume's pending key aside
// (a mounted volume's stays where it is), the kept key is listed, read and removed through
// SweptKeyStore, and the place it is kept in is never taken for a volume.
func TestConformanceSweepKeepsPendingKeys(t *testing.T) {
	forEachStore(t, func(t *testing.T, s storeUnderTest) {
		keys := s.store.(PendingKeyStore)
		swept := s.store.(SweptKeyStore)
		for _, id := range []string{"never", "never-no-key", "live"} {
			if _, err := s.store.RegisterMetadata(testMeta(id)); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.store.(MountRecorder).SetMounted("live"); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"never", "live"} {
			if err := keys.WritePendingKey(id, []byte("key of "+id)); err != nil {
				t.Fatal(err)
			}
		}
		if ids, err := swept.SweptPendingKeys(); err != nil || len(ids) != 0 {
			t.Fatalf("swept keys before any sweep = %v, %v", ids, err)
		}

		res := s.sweep()
		if got := strings.Join(res.KeptPendingKeys, ","); got != "never" {
			t.Errorf("KeptPendingKeys = %q, want never", got)
		}
		if ids, err := swept.SweptPendingKeys(); err != nil || strings.Join(ids, ",") != "never" {
			t.Fatalf("SweptPendingKeys = %v, %v; want [never]", ids, err)
		}
		if data, err := swept.ReadSweptPendingKey("never"); err != nil || string(data) != "key of never" {
			t.Fatalf("ReadSweptPendingKey(never) = %q, %v", data, err)
		}
		if _, err := swept.ReadSweptPendingKey("live"); !errors.Is(err, ErrNotFound) {
			t.Errorf("ReadSweptPendingKey(live) = %v, want ErrNotFound", err)
		}
		if data, err := keys.ReadPendingKey("live"); err != nil || string(data) != "key of live" {
			t.Errorf("the mounted volume's own key = %q, %v", data, err)
		}
		ids, _ := s.store.ListVolumes()
		if got := strings.Join(ids, ","); got != "live" {
			t.Errorf("volumes after sweep = %q, want live (the kept keys are no volume)", got)
		}
		// A second sweep keeps the kept key and finds nothing to remove.
		if res := s.sweep(); len(res.RemovedWithoutMetadata)+len(res.RemovedNeverMounted) != 0 {
			t.Errorf("second sweep = %+v", res)
		}

		if err := swept.RemoveSweptPendingKey("never"); err != nil {
			t.Fatal(err)
		}
		if err := swept.RemoveSweptPendingKey("never"); err != nil {
			t.Errorf("removing a removed key: %v", err)
		}
		if ids, _ := swept.SweptPendingKeys(); len(ids) != 0 {
			t.Errorf("swept keys after removal = %v", ids)
		}
	})
}

func TestConformanceRemoveVolumeIdempotent(t *testing.T) {
	forEachStore(t, func(t *testing.T, s storeUnderTest) {
		if _, err := s.store.RegisterMetadata(testMeta("v1")); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			if err := s.store.RemoveVolume("v1"); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.store.ReadMetadata("v1"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("volume still readable after removal: %v", err)
		}
	})
}
