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

package approval_test

import (
	"context"
	"fmt"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cert-manager/csi-lib/approval"
)

// An approver checks a request csi-lib created against the pod it names. Here the pod runs on
// node-a; a request from node-b's driver naming it is denied.
func ExampleCheck() {
	pods := map[string]*corev1.Pod{"apps/web": {
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web", UID: "1f7c"},
		Spec:       corev1.PodSpec{NodeName: "node-a", ServiceAccountName: "web"},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}}
	// In an approver: a client's or a lister's Get, returning a NotFound error for no pod.
	getPod := func(_ context.Context, namespace, name string) (*corev1.Pod, error) {
		return pods[namespace+"/"+name], nil
	}
	for _, node := range []string{"node-a", "node-b"} {
		req := &cmapi.CertificateRequest{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
			approval.NodeNameAnnotationKey:          node,
			approval.PodNamespaceAnnotationKey:      "apps",
			approval.PodNameAnnotationKey:           "web",
			approval.PodUIDAnnotationKey:            "1f7c",
			approval.PodServiceAccountAnnotationKey: "web",
		}}}
		verdict, err := approval.Check(context.Background(), req, getPod)
		if err != nil {
			fmt.Println("no decision:", err)
			continue
		}
		if verdict.Approve {
			fmt.Printf("from %s: approve\n", node)
		} else {
			fmt.Printf("from %s: deny: %s\n", node, verdict.Reason)
		}
	}
	// Output:
	// from node-a: approve
	// from node-b: deny: pod apps/web is bound to node node-a, not to node-b
}
