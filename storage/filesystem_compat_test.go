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
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cert-manager/csi-lib/metadata"
)

// upstreamMetadata is upstream csi-lib's Metadata type: no Mounted field. Decoding a fork file
// into it and encoding it again is what an upstream driver does after a rollback.
type upstreamMetadata struct {
	VolumeID         string            `json:"volumeID"`
	TargetPath       string            `json:"targetPath"`
	NextIssuanceTime *time.Time        `json:"nextIssuanceTime,omitempty"`
	VolumeContext    map[string]string `json:"volumeContext,omitempty"`
	VolumeMountGroup string            `json:"volumeMountGroup,omitempty"`
}

func TestFilesystemOnDiskBytes(t *testing.T) {
	f := newPlainFilesystem(t, t.TempDir())
	if _, err := f.RegisterMetadata(metadata.Metadata{VolumeID: "v1", TargetPath: "/t"}); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(f.metadataPath("v1"))
	if want := `{"volumeID":"v1","targetPath":"/t","mounted":false}`; string(raw) != want {
		t.Errorf("registered file = %s, want %s", raw, want)
	}
	nit := time.Date(1970, 1, 3, 0, 0, 0, 0, time.UTC)
	if err := f.WriteMetadata("v1", metadata.Metadata{VolumeID: "v1", TargetPath: "/t", NextIssuanceTime: &nit, Mounted: true}); err != nil {
		t.Fatal(err)
	}
	raw, _ = os.ReadFile(f.metadataPath("v1"))
	if want := `{"volumeID":"v1","targetPath":"/t","nextIssuanceTime":"1970-01-03T00:00:00Z","mounted":true}`; string(raw) != want {
		t.Errorf("mounted file = %s, want %s", raw, want)
	}
}

// TestFilesystemUpgradeAndRollback: files written by upstream load by upstream's rule; files
// written by the store, rewritten by an upstream writer (which drops the unknown key), and read
// again are still classified correctly.
func TestFilesystemUpgradeAndRollback(t *testing.T) {
	f := newPlainFilesystem(t, t.TempDir())
	for file, want := range map[string]bool{"testdata/upstream-issued.json": true, "testdata/upstream-never-issued.json": false} {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		id := strings.TrimSuffix(filepath.Base(file), ".json")
		if err := os.MkdirAll(filepath.Join(f.root, id, dataDirName), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f.metadataPath(id), raw, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := f.ReadMetadata(id)
		if err != nil || got.Mounted != want {
			t.Errorf("%s: Mounted = %v, %v; want %v", file, got.Mounted, err, want)
		}
	}

	nit := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name        string
		meta        metadata.Metadata
		wantMounted bool // after the rollback and upgrade
	}{
		{"mounted and issued", metadata.Metadata{VolumeID: "a", NextIssuanceTime: &nit, Mounted: true}, true},
		{"registered, never issued", metadata.Metadata{VolumeID: "b"}, false},
		// Issued during a publish that never succeeded: the fork's file says mounted false, but
		// once upstream has rewritten it without the key, upstream's rule (the only one it knew)
		// applies again, and upstream itself would have resumed it.
		{"issued, never mounted", metadata.Metadata{VolumeID: "c", NextIssuanceTime: &nit}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := f.RegisterMetadata(metadata.Metadata{VolumeID: tc.meta.VolumeID}); err != nil {
				t.Fatal(err)
			}
			if err := f.WriteMetadata(tc.meta.VolumeID, tc.meta); err != nil {
				t.Fatal(err)
			}
			before, _ := f.ReadMetadata(tc.meta.VolumeID)
			if before.Mounted != tc.meta.Mounted {
				t.Fatalf("fork file read back Mounted = %v, want %v", before.Mounted, tc.meta.Mounted)
			}
			// Rollback: upstream reads the file (ignoring "mounted") and writes it again.
			raw, _ := os.ReadFile(f.metadataPath(tc.meta.VolumeID))
			var up upstreamMetadata
			if err := json.Unmarshal(raw, &up); err != nil {
				t.Fatalf("upstream cannot read the fork's file: %v", err)
			}
			rewritten, _ := json.Marshal(up)
			if strings.Contains(string(rewritten), "mounted") {
				t.Fatal("the upstream writer kept the key")
			}
			if err := os.WriteFile(f.metadataPath(tc.meta.VolumeID), rewritten, 0o600); err != nil {
				t.Fatal(err)
			}
			// Upgrade again.
			after, err := f.ReadMetadata(tc.meta.VolumeID)
			if err != nil || after.Mounted != tc.wantMounted {
				t.Errorf("after rollback and upgrade Mounted = %v, %v; want %v", after.Mounted, err, tc.wantMounted)
			}
		})
	}
}

func TestFilesystemModes(t *testing.T) {
	f := newPlainFilesystem(t, t.TempDir())
	meta := testMeta("v1")
	if _, err := f.RegisterMetadata(meta); err != nil {
		t.Fatal(err)
	}
	if err := f.WriteFiles(meta, map[string][]byte{"tls.crt": []byte("x")}); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{
		f.volumeDir("v1"):    0o644,
		f.dataDir("v1"):      0o550,
		f.metadataPath("v1"): 0o600,
		filepath.Join(f.dataDir("v1"), "..data/tls.crt"): 0o440,
	} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s mode = %o, want %o", path, st.Mode().Perm(), want)
		}
	}
}

func TestFSGroupRules(t *testing.T) {
	const key = "fsgroup-attr"
	tests := []struct {
		attr, mountGroup string
		want             int64 // 0: no group
		wantErr          bool
	}{
		{"", "", 0, false},
		{"", "2000", 2000, false},
		{"3000", "2000", 3000, false},
		{"", "4294967295", 4294967295, false},
		{"+5", "", 5, false},
		{"0", "", 0, true},
		{"4294967296", "", 0, true},
		{"-1", "", 0, true},
		{" 5", "", 0, true},
		{"abc", "", 0, true},
		{"", "1.5", 0, true},
	}
	for _, tc := range tests {
		meta := metadata.Metadata{VolumeID: "v", VolumeMountGroup: tc.mountGroup, VolumeContext: map[string]string{key: tc.attr}}
		gid, err := fsGroupOf(meta, key)
		if tc.wantErr {
			if !errors.Is(err, ErrInvalidFSGroup) || !strings.Contains(err.Error(), key) {
				t.Errorf("attr %q group %q: err = %v, want ErrInvalidFSGroup naming %q", tc.attr, tc.mountGroup, err, key)
			}
			continue
		}
		if err != nil {
			t.Errorf("attr %q group %q: unexpected %v", tc.attr, tc.mountGroup, err)
			continue
		}
		if got := int64(0); gid != nil {
			got = *gid
			if got != tc.want {
				t.Errorf("attr %q group %q: gid %d, want %d", tc.attr, tc.mountGroup, got, tc.want)
			}
		} else if tc.want != 0 {
			t.Errorf("attr %q group %q: no gid, want %d", tc.attr, tc.mountGroup, tc.want)
		}
	}
	// Without an attribute key the mount group is used.
	if gid, err := fsGroupOf(metadata.Metadata{VolumeMountGroup: "9"}, ""); err != nil || gid == nil || *gid != 9 {
		t.Errorf("no key: %v, %v", gid, err)
	}
}

func TestFilesystemWriteFilesNames(t *testing.T) {
	f := newPlainFilesystem(t, t.TempDir())
	meta := testMeta("v1")
	if _, err := f.RegisterMetadata(meta); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("n", 255)
	set := map[string][]byte{"./tls.crt": []byte("crt"), "certs//ca.crt": []byte("ca"), long: []byte("long")}
	if err := f.WriteFiles(meta, set); err != nil {
		t.Fatalf("WriteFiles with sub-paths and a 255-byte name: %v", err)
	}
	for name, want := range map[string]string{"tls.crt": "crt", "certs/ca.crt": "ca", long: "long"} {
		if got, err := f.ReadFile("v1", name); err != nil || string(got) != want {
			t.Errorf("ReadFile(%q) = %q, %v; want %q", name, got, err, want)
		}
	}
	if link, _ := os.Readlink(filepath.Join(f.dataDir("v1"), "certs")); link != "..data/certs" {
		t.Errorf("certs -> %q, want ..data/certs", link)
	}
	before := snapshot(t, f.dataDir("v1"))
	for _, bad := range []string{"", "/abs", "../x", "a/../../x", "..data", "...x", "..a", "..data/x", "..", strings.Repeat("n", 256), "a/" + strings.Repeat("n", 256), strings.Repeat("a/", 2049), "a\x00b"} {
		if err := f.WriteFiles(meta, map[string][]byte{bad: nil, "ok": nil}); !errors.Is(err, ErrInvalidFileName) {
			t.Errorf("WriteFiles(%.40q) = %v, want ErrInvalidFileName", bad, err)
		}
	}
	for _, good := range []string{"a..b", ".x", "x/..y"} {
		if _, err := cleanFilePath(good); err != nil {
			t.Errorf("cleanFilePath(%q) = %v, want accepted", good, err)
		}
	}
	if after := snapshot(t, f.dataDir("v1")); after != before {
		t.Errorf("rejected writes changed the data directory:\n%s\n---\n%s", before, after)
	}
	// The next set replaces the visible names.
	if err := f.WriteFiles(meta, map[string][]byte{"tls.crt": []byte("crt2")}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadFile("v1", "certs/ca.crt"); err != ErrNotFound {
		t.Errorf("dropped sub-path still readable: %v", err)
	}
	if err := f.WriteFiles(testMeta("missing"), map[string][]byte{"a": nil}); !errors.Is(err, ErrNotFound) {
		t.Errorf("WriteFiles on a missing volume = %v, want ErrNotFound", err)
	}
	bad := meta
	bad.VolumeMountGroup = "0"
	if err := f.WriteFiles(bad, map[string][]byte{"tls.crt": []byte("no")}); !errors.Is(err, ErrInvalidFSGroup) {
		t.Errorf("WriteFiles with fsGroup 0 = %v, want ErrInvalidFSGroup", err)
	}
	if got, _ := f.ReadFile("v1", "tls.crt"); string(got) != "crt2" {
		t.Errorf("a rejected write changed tls.crt: %q", got)
	}
}

// snapshot lists a directory tree: names, link targets and file contents.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		b.WriteString(rel)
		if d.Type()&fs.ModeSymlink != 0 {
			l, _ := os.Readlink(p)
			b.WriteString(" -> " + l)
		} else if !d.IsDir() {
			c, _ := os.ReadFile(p)
			b.WriteString(" = " + string(c))
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestFilesystemReadFile(t *testing.T) {
	f := newPlainFilesystem(t, t.TempDir())
	meta := testMeta("v1")
	if _, err := f.RegisterMetadata(meta); err != nil {
		t.Fatal(err)
	}
	if err := f.WriteFiles(meta, map[string][]byte{"tls.crt": []byte("crt")}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"metadata.json", "../metadata.json", "missing", "..data/../../metadata.json"} {
		if _, err := f.ReadFile("v1", name); err != ErrNotFound {
			t.Errorf("ReadFile(%q) = %v, want bare ErrNotFound", name, err)
		}
	}
	if _, err := f.ReadFile("nope", "tls.crt"); err != ErrNotFound {
		t.Errorf("ReadFile of a missing volume = %v, want bare ErrNotFound", err)
	}
	_, err := f.ReadMetadata("nope")
	if !errors.Is(err, ErrNotFound) || err.Error() != "reading metadata file: not found" {
		t.Errorf("ReadMetadata(nope) = %v, want \"reading metadata file: not found\"", err)
	}
	err = f.WriteMetadata("nope", testMeta("nope"))
	if !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, ErrNotFound) {
		t.Errorf("WriteMetadata(nope) = %v, want fs.ErrNotExist and ErrNotFound", err)
	}
	if ids, err := newPlainFilesystem(t, t.TempDir()).ListVolumes(); ids != nil || err != nil {
		t.Errorf("ListVolumes of an empty store = %#v, %v; want nil, nil", ids, err)
	}
}

func TestFilesystemRegisterKeepsStoredRecord(t *testing.T) {
	f := newPlainFilesystem(t, t.TempDir())
	meta := metadata.Metadata{VolumeID: "v1", TargetPath: "/old", VolumeMountGroup: "5", VolumeContext: map[string]string{"a": "1"}}
	if _, err := f.RegisterMetadata(meta); err != nil {
		t.Fatal(err)
	}
	nit := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	meta.NextIssuanceTime = &nit
	if err := f.WriteMetadata("v1", meta); err != nil {
		t.Fatal(err)
	}
	changed := metadata.Metadata{VolumeID: "v1", TargetPath: "/new", VolumeMountGroup: "6", VolumeContext: map[string]string{"a": "2"}}
	if wrote, err := f.RegisterMetadata(changed); err != nil || !wrote {
		t.Fatalf("RegisterMetadata = %v, %v", wrote, err)
	}
	got, _ := f.ReadMetadata("v1")
	if got.TargetPath != "/old" || got.VolumeMountGroup != "5" || got.NextIssuanceTime == nil || got.VolumeContext["a"] != "2" {
		t.Errorf("after re-register = %+v; want the stored record with the new context", got)
	}
	if err := os.WriteFile(f.metadataPath("v1"), []byte("{corrupt"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := f.RegisterMetadata(changed); !errors.Is(err, ErrInvalidJSON) {
		t.Errorf("RegisterMetadata over corrupt metadata = %v, want ErrInvalidJSON", err)
	}
	if raw, _ := os.ReadFile(f.metadataPath("v1")); string(raw) != "{corrupt" {
		t.Errorf("corrupt metadata was overwritten with %s", raw)
	}
}

func TestFilesystemIsComparable(t *testing.T) {
	f := newPlainFilesystem(t, t.TempDir())
	g := *f
	if g != *f {
		t.Error("a copy of a Filesystem is not equal to it")
	}
	if other := newPlainFilesystem(t, t.TempDir()); *other == *f {
		t.Error("two stores compare equal")
	}
}

// TestFilesystemRefusesSymlinkedDirectories: a volume directory, data/ or ..data replaced by a
// symlink never leads an operation outside the base directory.
func TestFilesystemRefusesSymlinkedDirectories(t *testing.T) {
	f := newPlainFilesystem(t, t.TempDir())
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "metadata.json"), []byte(`{"volumeID":"evil","targetPath":"/x","mounted":true}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("outside"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, outside)

	// Volume directory replaced by a symlink.
	if err := os.Symlink(outside, filepath.Join(f.root, "evil")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadMetadata("evil"); err == nil {
		t.Error("ReadMetadata went through a symlinked volume directory")
	}
	if err := f.WriteMetadata("evil", testMeta("evil")); err == nil {
		t.Error("WriteMetadata went through a symlinked volume directory")
	}
	if err := f.WriteFiles(testMeta("evil"), map[string][]byte{"x": nil}); err == nil {
		t.Error("WriteFiles went through a symlinked volume directory")
	}
	if _, err := f.RegisterMetadata(testMeta("evil")); err == nil {
		t.Error("RegisterMetadata went through a symlinked volume directory")
	}
	if err := f.SetMounted("evil"); err == nil {
		t.Error("SetMounted went through a symlinked volume directory")
	}

	// data/ replaced by a symlink.
	meta := testMeta("v1")
	if _, err := f.RegisterMetadata(meta); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(f.dataDir("v1")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, f.dataDir("v1")); err != nil {
		t.Fatal(err)
	}
	if err := f.WriteFiles(meta, map[string][]byte{"x": []byte("y")}); err == nil {
		t.Error("WriteFiles went through a symlinked data directory")
	}
	if _, err := f.ReadFile("v1", "secret"); err != ErrNotFound {
		t.Errorf("ReadFile through a symlinked data directory = %v, want ErrNotFound", err)
	}

	// ..data replaced by a symlink leading out.
	if err := os.Remove(f.dataDir("v1")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(f.dataDir("v1"), 0o550); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(f.dataDir("v1"), "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/secret", filepath.Join(f.dataDir("v1"), "secret")); err != nil {
		t.Fatal(err)
	}
	if got, err := f.ReadFile("v1", "secret"); err != ErrNotFound {
		t.Errorf("ReadFile through ..data leading out = %q, %v; want ErrNotFound", got, err)
	}
	if err := f.WriteFiles(meta, map[string][]byte{"tls.crt": []byte("new")}); err != nil {
		t.Fatalf("WriteFiles over a hostile ..data: %v", err)
	}
	if err := f.RemoveVolume("evil"); err != nil {
		t.Fatal(err)
	}
	if after := snapshot(t, outside); after != before {
		t.Errorf("the directory outside the store changed:\n%s\n---\n%s", before, after)
	}
}

// TestSetMountedNeverLosesARenewal races recording a publish against the renewal loop's
// WriteKeypair persisting a new NextIssuanceTime: the time written must survive. A read-modify-
// write outside the store's lock (read, set Mounted, write back) loses it now and then.
func TestSetMountedNeverLosesARenewal(t *testing.T) {
	forEachStore(t, func(t *testing.T, s storeUnderTest) {
		recorder := s.store.(MountRecorder)
		for i := range 200 {
			id := "v" + string(rune('a'+i%26)) + time.Duration(i).String()
			meta := testMeta(id)
			if _, err := s.store.RegisterMetadata(meta); err != nil {
				t.Fatal(err)
			}
			nit := time.Date(2030, 1, 1, 0, 0, i, 0, time.UTC)
			renewed := meta
			renewed.NextIssuanceTime = &nit
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); _ = s.store.WriteMetadata(id, renewed) }()
			go func() { defer wg.Done(); _ = recorder.SetMounted(id) }()
			wg.Wait()
			got, err := s.store.ReadMetadata(id)
			if err != nil || !got.Mounted || got.NextIssuanceTime == nil || !got.NextIssuanceTime.Equal(nit) {
				t.Fatalf("round %d: %+v, %v; want Mounted and the renewal's time", i, got, err)
			}
		}
	})
}

// TestPendingKeyLivesOutsideData: the pending key is a 0600 file beside metadata.json, never in
// the bind-mounted data directory, and goes with the volume.
func TestPendingKeyLivesOutsideData(t *testing.T) {
	forEachStore(t, func(t *testing.T, s storeUnderTest) {
		ks := s.store.(PendingKeyStore)
		if err := ks.WritePendingKey("v1", []byte("k")); !errors.Is(err, ErrNotFound) {
			t.Fatalf("WritePendingKey on a missing volume = %v, want ErrNotFound", err)
		}
		if _, err := s.store.RegisterMetadata(testMeta("v1")); err != nil {
			t.Fatal(err)
		}
		if _, err := ks.ReadPendingKey("v1"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("ReadPendingKey before any write = %v, want ErrNotFound", err)
		}
		if err := ks.WritePendingKey("v1", []byte("key-1")); err != nil {
			t.Fatal(err)
		}
		if err := ks.WritePendingKey("v1", []byte("key-2")); err != nil {
			t.Fatal(err)
		}
		if got, err := ks.ReadPendingKey("v1"); err != nil || string(got) != "key-2" {
			t.Fatalf("ReadPendingKey = %q, %v", got, err)
		}
		if f, ok := s.store.(*Filesystem); ok {
			st, err := os.Stat(filepath.Join(f.volumeDir("v1"), pendingKeyFileName))
			if err != nil || st.Mode().Perm() != 0o600 {
				t.Fatalf("key file: %v, %v; want mode 0600 beside metadata.json", st, err)
			}
			_ = filepath.WalkDir(f.dataDir("v1"), func(p string, d fs.DirEntry, err error) error {
				if err == nil && strings.Contains(d.Name(), "pending-key") {
					t.Errorf("the pending key is under the data directory: %s", p)
				}
				return nil
			})
		}
		if m, ok := s.store.(*MemoryFS); ok {
			if files, _ := m.ReadFiles("v1"); len(files) != 1 {
				t.Fatalf("ReadFiles shows the pending key: %v", files)
			}
		}
		if err := ks.RemovePendingKey("v1"); err != nil {
			t.Fatal(err)
		}
		if err := ks.RemovePendingKey("v1"); err != nil {
			t.Fatalf("removing nothing: %v", err)
		}
		if err := ks.WritePendingKey("v1", []byte("key-3")); err != nil {
			t.Fatal(err)
		}
		if err := s.store.RemoveVolume("v1"); err != nil {
			t.Fatal(err)
		}
		if _, err := ks.ReadPendingKey("v1"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("pending key after RemoveVolume: %v", err)
		}
	})
}

// TestSweepRemovesCrashLeftovers: a kill inside an atomic metadata write leaves a temporary
// file (a full copy of the metadata), a kill inside a projection leaves a generation or a
// temporary link that no ..data points to. The start-up sweep removes them from kept volumes
// and leaves the live set alone.
func TestSweepRemovesCrashLeftovers(t *testing.T) {
	base := t.TempDir()
	f := newPlainFilesystem(t, base)
	meta := testMeta("live")
	if _, err := f.RegisterMetadata(meta); err != nil {
		t.Fatal(err)
	}
	meta.Mounted = true
	if err := f.WriteMetadata("live", meta); err != nil {
		t.Fatal(err)
	}
	if err := f.WriteFiles(meta, map[string][]byte{"tls.crt": []byte("crt")}); err != nil {
		t.Fatal(err)
	}
	litter := []string{
		filepath.Join(f.volumeDir("live"), ".metadata.json.tmp-12345"),
		filepath.Join(f.volumeDir("live"), ".pending-key.pem.tmp-999"),
		filepath.Join(f.dataDir("live"), "..2020_01_01_00_00_00.123"),
		filepath.Join(f.dataDir("live"), "..tmp-0badf00d"),
	}
	for _, p := range litter[:2] {
		if err := os.WriteFile(p, []byte(`{"volumeID":"live"}`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(litter[2], "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..2020_01_01_00_00_00.123", litter[3]); err != nil {
		t.Fatal(err)
	}

	restarted := newPlainFilesystem(t, base)
	res := restarted.StartupSweep()
	if len(res.RemovedLeftovers) != 4 || res.Kept != 1 {
		t.Fatalf("sweep = %+v; want the 4 leftovers removed and the volume kept", res)
	}
	for _, p := range litter {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s survived the sweep", p)
		}
	}
	if got, err := restarted.ReadFile("live", "tls.crt"); err != nil || string(got) != "crt" {
		t.Fatalf("the live files were touched: %q, %v", got, err)
	}
	if got, err := restarted.ReadMetadata("live"); err != nil || !got.Mounted {
		t.Fatalf("the live metadata was touched: %+v, %v", got, err)
	}
}
