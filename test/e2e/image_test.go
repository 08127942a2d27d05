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

package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// untar returns the regular files of a tar stream by name.
func untar(t *testing.T, data []byte) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			b, _ := io.ReadAll(tr)
			out[h.Name] = b
		}
	}
}

type ociDescriptor struct {
	Digest      string            `json:"digest"`
	Size        int               `json:"size"`
	Annotations map[string]string `json:"annotations"`
}

// blob returns the blob a descriptor names, checking its digest and size.
func blob(t *testing.T, files map[string][]byte, d ociDescriptor) []byte {
	t.Helper()
	b, ok := files["blobs/sha256/"+d.Digest[len("sha256:"):]]
	if !ok || digest(b) != d.Digest || len(b) != d.Size {
		t.Fatalf("blob %s missing or not matching its descriptor", d.Digest)
	}
	return b
}

// TestImageArchiveIsAnOCILayout: the archive containerd imports is an OCI image layout whose
// index names the image, whose blobs match their digests, and whose one layer holds the files
// with their entrypoint.
func TestImageArchiveIsAnOCILayout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "image.tar")
	if err := writeImageArchive(path, "example.local/img:v1", []imageFile{{name: "pause", data: []byte("P")}, {name: "bin/checker", data: []byte("C")}}, []string{"/pause"}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	files := untar(t, data)
	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Fatalf("oci-layout = %q", files["oci-layout"])
	}
	var index struct{ Manifests []ociDescriptor }
	if err := json.Unmarshal(files["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v, %+v", err, index)
	}
	if got := index.Manifests[0].Annotations["io.containerd.image.name"]; got != "example.local/img:v1" {
		t.Fatalf("image name = %q", got)
	}
	var manifest struct {
		Config ociDescriptor
		Layers []ociDescriptor
	}
	if err := json.Unmarshal(blob(t, files, index.Manifests[0]), &manifest); err != nil || len(manifest.Layers) != 1 {
		t.Fatalf("manifest: %v, %+v", err, manifest)
	}
	layer := blob(t, files, manifest.Layers[0])
	var config struct {
		Config struct{ Entrypoint []string }
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	if err := json.Unmarshal(blob(t, files, manifest.Config), &config); err != nil {
		t.Fatal(err)
	}
	if len(config.Config.Entrypoint) != 1 || config.Config.Entrypoint[0] != "/pause" || len(config.RootFS.DiffIDs) != 1 || config.RootFS.DiffIDs[0] != digest(layer) {
		t.Fatalf("config = %+v", config)
	}
	content := untar(t, layer)
	if string(content["pause"]) != "P" || string(content["bin/checker"]) != "C" {
		t.Fatalf("layer holds %v", content)
	}
}
