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

package plugin

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/fake"
	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cert-manager/csi-lib/approval"
	"github.com/cert-manager/csi-lib/approval/podspec"
	"github.com/cert-manager/csi-lib/manager"
	"github.com/cert-manager/csi-lib/metadata"
	testdriver "github.com/cert-manager/csi-lib/test/driver"
)

// twoVolumePod runs on node-a as service account web with two volumes of the example driver:
// tls (the default issuer, the pod's service DNS name) and svid (an Issuer of its own, a
// SPIFFE ID and no common name, 30 minutes).
func twoVolumePod() *corev1.Pod {
	vol := func(name string, attrs map[string]string) corev1.Volume {
		readOnly := true
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "csi.example.com", ReadOnly: &readOnly, VolumeAttributes: attrs}}}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web", UID: "5e1f"},
		Spec: corev1.PodSpec{NodeName: "node-a", ServiceAccountName: "web", Volumes: []corev1.Volume{
			vol("tls", map[string]string{DNSNamesAttribute: "${POD_NAME}.${POD_NAMESPACE}.svc"}),
			vol("svid", map[string]string{
				IssuerKindAttribute: "Issuer", IssuerNameAttribute: "spiffe-ca", DurationAttribute: "30m", CommonNameAttribute: "",
				URISANsAttribute: "spiffe://cluster.local/ns/${POD_NAMESPACE}/sa/${SERVICE_ACCOUNT_NAME}",
			}),
		}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// TestItsApproverApprovesWhatItRequests: the requests the example driver makes through the
// library's manager, for each volume of a pod with two (other issuers, other names), as kubelet
// publishes them, are approved by approval.Check with podspec.Rule on the driver's own
// RequestFor (what the example approver runs with --pod-spec-driver); the SPIFFE-shaped one by
// approval.SPIFFERule too. The same requests asking for more are denied, naming what.
func TestItsApproverApprovesWhatItRequests(t *testing.T) {
	pod := twoVolumePod()
	defaultIssuer := cmmeta.IssuerReference{Kind: "ClusterIssuer", Name: "csi-ca", Group: "cert-manager.io"}
	client := fake.NewSimpleClientset()
	_, node, stop := testdriver.Run(t, testdriver.Options{
		Client:             client,
		NodeID:             "node-a",
		GeneratePrivateKey: generateKey,
		GenerateRequest:    RequestFor(defaultIssuer),
		SignRequest:        signCSR,
	})
	defer stop()

	// kubelet's publishes, with the metadata rebuilt from the pod (what the approver rebuilds):
	// the test's own rebuild is checked against kubelet's code by package podspec's tests.
	kubeletRoot := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	vols := podspec.VolumesOf(pod, "csi.example.com", kubeletRoot)
	for _, v := range vols {
		go func() {
			_, _ = node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
				VolumeId: v.Metadata.VolumeID, TargetPath: v.Metadata.TargetPath, VolumeContext: v.Metadata.VolumeContext, Readonly: true,
				VolumeCapability: &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}},
			})
		}()
	}
	var reqs []cmapi.CertificateRequest
	for deadline := time.Now().Add(30 * time.Second); len(reqs) < len(vols); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests created, want %d", len(reqs), len(vols))
		}
		list, err := client.CertmanagerV1().CertificateRequests("apps").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		reqs = list.Items
	}

	getPod := func(context.Context, string, string) (*corev1.Pod, error) { return pod, nil }
	specRule := podspec.Rule(podspec.Options{DriverName: "csi.example.com", KubeletRootDir: kubeletRoot}, RequestFor(defaultIssuer))
	spiffe := approval.SPIFFERule("cluster.local")
	check := func(req *cmapi.CertificateRequest, rules ...approval.PodRule) approval.Verdict {
		t.Helper()
		v, err := approval.Check(ctx, req, getPod, rules...)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	var svid *cmapi.CertificateRequest
	for i := range reqs {
		req := &reqs[i]
		if sa := req.Annotations[approval.PodServiceAccountAnnotationKey]; sa != "web" {
			t.Errorf("request %s names service account %q, want the pod's", req.Name, sa)
		}
		if v := check(req, specRule); !v.Approve {
			t.Errorf("request for issuer %s: %s", req.Spec.IssuerRef.Name, v.Reason)
		}
		if req.Spec.IssuerRef.Name == "spiffe-ca" {
			svid = req
		}
	}
	if svid == nil {
		t.Fatal("no request of the svid volume")
	}
	if v := check(svid, specRule, spiffe); !v.Approve {
		t.Errorf("the SVID with both rules: %s", v.Reason)
	}

	// The same requests, re-signed asking for more by root on node-a.
	forge := func(req *cmapi.CertificateRequest, change func(*x509.CertificateRequest)) *cmapi.CertificateRequest {
		t.Helper()
		block, _ := pem.Decode(req.Spec.Request)
		csr, err := x509.ParseCertificateRequest(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		template := &x509.CertificateRequest{Subject: csr.Subject, DNSNames: csr.DNSNames, URIs: csr.URIs}
		change(template)
		key, err := generateKey(metadata.Metadata{})
		if err != nil {
			t.Fatal(err)
		}
		forged := req.DeepCopy()
		if forged.Spec.Request, err = signCSR(metadata.Metadata{}, key, template); err != nil {
			t.Fatal(err)
		}
		return forged
	}
	extraDNS := forge(svid, func(c *x509.CertificateRequest) { c.DNSNames = append(c.DNSNames, "evil.example") })
	if v := check(extraDNS, specRule); v.Approve || v.Reason != "dns name evil.example is not asked for by any volume of pod apps/web" {
		t.Errorf("an extra DNS name: %+v", v)
	}
	if v := check(extraDNS, spiffe); v.Approve || !strings.HasPrefix(v.Reason, "dns name evil.example is asked for beside the SPIFFE ID") {
		t.Errorf("an extra DNS name, SPIFFE rule: %+v", v)
	}
	otherID := forge(svid, func(c *x509.CertificateRequest) { c.URIs[0].Path = "/ns/apps/sa/admin" })
	if v := check(otherID, spiffe); v.Approve || !strings.HasPrefix(v.Reason, "uri name spiffe://cluster.local/ns/apps/sa/admin is not the SPIFFE ID of pod apps/web") {
		t.Errorf("another service account's SPIFFE ID: %+v", v)
	}
	longer := svid.DeepCopy()
	longer.Spec.Duration.Duration = time.Hour // the tls volume's, under the svid volume's issuer
	if v := check(longer, specRule); v.Approve || !strings.Contains(v.Reason, `volume "svid" of pod apps/web asks for a duration of 30m0s, the request for a duration of 1h0m0s`) {
		t.Errorf("a longer duration: %+v", v)
	}
	var _ manager.GenerateRequestFunc = RequestFor(defaultIssuer) // the driver's own, as the rule takes it
}
