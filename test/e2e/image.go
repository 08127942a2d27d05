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
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"time"
)

// No registry can be reached here: the node's one image (pause binary and test binaries) is
// written as an OCI image layout archive and imported into containerd with `ctr images import`.

// imageFile is one file of the image's single layer.
type imageFile struct {
	name string // path in the image, without a leading slash
	data []byte
}

// writeImageArchive writes an OCI image layout archive holding one image named name (a full
// reference such as csi-lib.local/e2e:v1), with files in one uncompressed layer and entrypoint
// as its default command.
func writeImageArchive(archivePath, name string, files []imageFile, entrypoint []string) error {
	layer, err := tarOf(files, 0o755)
	if err != nil {
		return err
	}
	layerDigest := digest(layer)
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"config": map[string]any{
			"Entrypoint": entrypoint,
			"Env":        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	if err != nil {
		return err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        descriptor("application/vnd.oci.image.config.v1+json", config, nil),
		"layers":        []any{descriptor("application/vnd.oci.image.layer.v1.tar", layer, nil)},
	})
	if err != nil {
		return err
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests": []any{descriptor("application/vnd.oci.image.manifest.v1+json", manifest, map[string]string{
			"io.containerd.image.name":          name,
			"org.opencontainers.image.ref.name": name,
		})},
	})
	if err != nil {
		return err
	}
	layout := []imageFile{
		{name: "oci-layout", data: []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{name: "index.json", data: index},
	}
	for _, blob := range [][]byte{layer, config, manifest} {
		layout = append(layout, imageFile{name: "blobs/sha256/" + digest(blob)[len("sha256:"):], data: blob})
	}
	archive, err := tarOf(layout, 0o644)
	if err != nil {
		return err
	}
	return os.WriteFile(archivePath, archive, 0o644)
}

// descriptor is an OCI content descriptor of blob.
func descriptor(mediaType string, blob []byte, annotations map[string]string) map[string]any {
	d := map[string]any{"mediaType": mediaType, "digest": digest(blob), "size": len(blob)}
	if annotations != nil {
		d["annotations"] = annotations
	}
	return d
}

func digest(blob []byte) string {
	sum := sha256.Sum256(blob)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// tarOf returns a tar stream of files (with their parent directories), each with mode.
func tarOf(files []imageFile, mode int64) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	dirs := map[string]bool{}
	for _, f := range files {
		var parents []string
		for dir := path.Dir(f.name); dir != "." && !dirs[dir]; dir = path.Dir(dir) {
			dirs[dir] = true
			parents = append(parents, dir)
		}
		for i := len(parents) - 1; i >= 0; i-- {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: parents[i] + "/", Mode: 0o755, ModTime: epoch}); err != nil {
				return nil, err
			}
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: mode, Size: int64(len(f.data)), ModTime: epoch}); err != nil {
			return nil, fmt.Errorf("archiving %s: %w", f.name, err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
