// Package api holds the names the library puts on Kubernetes objects, shared by the manager,
// the metrics and the tests.
package api

const (
	// NodeIDHashLabelKey labels every CertificateRequest with the hash of the node that created
	// it (see util.HashIdentifier); the manager's informer selects on it.
	NodeIDHashLabelKey = "csi.cert-manager.io/node-id-hash"

	// VolumeIDHashLabelKey labels every CertificateRequest with the hash of its volume's ID.
	VolumeIDHashLabelKey = "csi.cert-manager.io/volume-id-hash"
)
