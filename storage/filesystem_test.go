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
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"k8s.io/mount-utils"

	"github.com/cert-manager/csi-lib/internal/csilibdebug"
	"github.com/cert-manager/csi-lib/metadata"
)

func (f *Filesystem) metadataPath(id string) string {
	return filepath.Join(f.root, id, metadataFileName)
}

func newPlainFilesystem(t *testing.T, base string) *Filesystem {
	t.Helper()
	fs, err := NewFilesystemWithOptions(testr.New(t), base, FilesystemOptions{PlainDirectory: true, Mounter: mount.NewFakeMounter(nil)})
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

func TestFilesystemMountsTmpfsUnlessMounted(t *testing.T) {
	base := t.TempDir()
	mounter := mount.NewFakeMounter(nil)
	if _, err := NewFilesystemWithOptions(testr.New(t), base, FilesystemOptions{Mounter: mounter}); err != nil {
		t.Fatal(err)
	}
	mps, _ := mounter.List()
	if len(mps) != 1 || mps[0].Type != "tmpfs" || mps[0].Path != filepath.Join(base, "inmemfs") {
		t.Fatalf("mount points = %+v, want one tmpfs at <base>/inmemfs", mps)
	}
	// A second store on the same base finds the tmpfs and does not mount again.
	if _, err := NewFilesystemWithOptions(testr.New(t), base, FilesystemOptions{Mounter: mounter}); err != nil {
		t.Fatal(err)
	}
	if mps, _ := mounter.List(); len(mps) != 1 {
		t.Fatalf("mounted twice: %+v", mps)
	}
	// Plain-directory mode mounts nothing.
	plain := mount.NewFakeMounter(nil)
	if _, err := NewFilesystemWithOptions(testr.New(t), t.TempDir(), FilesystemOptions{PlainDirectory: true, Mounter: plain}); err != nil {
		t.Fatal(err)
	}
	if mps, _ := plain.List(); len(mps) != 0 {
		t.Fatalf("plain directory mode mounted %+v", mps)
	}
}

func TestFilesystemRelativeBaseDir(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	fs := newPlainFilesystem(t, "relative/base")
	if _, err := fs.RegisterMetadata(testMeta("v1")); err != nil {
		t.Fatal(err)
	}
	if err := fs.WriteFiles(testMeta("v1"), map[string][]byte{"tls.crt": []byte("x")}); err != nil {
		t.Fatal(err)
	}
	// As upstream: PathForVolume joins the base directory as given, so it stays relative.
	if got := fs.PathForVolume("v1"); got != "relative/base/inmemfs/v1/data" {
		t.Fatalf("PathForVolume = %q, want relative/base/inmemfs/v1/data", got)
	}
	want := filepath.Join(dir, "relative/base/inmemfs/v1/data")
	if b, err := os.ReadFile(filepath.Join(want, "tls.crt")); err != nil || string(b) != "x" {
		t.Fatalf("file at absolute path = %q, %v", b, err)
	}
	ids, err := fs.ListVolumes()
	if err != nil || len(ids) != 1 {
		t.Fatalf("ListVolumes = %v, %v", ids, err)
	}
}

func TestFilesystemInvalidIDsTouchNothingOutside(t *testing.T) {
	base := t.TempDir()
	fs := newPlainFilesystem(t, base)
	// Files an escaping ID could reach.
	outside := filepath.Join(base, "x")
	if err := os.WriteFile(outside, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"../x", "..", "../../" + filepath.Base(base) + "/x"} {
		_ = fs.RemoveVolume(id)
		_, _ = fs.RegisterMetadata(testMeta(id))
		_ = fs.WriteMetadata(id, testMeta(id))
	}
	if b, err := os.ReadFile(outside); err != nil || string(b) != "keep" {
		t.Fatalf("file outside the store changed: %q, %v", b, err)
	}
	if _, err := os.Stat(fs.root); err != nil {
		t.Fatalf("root removed: %v", err)
	}
}

// TestFilesystemMetadataWritesAreAtomic runs a reader against a writer: with a plain overwrite a
// reader often catches a truncated file; with temp file + rename it never does.
func TestFilesystemMetadataWritesAreAtomic(t *testing.T) {
	fs := newPlainFilesystem(t, t.TempDir())
	meta := testMeta("v1")
	// Large enough that a non-atomic write is observable.
	for i := 0; i < 200; i++ {
		meta.VolumeContext[string(rune('a'+i%26))+string(rune('A'+i/26))] = "some-longish-value-to-make-the-file-bigger"
	}
	if _, err := fs.RegisterMetadata(meta); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var reads, torn atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			raw, err := os.ReadFile(fs.metadataPath("v1"))
			if err != nil {
				torn.Add(1)
				continue
			}
			var m metadata.Metadata
			if json.Unmarshal(raw, &m) != nil {
				torn.Add(1)
			}
			reads.Add(1)
		}
	}()
	for i := 0; i < 500; i++ {
		nit := time.Unix(int64(i), 0)
		meta.NextIssuanceTime = &nit
		if err := fs.WriteMetadata("v1", meta); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if torn.Load() != 0 {
		t.Fatalf("%d of %d reads saw a torn or missing metadata file", torn.Load(), reads.Load())
	}
	if reads.Load() == 0 {
		t.Fatal("the reader never ran")
	}
	// No temporary files are left behind.
	entries, _ := os.ReadDir(fs.volumeDir("v1"))
	for _, e := range entries {
		if e.Name() != metadataFileName && e.Name() != dataDirName {
			t.Errorf("unexpected file left in volume dir: %s", e.Name())
		}
	}
}

func TestFilesystemProjection(t *testing.T) {
	fs := newPlainFilesystem(t, t.TempDir())
	meta := testMeta("v1")
	if _, err := fs.RegisterMetadata(meta); err != nil {
		t.Fatal(err)
	}
	dataDir := fs.PathForVolume("v1")
	// An upstream layout wrote plain files; the projection replaces them.
	if err := os.WriteFile(filepath.Join(dataDir, "tls.crt"), []byte("legacy"), 0o440); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dataDir, "stale.txt"), []byte("legacy"), 0o440); err != nil {
		t.Fatal(err)
	}
	for i, set := range []map[string][]byte{
		{"tls.crt": []byte("crt1"), "tls.key": []byte("key1")},
		{"tls.crt": []byte("crt2"), "tls.key": []byte("key2")},
	} {
		if err := fs.WriteFiles(meta, set); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	target, err := os.Readlink(filepath.Join(dataDir, dataLinkName))
	if err != nil {
		t.Fatalf("..data is not a symlink: %v", err)
	}
	entries, _ := os.ReadDir(dataDir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if len(entries) != 4 { // ..data, one generation, tls.crt, tls.key
		t.Fatalf("data dir holds %v; want ..data, one generation and two files", names)
	}
	for _, name := range []string{"tls.crt", "tls.key"} {
		link, err := os.Readlink(filepath.Join(dataDir, name))
		if err != nil || link != filepath.Join(dataLinkName, name) {
			t.Errorf("%s -> %q, %v; want a symlink through ..data", name, link, err)
		}
		st, err := os.Stat(filepath.Join(dataDir, target, name))
		if err != nil || st.Mode().Perm() != 0o440 {
			t.Errorf("%s mode = %v, %v; want 0440", name, st.Mode().Perm(), err)
		}
	}
	if b, _ := fs.ReadFile("v1", "tls.key"); string(b) != "key2" {
		t.Fatalf("tls.key = %q, want key2", b)
	}
}

func TestFilesystemFSGroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("changing a file's group to an arbitrary gid needs root")
	}
	fs := newPlainFilesystem(t, t.TempDir())
	fs.FSGroupVolumeAttributeKey = "fsgroup"
	meta := testMeta("v1")
	meta.VolumeMountGroup = "2000"
	if _, err := fs.RegisterMetadata(meta); err != nil {
		t.Fatal(err)
	}
	check := func(want uint32) {
		t.Helper()
		for _, p := range []string{"", dataLinkName, "tls.crt"} {
			st, err := os.Stat(filepath.Join(fs.PathForVolume("v1"), p))
			if err != nil {
				t.Fatal(err)
			}
			if gid := st.Sys().(*syscall.Stat_t).Gid; gid != want {
				t.Errorf("%q gid = %d, want %d", p, gid, want)
			}
		}
	}
	if err := fs.WriteFiles(meta, map[string][]byte{"tls.crt": []byte("x")}); err != nil {
		t.Fatal(err)
	}
	check(2000)
	// The volume attribute overrides the mount group.
	meta.VolumeContext["fsgroup"] = "3000"
	if err := fs.WriteFiles(meta, map[string][]byte{"tls.crt": []byte("y")}); err != nil {
		t.Fatal(err)
	}
	check(3000)
}

func TestFilesystemReadMetadataErrors(t *testing.T) {
	fs := newPlainFilesystem(t, t.TempDir())
	if _, err := fs.ReadMetadata("nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("got %v, want ErrNotFound", err)
	}
	if _, err := fs.ReadFile("nope", "tls.crt"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("got %v, want ErrNotFound", err)
	}
}

func TestNewFilesystemSweepsAndSurvivesBadVolumes(t *testing.T) {
	base := t.TempDir()
	fs := newPlainFilesystem(t, base)
	if _, err := fs.RegisterMetadata(testMeta("never")); err != nil {
		t.Fatal(err)
	}
	live := testMeta("live")
	if _, err := fs.RegisterMetadata(live); err != nil {
		t.Fatal(err)
	}
	live.Mounted = true
	if err := fs.WriteMetadata("live", live); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(fs.root, "corrupt"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fs.metadataPath("corrupt"), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	// "Restart": a new store on the same directory.
	fs2 := newPlainFilesystem(t, base)
	res := fs2.StartupSweep()
	if len(res.RemovedNeverMounted) != 1 || res.RemovedNeverMounted[0] != "never" || res.Kept != 1 || len(res.Unreadable) != 1 {
		t.Fatalf("startup sweep = %+v", res)
	}
	if _, err := fs2.ReadMetadata("live"); err != nil {
		t.Fatalf("live volume lost: %v", err)
	}
}

// TestSkipSweepLeavesEveryVolume: with SkipSweep, or with the operator's CSILIBDEBUG setting
// startupsweep=0, a new store removes nothing, not even a volume whose publish never succeeded,
// and reports an empty start-up sweep; the default sweeps it, and so does startupsweep=1.
func TestSkipSweepLeavesEveryVolume(t *testing.T) {
	for way, skip := range map[string]func(t *testing.T, o *FilesystemOptions){
		"SkipSweep":   func(_ *testing.T, o *FilesystemOptions) { o.SkipSweep = true },
		"CSILIBDEBUG": func(t *testing.T, _ *FilesystemOptions) { t.Setenv(csilibdebug.EnvironmentVariable, "startupsweep=0") },
		"SkipSweep wins startupsweep=1": func(t *testing.T, o *FilesystemOptions) {
			o.SkipSweep = true
			t.Setenv(csilibdebug.EnvironmentVariable, "startupsweep=1")
		},
	} {
		t.Run(way, func(t *testing.T) {
			base := t.TempDir()
			fs := newPlainFilesystem(t, base)
			if _, err := fs.RegisterMetadata(testMeta("never")); err != nil {
				t.Fatal(err)
			}
			opts := FilesystemOptions{PlainDirectory: true, Mounter: mount.NewFakeMounter(nil)}
			skip(t, &opts)
			skipping, err := NewFilesystemWithOptions(testr.New(t), base, opts)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := skipping.ReadMetadata("never"); err != nil {
				t.Fatalf("the skipped sweep removed a never-mounted volume: %v", err)
			}
			if res := skipping.StartupSweep(); len(res.RemovedNeverMounted) != 0 || res.Kept != 0 {
				t.Fatalf("the skipped sweep reports a sweep: %+v", res)
			}
			t.Setenv(csilibdebug.EnvironmentVariable, "startupsweep=1")
			sweeping := newPlainFilesystem(t, base)
			if _, err := sweeping.ReadMetadata("never"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("the default sweep kept a never-mounted volume: %v", err)
			}
		})
	}
}

// TestBadCSILIBDEBUGFailsNewFilesystem: a value the store does not know fails its constructor,
// naming it, before anything is created or swept.
func TestBadCSILIBDEBUGFailsNewFilesystem(t *testing.T) {
	base := t.TempDir()
	t.Setenv(csilibdebug.EnvironmentVariable, "startupsweep=no")
	_, err := NewFilesystemWithOptions(testr.New(t), base, FilesystemOptions{PlainDirectory: true, Mounter: mount.NewFakeMounter(nil)})
	if err == nil || !strings.Contains(err.Error(), `CSILIBDEBUG: setting "startupsweep" has the value "no"`) {
		t.Fatalf("NewFilesystemWithOptions: %v, want the bad setting named", err)
	}
	if entries, err := os.ReadDir(base); err != nil || len(entries) != 0 {
		t.Fatalf("the failed constructor left %d entries (%v)", len(entries), err)
	}
}
