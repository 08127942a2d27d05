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

package podspec_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cert-manager/csi-lib/approval/podspec"
	"github.com/cert-manager/csi-lib/manager"
	"github.com/cert-manager/csi-lib/metadata"
)

// An approver passes the driver's own manager.GenerateRequestFunc, as the driver passes it to
// manager.Options.GenerateRequest. Here the driver asks for the pod's name as its DNS name; a
// request that adds another is denied.
func ExampleRule() {
	var generateRequest manager.GenerateRequestFunc = func(meta metadata.Metadata) (*manager.CertificateRequestBundle, error) {
		name := meta.VolumeContext[metadata.PodNameVolumeContextKey] + "." + meta.VolumeContext[metadata.PodNamespaceVolumeContextKey]
		return &manager.CertificateRequestBundle{
			Request:   &x509.CertificateRequest{DNSNames: []string{name}},
			Namespace: meta.VolumeContext[metadata.PodNamespaceVolumeContextKey],
			IssuerRef: cmmeta.IssuerReference{Kind: "ClusterIssuer", Name: meta.VolumeContext["csi.example.com/issuer-name"]},
		}, nil
	}
	rule := podspec.Rule(podspec.Options{DriverName: "csi.example.com"}, generateRequest)

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web", UID: "1f7c"},
		Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
			Driver: "csi.example.com", VolumeAttributes: map[string]string{"csi.example.com/issuer-name": "csi-ca"},
		}}}}},
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	for _, names := range [][]string{{"web.apps"}, {"web.apps", "evil.example"}} {
		der, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{}, DNSNames: names}, key)
		req := &cmapi.CertificateRequest{
			ObjectMeta: metav1.ObjectMeta{Namespace: "apps"},
			Spec: cmapi.CertificateRequestSpec{
				Request:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
				Duration:  &metav1.Duration{},
				IssuerRef: cmmeta.IssuerReference{Kind: "ClusterIssuer", Name: "csi-ca"},
			},
		}
		if reason := rule(req, pod); reason != "" {
			fmt.Printf("%v: deny: %s\n", names, reason)
		} else {
			fmt.Printf("%v: approve\n", names)
		}
	}
	// Output:
	// [web.apps]: approve
	// [web.apps evil.example]: deny: dns name evil.example is not asked for by any volume of pod apps/web
}
