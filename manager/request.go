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

package manager

import (
	"fmt"
	"maps"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/cert-manager/csi-lib/internal/api"
	"github.com/cert-manager/csi-lib/internal/api/util"
	"github.com/cert-manager/csi-lib/internal/origin"
	"github.com/cert-manager/csi-lib/metadata"
)

// newRequest makes a volume's CertificateRequest from the driver's bundle: the node and volume
// hash labels, the bundle's
// annotations with the node's and the pod's names added (see originAnnotations), the bundle's
// spec, Duration always set, and exactly one owner reference to the pod (name and UID from the
// volume context, even if empty), so that the garbage collector deletes the request with the
// pod. CreationTimestamp is left to the apiserver.
func (m *Manager) newRequest(meta metadata.Metadata, bundle *CertificateRequestBundle, csrPEM []byte) (*cmapi.CertificateRequest, error) {
	annotations, err := m.originAnnotations(meta, bundle.Annotations)
	if err != nil {
		return nil, err
	}
	return &cmapi.CertificateRequest{
		ObjectMeta: metav1.ObjectMeta{
			Name:        string(uuid.NewUUID()),
			Namespace:   bundle.Namespace,
			Annotations: annotations,
			Labels: map[string]string{
				api.NodeIDHashLabelKey:   m.nodeHash,
				api.VolumeIDHashLabelKey: util.HashIdentifier(meta.VolumeID),
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1",
				Kind:       "Pod",
				Name:       meta.VolumeContext[metadata.PodNameVolumeContextKey],
				UID:        types.UID(meta.VolumeContext[metadata.PodUIDVolumeContextKey]),
			}},
		},
		Spec: cmapi.CertificateRequestSpec{
			Duration:  &metav1.Duration{Duration: bundle.Duration},
			Request:   csrPEM,
			IsCA:      bundle.IsCA,
			Usages:    bundle.Usages,
			IssuerRef: bundle.IssuerRef,
		},
	}, nil
}

// originAnnotations returns a copy of the bundle's annotations with the request's origin added,
// so that the apiserver (examples/deploy/node-bound-policy.yaml) and an approver (package
// approval) can check it: this node's name, and the pod's namespace, name, UID and service
// account (its UID read from the pod's token) from the volume context (each only when there). A
// bundle may set one of these keys only to the same value: a request naming another node or pod
// than its own is refused here, before anything is created. With DisableOriginAnnotations it returns
// the copy alone.
func (m *Manager) originAnnotations(meta metadata.Metadata, fromBundle map[string]string) (map[string]string, error) {
	annotations := make(map[string]string, len(fromBundle)+4)
	maps.Copy(annotations, fromBundle)
	if m.opts.DisableOriginAnnotations {
		return annotations, nil
	}
	for _, origin := range []struct{ key, value string }{
		{origin.NodeNameAnnotationKey, m.opts.NodeID},
		{origin.PodNamespaceAnnotationKey, meta.VolumeContext[metadata.PodNamespaceVolumeContextKey]},
		{origin.PodNameAnnotationKey, meta.VolumeContext[metadata.PodNameVolumeContextKey]},
		{origin.PodUIDAnnotationKey, meta.VolumeContext[metadata.PodUIDVolumeContextKey]},
		{origin.PodServiceAccountAnnotationKey, meta.VolumeContext[metadata.ServiceAccountNameVolumeContextKey]},
		{origin.PodServiceAccountUIDAnnotationKey, origin.ServiceAccountUID(meta.VolumeContext)},
	} {
		if origin.value == "" {
			continue
		}
		if v, set := annotations[origin.key]; set && v != origin.value {
			return nil, fmt.Errorf("generating certificate request: the bundle's annotation %s is %q, but this request's is %q: the key is the library's", origin.key, v, origin.value)
		}
		annotations[origin.key] = origin.value
	}
	return annotations, nil
}
