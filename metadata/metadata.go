// Package metadata defines the record that the library keeps for every volume it manages: the
// NodePublishVolume request that created it, when its certificate is next due, and whether a
// publish of it has ever succeeded.
//
// The JSON form is persisted by the storage package and must keep loading across versions.
// Metadata written before the Mounted field existed has no "mounted" key; decoding treats such a
// volume as mounted exactly when NextIssuanceTime is set (upstream's old rule), so that an
// upgrade neither drops live volumes nor resurrects dead ones. That rule lives in
// (*Metadata).UnmarshalJSON, the one place every store decodes through.
package metadata

import (
	"encoding/json"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// SATokenVolumeContextKey is the volume-context key under which kubelet passes the pod's
// service-account tokens. Its value is a secret: it is never logged.
const SATokenVolumeContextKey = "csi.storage.k8s.io/serviceAccount.tokens"

// Metadata is the persisted state of one volume.
type Metadata struct {
	// VolumeID is the unique ID of the volume, as given by kubelet.
	VolumeID string `json:"volumeID"`

	// TargetPath is the path in the pod's filesystem that the volume is bind-mounted at.
	TargetPath string `json:"targetPath"`

	// NextIssuanceTime is when the certificate should next be (re-)issued. Nil means the volume
	// has never been issued a certificate.
	NextIssuanceTime *time.Time `json:"nextIssuanceTime,omitempty"`

	// VolumeContext is the volume context of the NodePublishVolume request.
	VolumeContext map[string]string `json:"volumeContext,omitempty"`

	// VolumeMountGroup is the group ID kubelet asked the volume to be accessible to (fsGroup).
	VolumeMountGroup string `json:"volumeMountGroup,omitempty"`

	// Mounted is true once a NodePublishVolume call for this volume has succeeded. It only ever
	// goes from false to true. It is always written, so that an absent key identifies metadata
	// written before this field existed.
	Mounted bool `json:"mounted"`
}

// UnmarshalJSON decodes metadata, applying the upgrade rule for files without a "mounted" key:
// such a volume counts as mounted exactly when NextIssuanceTime is set.
func (m *Metadata) UnmarshalJSON(data []byte) error {
	// plain has Metadata's fields but not its methods, so decoding into it does not recurse.
	type plain Metadata
	var aux struct {
		plain
		// Mounted shadows plain.Mounted (a shallower field wins) so an absent key is visible.
		Mounted *bool `json:"mounted"`
	}
	if err := json.Unmarshal(data, &aux); err != nil {
		return err
	}
	*m = Metadata(aux.plain)
	if aux.Mounted != nil {
		m.Mounted = *aux.Mounted
	} else {
		m.Mounted = m.NextIssuanceTime != nil
	}
	return nil
}

// FromNodePublishVolumeRequest builds the metadata of a new volume from a publish request: volume
// ID, target path, volume context and the mount capability's volume mount group. NextIssuanceTime
// is nil and Mounted is false.
func FromNodePublishVolumeRequest(request *csi.NodePublishVolumeRequest) Metadata {
	return Metadata{
		VolumeID:         request.GetVolumeId(),
		TargetPath:       request.GetTargetPath(),
		VolumeContext:    request.GetVolumeContext(),
		VolumeMountGroup: request.GetVolumeCapability().GetMount().GetVolumeMountGroup(),
	}
}

// Redacted is the value that replaces secrets in log output.
const Redacted = "[REDACTED]"

// MarshalLog implements logr.Marshaler: loggers print a copy of the metadata whose
// service-account token value is replaced by "[REDACTED]".
func (m Metadata) MarshalLog() any {
	type plain Metadata // without methods, so a logger does not call MarshalLog again
	out := plain(m)
	out.VolumeContext = RedactVolumeContext(m.VolumeContext)
	return out
}

// RedactVolumeContext returns a copy of a volume context with the service-account token value
// replaced by "[REDACTED]". The input is not modified.
func RedactVolumeContext(volumeContext map[string]string) map[string]string {
	if volumeContext == nil {
		return nil
	}
	out := make(map[string]string, len(volumeContext))
	for k, v := range volumeContext {
		if k == SATokenVolumeContextKey {
			v = Redacted
		}
		out[k] = v
	}
	return out
}
