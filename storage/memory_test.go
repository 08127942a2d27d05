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
	"reflect"
	"testing"
	"time"

	"github.com/cert-manager/csi-lib/metadata"
)

// csiDriverMeta is the record cert-manager/csi-driver's writer tests store and compare.
func csiDriverMeta() metadata.Metadata {
	nit := time.Date(1970, 1, 3, 0, 0, 0, 0, time.UTC)
	return metadata.Metadata{
		VolumeID: "vol-id", TargetPath: "/target-path", NextIssuanceTime: &nit,
		VolumeContext: map[string]string{"csi.cert-manager.io/issuer-name": "ca-issuer"},
	}
}

const csiDriverMetaJSON = `{"volumeID":"vol-id","targetPath":"/target-path","nextIssuanceTime":"1970-01-03T00:00:00Z","volumeContext":{"csi.cert-manager.io/issuer-name":"ca-issuer"}}`

func TestMemoryFSReadFilesIsUpstreamsMap(t *testing.T) {
	m := NewMemoryFS()
	meta := csiDriverMeta()
	if _, err := m.RegisterMetadata(meta); err != nil {
		t.Fatal(err)
	}
	if err := m.WriteMetadata("vol-id", meta); err != nil {
		t.Fatal(err)
	}
	if err := m.WriteFiles(meta, map[string][]byte{"ca": []byte("ca bytes"), "cert": []byte("cert bytes"), "key": []byte("key bytes")}); err != nil {
		t.Fatal(err)
	}
	// A successful publish records Mounted; the bytes must not change.
	if err := m.SetMounted("vol-id"); err != nil {
		t.Fatal(err)
	}
	mounted := meta
	mounted.Mounted = true
	if err := m.WriteMetadata("vol-id", mounted); err != nil {
		t.Fatal(err)
	}
	got, err := m.ReadFiles("vol-id")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{
		"metadata.json": []byte(csiDriverMetaJSON),
		"ca":            []byte("ca bytes"),
		"cert":          []byte("cert bytes"),
		"key":           []byte("key bytes"),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ReadFiles =\n%q\nwant\n%q", got, want)
	}
	read, err := m.ReadMetadata("vol-id")
	if err != nil || !read.Mounted {
		t.Errorf("ReadMetadata = %+v, %v; want Mounted true from the flag", read, err)
	}
	// The map is a copy.
	got["cert"][0] = 'X'
	delete(got, "key")
	again, _ := m.ReadFiles("vol-id")
	if string(again["cert"]) != "cert bytes" || again["key"] == nil {
		t.Error("ReadFiles returned the store's own map or slices")
	}
	if b, err := m.ReadFile("vol-id", "metadata.json"); err != nil || string(b) != csiDriverMetaJSON {
		t.Errorf("ReadFile(metadata.json) = %s, %v", b, err)
	}
}

func TestMemoryFSBareSentinels(t *testing.T) {
	m := NewMemoryFS()
	if _, err := m.ReadFiles("nope"); err != ErrNotFound {
		t.Errorf("ReadFiles = %v, want bare ErrNotFound", err)
	}
	if _, err := m.ReadFile("nope", "cert"); err != ErrNotFound {
		t.Errorf("ReadFile = %v, want bare ErrNotFound", err)
	}
	if _, err := m.ReadMetadata("nope"); err != ErrNotFound {
		t.Errorf("ReadMetadata = %v, want bare ErrNotFound", err)
	}
	if err := m.WriteMetadata("nope", metadata.Metadata{VolumeID: "nope"}); err != ErrNotFound {
		t.Errorf("WriteMetadata = %v, want bare ErrNotFound", err)
	}
	if err := m.WriteFiles(metadata.Metadata{VolumeID: "nope"}, nil); err != ErrNotFound {
		t.Errorf("WriteFiles = %v, want bare ErrNotFound", err)
	}
	if _, err := m.RegisterMetadata(metadata.Metadata{VolumeID: "v"}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ReadFile("v", "cert"); err != ErrNotFound {
		t.Errorf("ReadFile of a missing name = %v, want bare ErrNotFound", err)
	}
	// A volume whose metadata entry is gone (a driver's WriteFiles never removes it, but a
	// test may build one) is NotFound; undecodable bytes are ErrInvalidJSON, bare.
	m.mu.Lock()
	delete(m.volumes["v"].files, metadataFileName)
	m.mu.Unlock()
	if _, err := m.ReadMetadata("v"); err != ErrNotFound {
		t.Errorf("ReadMetadata without an entry = %v, want bare ErrNotFound", err)
	}
	if err := m.WriteFiles(metadata.Metadata{VolumeID: "v"}, map[string][]byte{"metadata.json": []byte("{bad")}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ReadMetadata("v"); err != ErrInvalidJSON {
		t.Errorf("ReadMetadata of bad JSON = %v, want bare ErrInvalidJSON", err)
	}
	// RegisterMetadata over it gives the decoder's own error, as upstream's fake.
	_, err := m.RegisterMetadata(metadata.Metadata{VolumeID: "v"})
	var syntax *json.SyntaxError
	if !errors.As(err, &syntax) || errors.Is(err, ErrInvalidJSON) {
		t.Errorf("RegisterMetadata over bad JSON = %v, want the json decoder's error", err)
	}
	if err := m.RemoveVolume("never-existed"); err != nil {
		t.Errorf("RemoveVolume = %v, want nil", err)
	}
}

func TestMemoryFSWriteFilesMerges(t *testing.T) {
	m := NewMemoryFS()
	meta := metadata.Metadata{VolumeID: "v", VolumeMountGroup: "not-a-number"}
	if _, err := m.RegisterMetadata(meta); err != nil {
		t.Fatal(err)
	}
	// Any name, no fsGroup check.
	if err := m.WriteFiles(meta, map[string][]byte{"a": []byte("1"), "../odd/name": []byte("2"), "": []byte("3")}); err != nil {
		t.Fatal(err)
	}
	if err := m.WriteFiles(meta, map[string][]byte{"a": []byte("new"), "b": []byte("4")}); err != nil {
		t.Fatal(err)
	}
	got, _ := m.ReadFiles("v")
	for name, want := range map[string]string{"a": "new", "../odd/name": "2", "": "3", "b": "4"} {
		if string(got[name]) != want {
			t.Errorf("file %q = %q, want %q", name, got[name], want)
		}
	}
	if err := m.ValidateMetadata(meta); err != nil {
		t.Errorf("ValidateMetadata = %v; MemoryFS accepts every fsGroup", err)
	}
	// A file named metadata.json replaces the metadata bytes.
	if err := m.WriteFiles(meta, map[string][]byte{"metadata.json": []byte(`{"volumeID":"v","targetPath":"/new"}`)}); err != nil {
		t.Fatal(err)
	}
	if read, _ := m.ReadMetadata("v"); read.TargetPath != "/new" {
		t.Errorf("metadata after writing metadata.json = %+v", read)
	}
}

func TestMemoryFSRegisterReplacesWholeRecord(t *testing.T) {
	m := NewMemoryFS()
	meta := csiDriverMeta()
	if wrote, err := m.RegisterMetadata(meta); err != nil || !wrote {
		t.Fatalf("RegisterMetadata = %v, %v", wrote, err)
	}
	if err := m.SetMounted("vol-id"); err != nil {
		t.Fatal(err)
	}
	// nil and empty contexts are equal.
	empty := metadata.Metadata{VolumeID: "e", VolumeContext: map[string]string{}}
	if _, err := m.RegisterMetadata(empty); err != nil {
		t.Fatal(err)
	}
	if wrote, err := m.RegisterMetadata(metadata.Metadata{VolumeID: "e"}); err != nil || wrote {
		t.Errorf("nil vs empty context: RegisterMetadata = %v, %v; want false, nil", wrote, err)
	}
	changed := metadata.Metadata{VolumeID: "vol-id", TargetPath: "/other", VolumeContext: map[string]string{"x": "y"}, VolumeMountGroup: "7"}
	if wrote, err := m.RegisterMetadata(changed); err != nil || !wrote {
		t.Fatalf("RegisterMetadata with a new context = %v, %v", wrote, err)
	}
	got, _ := m.ReadMetadata("vol-id")
	want := changed
	want.Mounted = true // the flag is kept
	if !reflect.DeepEqual(got, want) {
		t.Errorf("after re-register = %+v, want %+v", got, want)
	}
}

func TestMemoryFSPathsAndListing(t *testing.T) {
	m := NewMemoryFS()
	if ids, err := m.ListVolumes(); ids != nil || err != nil {
		t.Errorf("ListVolumes of an empty store = %#v, %v; want nil, nil", ids, err)
	}
	for _, id := range []string{"csi-5f3a9d2e1c0b", "test-vol", "vol-id"} {
		if p := m.PathForVolume(id); p != id {
			t.Errorf("PathForVolume(%q) = %q, want the ID", id, p)
		}
		if _, err := m.RegisterMetadata(metadata.Metadata{VolumeID: id}); err != nil {
			t.Errorf("RegisterMetadata(%q) = %v", id, err)
		}
	}
	if ids, _ := m.ListVolumes(); len(ids) != 3 {
		t.Errorf("ListVolumes = %v", ids)
	}
}

func TestMemoryFSSetRawMetadataAppliesLegacyRule(t *testing.T) {
	m := NewMemoryFS()
	for raw, want := range map[string]bool{
		`{"volumeID":"a","targetPath":"/t","nextIssuanceTime":"2024-01-01T00:00:00Z"}`:                 true,
		`{"volumeID":"a","targetPath":"/t"}`:                                                           false,
		`{"volumeID":"a","targetPath":"/t","nextIssuanceTime":"0001-01-01T00:00:00Z"}`:                 true,
		`{"volumeID":"a","targetPath":"/t","nextIssuanceTime":"2024-01-01T00:00:00Z","mounted":false}`: false,
		`{"volumeID":"a","targetPath":"/t","mounted":true}`:                                            true,
	} {
		_ = m.RemoveVolume("a")
		if err := m.SetRawMetadata("a", []byte(raw)); err != nil {
			t.Fatal(err)
		}
		got, err := m.ReadMetadata("a")
		if err != nil || got.Mounted != want {
			t.Errorf("%s: Mounted = %v, %v; want %v", raw, got.Mounted, err, want)
		}
	}
}
