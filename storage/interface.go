package storage

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/cert-manager/csi-lib/metadata"
)

var (
	// ErrNotFound is returned when a volume or one of its files does not exist.
	ErrNotFound = errors.New("not found")

	// ErrInvalidJSON is returned when stored metadata cannot be decoded.
	ErrInvalidJSON = errors.New("invalid JSON")

	// ErrInvalidVolumeID is returned when a volume ID is not a single safe path element.
	ErrInvalidVolumeID = errors.New("invalid volume ID")

	// ErrInvalidFileName is returned when a data file name is not a single safe path element.
	ErrInvalidFileName = errors.New("invalid file name")

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
	// WriteMetadata replaces the metadata of an existing volume (ErrNotFound if the volume does
	// not exist). A stored Mounted true is kept even if meta.Mounted is false.
	WriteMetadata(volumeID string, meta metadata.Metadata) error
	// RegisterMetadata creates the volume with meta (Mounted false) if it does not exist, or
	// rewrites its metadata if the volume context changed, keeping the stored NextIssuanceTime
	// and Mounted. It reports whether it wrote.
	RegisterMetadata(meta metadata.Metadata) (bool, error)
}

// DataWriter writes the files of a volume.
type DataWriter interface {
	// WriteFiles replaces the whole set of data files of a volume at once.
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

// maxNameLength is the longest name a Linux filesystem accepts for one path element.
const maxNameLength = 255

// ValidateVolumeID checks that id can safely be used as one path element: not empty, not "." or
// "..", no "/" or NUL byte, at most 255 bytes. The error wraps ErrInvalidVolumeID.
func ValidateVolumeID(id string) error {
	if err := validateName(id); err != nil {
		return fmt.Errorf("%w %q: %s", ErrInvalidVolumeID, id, err)
	}
	return nil
}

func validateFileName(name string) error {
	if err := validateName(name); err != nil {
		return fmt.Errorf("%w %q: %s", ErrInvalidFileName, name, err)
	}
	if strings.HasPrefix(name, "..") {
		return fmt.Errorf("%w %q: names starting with '..' are reserved", ErrInvalidFileName, name)
	}
	return nil
}

func validateName(s string) error {
	switch {
	case s == "":
		return errors.New("must not be empty")
	case s == "." || s == "..":
		return errors.New("must not be '.' or '..'")
	case strings.ContainsRune(s, '/'):
		return errors.New("must not contain '/'")
	case strings.ContainsRune(s, 0):
		return errors.New("must not contain a NUL byte")
	case len(s) > maxNameLength:
		return fmt.Errorf("must be at most %d bytes, is %d", maxNameLength, len(s))
	}
	return nil
}

// fsGroupOf returns the group that should own a volume's data, or nil for none: the integer
// value of the volume attribute attrKey when attrKey is set and present in the volume context,
// else the VolumeMountGroup. An unparsable or out-of-range value wraps ErrInvalidFSGroup.
func fsGroupOf(meta metadata.Metadata, attrKey string) (*int64, error) {
	value, source := meta.VolumeMountGroup, "volumeMountGroup"
	if attrKey != "" {
		if v, ok := meta.VolumeContext[attrKey]; ok {
			value, source = v, "volume attribute "+attrKey
		}
	}
	if value == "" {
		return nil, nil
	}
	gid, err := strconv.ParseInt(value, 10, 64)
	if err != nil || gid < 0 || gid > math.MaxInt32 {
		return nil, fmt.Errorf("%w %q in %s: must be an integer from 0 to %d", ErrInvalidFSGroup, value, source, math.MaxInt32)
	}
	return &gid, nil
}

// keepMonotonic returns meta with the fields that must not regress taken from stored: Mounted
// never goes from true to false.
func keepMonotonic(meta, stored metadata.Metadata) metadata.Metadata {
	if stored.Mounted {
		meta.Mounted = true
	}
	return meta
}

// registerMerge decides what RegisterMetadata writes over existing metadata: the new request's
// fields with the stored NextIssuanceTime and Mounted. It reports false when nothing changed
// that is worth a write (the volume context is the same).
func registerMerge(meta, stored metadata.Metadata) (metadata.Metadata, bool) {
	if volumeContextEqual(meta.VolumeContext, stored.VolumeContext) {
		return stored, false
	}
	meta.NextIssuanceTime = stored.NextIssuanceTime
	meta.Mounted = stored.Mounted
	return meta, true
}

func volumeContextEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}
