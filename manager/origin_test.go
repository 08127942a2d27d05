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
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cert-manager/csi-lib/approval"
	"github.com/cert-manager/csi-lib/metadata"
)

// TestRequestsNameTheirNodeAndPod: every request carries this node's name and the pod's
// namespace, name and UID from the volume context, beside the bundle's own annotations, which
// are copied, never changed.
func TestRequestsNameTheirNodeAndPod(t *testing.T) {
	bundleAnnotations := map[string]string{"a": "b", approval.PodNameAnnotationKey: "pod-v1"}
	e := newEnv(t, nil)
	generate := e.opts.GenerateRequest
	e.opts.GenerateRequest = func(meta metadata.Metadata) (*CertificateRequestBundle, error) {
		b, err := generate(meta)
		if err == nil {
			b.Annotations = bundleAnnotations
		}
		return b, err
	}
	e.register("v1", false)
	e.start()
	e.manageInBackground("v1")
	req := e.waitForPending()
	want := map[string]string{
		"a":                                "b",
		approval.NodeNameAnnotationKey:     "test-node",
		approval.PodNamespaceAnnotationKey: "ns",
		approval.PodNameAnnotationKey:      "pod-v1",
		approval.PodUIDAnnotationKey:       "uid-v1",
	}
	if !maps.Equal(req.Annotations, want) {
		t.Errorf("annotations = %v, want %v", req.Annotations, want)
	}
	if len(bundleAnnotations) != 2 {
		t.Errorf("the bundle's map was changed: %v", bundleAnnotations)
	}
	claim, err := approval.ClaimOf(req)
	if err != nil || claim.PodUID != req.OwnerReferences[0].UID {
		t.Errorf("the claim %+v (%v) does not name the request's owner %+v", claim, err, req.OwnerReferences[0])
	}
}

// TestRequestsWithoutPodContextNameTheNodeOnly: a volume context without the pod's keys (as
// upstream's tests send) adds the node's name alone.
func TestRequestsWithoutPodContextNameTheNodeOnly(t *testing.T) {
	e := newEnv(t, nil)
	if _, err := e.store.RegisterMetadata(metadata.Metadata{VolumeID: "v1"}); err != nil {
		t.Fatal(err)
	}
	e.start()
	e.manageInBackground("v1")
	req := e.waitForPending()
	if want := map[string]string{"a": "b", approval.NodeNameAnnotationKey: "test-node"}; !maps.Equal(req.Annotations, want) {
		t.Errorf("annotations = %v, want %v", req.Annotations, want)
	}
}

// TestBundleNamingAnotherPodIsRefused: a bundle that sets one of the origin keys to another value
// than the request's own gets an error naming the key, and nothing is created.
func TestBundleNamingAnotherPodIsRefused(t *testing.T) {
	for _, key := range []string{approval.NodeNameAnnotationKey, approval.PodNamespaceAnnotationKey, approval.PodNameAnnotationKey, approval.PodUIDAnnotationKey} {
		t.Run(key, func(t *testing.T) {
			e := newEnv(t, nil)
			generate := e.opts.GenerateRequest
			e.opts.GenerateRequest = func(meta metadata.Metadata) (*CertificateRequestBundle, error) {
				b, err := generate(meta)
				if err == nil {
					b.Annotations = map[string]string{key: "someone-else"}
				}
				return b, err
			}
			e.register("v1", false)
			m := e.start()
			// Bounded: without the refusal the publish would wait for a signer that never comes.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := m.ManageVolumeImmediate(ctx, "v1")
			if err == nil || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), `"someone-else"`) {
				t.Fatalf("ManageVolumeImmediate: %v, want an error naming %s", err, key)
			}
			list, err := e.client.CertmanagerV1().CertificateRequests("ns").List(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(list.Items) != 0 {
				t.Errorf("%d requests created", len(list.Items))
			}
		})
	}
}
