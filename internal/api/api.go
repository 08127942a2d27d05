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
