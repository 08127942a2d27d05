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
	"cmp"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/cert-manager/csi-lib/metadata"
)

var (
	// ErrNotFound is returned when a volume or one of its files does not exist.
	ErrNotFound = errors.New("not found")

	// ErrInvalidJSON is returned when stored metadata cannot be decoded.
	ErrInvalidJSON = errors.New("invalid JSON")

	// ErrInvalidVolumeID is returned when a volume ID is not a single safe path element.
	ErrInvalidVolumeID = errors.New("invalid volume ID")

	// ErrInvalidFileName is returned when a data file name breaks kubelet's rules for projected
	// files (see Filesystem.WriteFiles).
	ErrInvalidFileName = errors.New("invalid file name")

	// errNotDirectory marks a volume directory, data directory or "..data" that is not what
	// the store made (for example replaced by a symlink); the store refuses to go through it.
	errNotDirectory = errors.New("not a directory made by the store")

	// ErrInvalidFSGroup is returned when the fsGroup of a volume is not a valid group ID.
	ErrInvalidFSGroup = errors.New("invalid fsGroup")
)

// MetadataReader reads volume metadata.
type MetadataReader interface {
	// ReadMetadata returns the metadata of a volume; ErrNotFound if there is none.
	ReadMetadata(volumeID string) (metadata.Metadata, error)
	// ListVolumes returns the IDs of all stored volumes. It never modifies anything.
	ListVolumes() ([]string, error)
}

// MetadataWriter writes volume metadata.
type MetadataWriter interface {
	// WriteMetadata replaces the metadata of an existing volume (an error matching ErrNotFound
	// if the volume does not exist). A stored Mounted true is kept even if meta.Mounted is false.
	WriteMetadata(volumeID string, meta metadata.Metadata) error
	// RegisterMetadata creates the volume with meta (Mounted false) if it does not exist. If it
	// exists with a different volume context, the stored record is updated (what is kept is the
	// store's rule; Mounted always is). It reports whether it wrote. Metadata that cannot be
	// encoded is an error that changes nothing.
	RegisterMetadata(meta metadata.Metadata) (bool, error)
}

// MountRecorder is implemented by stores that can persist "this volume's publish succeeded" as
// one atomic read-modify-write of the stored metadata. The node server uses it when the store
// has it, so that recording Mounted can never overwrite a NextIssuanceTime that the renewal
// loop wrote a moment before; for other stores it falls back to ReadMetadata + WriteMetadata.
type MountRecorder interface {
	// SetMounted records that the volume's publish succeeded. The volume must exist.
	SetMounted(volumeID string) error
}

// PendingKeyStore is implemented by stores that can keep the private key of a volume's pending
// CertificateRequest beside its metadata, so that a restarted manager resumes the request
// instead of creating another. The key never goes into the data directory, so it is never
// bind-mounted into the pod; Filesystem keeps it on its tmpfs (in PlainDirectory mode it
// reaches whatever disk backs the base directory). The manager detects the interface; a store
// without it keeps pending keys in the manager's memory only. The content is opaque to the
// store.
type PendingKeyStore interface {
	// WritePendingKey atomically replaces the volume's pending key (mode 0600); ErrNotFound if
	// the volume does not exist.
	WritePendingKey(volumeID string, data []byte) error
	// ReadPendingKey returns the volume's pending key; ErrNotFound if there is none.
	ReadPendingKey(volumeID string) ([]byte, error)
	// RemovePendingKey removes the volume's pending key; removing none succeeds.
	RemovePendingKey(volumeID string) error
}

// SweptKeyStore is implemented by stores whose start-up sweep keeps the pending key of a
// never-mounted volume it removes, outside any volume directory (Filesystem: on its tmpfs, mode
// 0600). The driver was stopped during the volume's first issuance; if the pod still exists,
// kubelet publishes the same volume ID again, and the kept key lets that publish resume the
// volume's pending request instead of creating another. The manager decides what happens to a
// kept key: it moves it back into the volume when the volume ID is published again, and removes
// it once its request is gone or a grace period after start-up has passed.
type SweptKeyStore interface {
	// SweptPendingKeys returns the IDs of the volumes whose pending key a sweep kept.
	SweptPendingKeys() ([]string, error)
	// ReadSweptPendingKey returns a kept key; ErrNotFound if there is none for the volume.
	ReadSweptPendingKey(volumeID string) ([]byte, error)
	// RemoveSweptPendingKey removes a kept key; removing none succeeds.
	RemoveSweptPendingKey(volumeID string) error
}

// sweptKeysName names where a store keeps swept volumes' pending keys (Filesystem: a directory
// beside the volume directories). It is reserved: no volume may have it as its ID.
const sweptKeysName = "..swept-pending-keys"

// DataWriter writes the files of a volume.
type DataWriter interface {
	// WriteFiles writes the data files of a volume (Filesystem: the whole set at once, as a
	// projection; MemoryFS: merged into the volume's files).
	WriteFiles(meta metadata.Metadata, files map[string][]byte) error
}

// Interface is a complete volume store.
type Interface interface {
	// PathForVolume returns the directory that is bind-mounted into the pod.
	PathForVolume(volumeID string) string
	// RemoveVolume removes a volume and all its files. Removing a missing volume succeeds.
	RemoveVolume(volumeID string) error

	MetadataReader
	MetadataWriter
	DataWriter
}

// MetadataValidator is implemented by stores that can tell, before anything is written, whether
// metadata would be rejected later (for example an unparsable fsGroup).
type MetadataValidator interface {
	ValidateMetadata(meta metadata.Metadata) error
}

const (
	// maxNameLength is the longest name a Linux filesystem accepts for one path element.
	maxNameLength = 255
	// maxPathLength is the longest relative file name WriteFiles accepts (kubelet's limit).
	maxPathLength = 4096
	// maxFSGroup is the largest group ID a volume may be given (upstream's upper bound).
	maxFSGroup = 4294967295
)

// ValidateVolumeID checks that id can safely be used as one path element: valid UTF-8, not
// empty, not "." or "..", no "/" or NUL byte, at most 255 bytes, and not the name reserved for
// swept pending keys ("..swept-pending-keys"). The error wraps ErrInvalidVolumeID.
func ValidateVolumeID(id string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w %q: %s", ErrInvalidVolumeID, id, why)
	}
	switch {
	case id == "":
		return bad("must not be empty")
	case id == "." || id == "..":
		return bad("must not be '.' or '..'")
	case strings.ContainsRune(id, '/'):
		return bad("must not contain '/'")
	case strings.ContainsRune(id, 0):
		return bad("must not contain a NUL byte")
	case len(id) > maxNameLength:
		return bad(fmt.Sprintf("must be at most %d bytes, is %d", maxNameLength, len(id)))
	case !utf8.ValidString(id):
		// Metadata is JSON: an invalid byte would come back as U+FFFD, naming another volume.
		return bad("must be valid UTF-8")
	case id == sweptKeysName:
		return bad("is reserved for the pending keys the start-up sweep keeps")
	}
	return nil
}

// cleanFilePath checks a WriteFiles name against kubelet's rules for projected files and
// returns it cleaned ("./a" is "a", "a//b" is "a/b"): not empty, relative, no ".." element,
// every element at most 255 bytes, at most 4096 bytes in all, and a first element that does not
// start with ".." unless it is two characters or shorter ("..data" and "...x" are reserved for
// the projection). The error wraps ErrInvalidFileName.
func cleanFilePath(name string) (string, error) {
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("%w %q: %s", ErrInvalidFileName, name, why)
	}
	switch {
	case name == "":
		return bad("must not be empty")
	case strings.ContainsRune(name, 0):
		return bad("must not contain a NUL byte")
	case len(name) > maxPathLength:
		return bad(fmt.Sprintf("must be at most %d bytes", maxPathLength))
	case filepath.IsAbs(name):
		return bad("must be relative")
	}
	for _, elem := range strings.Split(name, "/") {
		if elem == ".." {
			return bad("must not contain '..'")
		}
		if len(elem) > maxNameLength {
			return bad(fmt.Sprintf("each element must be at most %d bytes", maxNameLength))
		}
	}
	clean := filepath.Clean(name)
	if clean == "." {
		return bad("must name a file")
	}
	if first, _, _ := strings.Cut(clean, "/"); len(first) > 2 && strings.HasPrefix(first, "..") {
		return bad("names starting with '..' are reserved")
	}
	return clean, nil
}

// fsGroupOf returns the group that should own a volume's data, or nil for none, as upstream
// decides it: the value of the volume attribute attrKey when attrKey is set and the value is not
// empty, else VolumeMountGroup; empty means no group. The value is a base-10 integer from 1 to
// 4294967295. The error names the attribute key (as upstream's does, even when the value came
// from VolumeMountGroup) and wraps ErrInvalidFSGroup.
func fsGroupOf(meta metadata.Metadata, attrKey string) (*int64, error) {
	value := meta.VolumeMountGroup
	if attrKey != "" {
		value = cmp.Or(meta.VolumeContext[attrKey], value)
	}
	if value == "" {
		return nil, nil
	}
	gid, err := strconv.ParseInt(value, 10, 64)
	if err != nil || gid < 1 || gid > maxFSGroup {
		return nil, fmt.Errorf("%w: failed to parse %q, value %q must be an integer from 1 to %d", ErrInvalidFSGroup, attrKey, value, maxFSGroup)
	}
	return &gid, nil
}
