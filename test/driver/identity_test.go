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

package driver_test

import (
	"encoding/base64"
	"encoding/json"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cert-manager/csi-lib/approval"
	"github.com/cert-manager/csi-lib/metadata"
	testdriver "github.com/cert-manager/csi-lib/test/driver"
)

// TestRequestsNameThePodsServiceAccount: a publish whose volume context names the pod's service
// account (kubelet's serviceAccount.name) and holds the pod's token (a CSIDriver with
// tokenRequests) creates a request that names the account and the UID the token gives, beside
// the pod's names; without the token, the name alone.
func TestRequestsNameThePodsServiceAccount(t *testing.T) {
	payload, err := json.Marshal(map[string]any{"kubernetes.io": map[string]any{
		"namespace": namespace, "serviceaccount": map[string]string{"name": "web", "uid": "sa-uid"},
		"pod": map[string]string{"name": "pod-v1", "uid": "uid-v1"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	token := "e30." + base64.RawURLEncoding.EncodeToString(payload) + ".c2ln"
	for _, tc := range []struct {
		name    string
		token   bool
		wantUID string
	}{{"with the pod's token", true, "sa-uid"}, {"without a token", false, ""}} {
		t.Run(tc.name, func(t *testing.T) {
			o := testdriver.Options{NodeID: "node-a"}
			_, opts, cl := runWithRealIssuance(t, o)
			req := publishRequest(t, "v1")
			req.VolumeContext[metadata.ServiceAccountNameVolumeContextKey] = "web"
			if tc.token {
				req.VolumeContext[metadata.SATokenVolumeContextKey] = `{"":{"token":"` + token + `","expirationTimestamp":"2030-01-01T00:00:00Z"}}`
			}
			go func() { _, _ = cl.NodePublishVolume(ctxWithTimeout(t, pollTimeout), req) }()
			waitForRequest(t, opts)
			list, err := opts.Client.CertmanagerV1().CertificateRequests(namespace).List(ctxWithTimeout(t, pollTimeout), metav1.ListOptions{})
			if err != nil || len(list.Items) != 1 {
				t.Fatalf("%d requests, %v", len(list.Items), err)
			}
			claim, err := approval.ClaimOf(&list.Items[0])
			if err != nil {
				t.Fatal(err)
			}
			want := approval.Claim{NodeName: "node-a", PodNamespace: namespace, PodName: "pod-v1", PodUID: "uid-v1", ServiceAccountName: "web", ServiceAccountUID: types.UID(tc.wantUID)}
			if claim != want {
				t.Errorf("claim %+v, want %+v", claim, want)
			}
			if _, set := list.Items[0].Annotations[approval.PodServiceAccountUIDAnnotationKey]; set != (tc.wantUID != "") {
				t.Errorf("annotations %v", list.Items[0].Annotations)
			}
		})
	}
}
