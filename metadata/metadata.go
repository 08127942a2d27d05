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

// Package metadata defines the record that the library keeps for every volume it manages: the
// NodePublishVolume request that created it, when its certificate is next due, and whether a
// publish of it has ever succeeded.
//
// json.Marshal of a Metadata gives upstream csi-lib's bytes exactly while Mounted is false (the
// "mounted" key is omitted then), so drivers' tests that compare metadata bytes keep passing.
// A JSON round trip is lossless. How a store tells a volume mounted before this field existed
// (no "mounted" key on disk) is the store's business: see package storage.
package metadata

import (
	"maps"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// SATokenVolumeContextKey is the volume-context key under which kubelet passes the pod's
// service-account tokens. Its value is a secret: it is never logged.
const SATokenVolumeContextKey = "csi.storage.k8s.io/serviceAccount.tokens"

// Volume-context keys kubelet sets on a NodePublishVolume request: the pod's name, namespace,
// UID and service account name (with the CSIDriver object's podInfoOnMount) and whether the
// volume is a CSI inline ephemeral volume.
const (
	PodNameVolumeContextKey            = "csi.storage.k8s.io/pod.name"
	PodNamespaceVolumeContextKey       = "csi.storage.k8s.io/pod.namespace"
	PodUIDVolumeContextKey             = "csi.storage.k8s.io/pod.uid"
	ServiceAccountNameVolumeContextKey = "csi.storage.k8s.io/serviceAccount.name"
	EphemeralVolumeContextKey          = "csi.storage.k8s.io/ephemeral"
)

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
	// goes from false to true in a volume's life. It is omitted from the JSON while false, so
	// that the bytes equal upstream's; the Filesystem store writes it explicitly on disk.
	Mounted bool `json:"mounted,omitempty"`
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

// MarshalLog implements logr.Marshaler: loggers print the metadata with its service-account
// token value replaced by "[REDACTED]". Without a token it returns m itself (same map); with one
// it returns a copy whose volume context is a new map, so m is never modified. Loggers call
// MarshalLog once, so returning a Metadata does not recurse.
func (m Metadata) MarshalLog() any {
	if _, ok := m.VolumeContext[SATokenVolumeContextKey]; ok {
		m.VolumeContext = RedactVolumeContext(m.VolumeContext)
	}
	return m
}

// RedactVolumeContext returns a copy of a volume context with the service-account token value
// replaced by "[REDACTED]". The input is not modified.
func RedactVolumeContext(volumeContext map[string]string) map[string]string {
	out := maps.Clone(volumeContext)
	if _, ok := out[SATokenVolumeContextKey]; ok {
		out[SATokenVolumeContextKey] = Redacted
	}
	return out
}
