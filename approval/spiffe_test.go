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

package approval

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"net"
	"net/url"
	"strings"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
)

// csrRequest is a request named for pod ns/app on node-a as its default service account,
// holding a CSR of template signed with a fresh key.
func csrRequest(t *testing.T, template *x509.CertificateRequest) *cmapi.CertificateRequest {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, template, key)
	if err != nil {
		t.Fatal(err)
	}
	req := request(named("node-a", "ns", "app", "u1"))
	req.Spec.Request = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	return req
}

func spiffeURI(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestSPIFFERule: the pod's own SPIFFE ID alone is approved; another service account's,
// namespace's or trust domain's, another name beside it, a subject common name, a CA and any
// other extension are denied, each with its reason.
func TestSPIFFERule(t *testing.T) {
	app := pod("ns", "app", "u1", "node-a", nil) // service account "default"
	own := "spiffe://cluster.local/ns/ns/sa/default"
	if got := SPIFFEID("cluster.local", app); got != own {
		t.Fatalf("SPIFFEID = %s", got)
	}
	basicConstraintsCA, err := asn1.Marshal(struct{ IsCA bool }{true})
	if err != nil {
		t.Fatal(err)
	}
	rule := SPIFFERule("cluster.local")
	for _, tc := range []struct {
		name     string
		template x509.CertificateRequest
		change   func(*cmapi.CertificateRequest)
		pod      *corev1.Pod
		rule     PodRule
		reason   string // "": approved
	}{
		{name: "the pod's SPIFFE ID", template: x509.CertificateRequest{URIs: []*url.URL{spiffeURI(t, own)}}},
		{name: "another service account's", template: x509.CertificateRequest{URIs: []*url.URL{spiffeURI(t, "spiffe://cluster.local/ns/ns/sa/admin")}},
			reason: "uri name spiffe://cluster.local/ns/ns/sa/admin is not the SPIFFE ID of pod ns/app, spiffe://cluster.local/ns/ns/sa/default"},
		{name: "another namespace's", template: x509.CertificateRequest{URIs: []*url.URL{spiffeURI(t, "spiffe://cluster.local/ns/kube-system/sa/default")}},
			reason: "uri name spiffe://cluster.local/ns/kube-system/sa/default is not the SPIFFE ID of pod ns/app"},
		{name: "another trust domain's", template: x509.CertificateRequest{URIs: []*url.URL{spiffeURI(t, "spiffe://evil.example/ns/ns/sa/default")}},
			reason: "uri name spiffe://evil.example/ns/ns/sa/default is not the SPIFFE ID"},
		{name: "a second URI", template: x509.CertificateRequest{URIs: []*url.URL{spiffeURI(t, own), spiffeURI(t, own)}},
			reason: "the request names 2 URIs: an X.509 SVID names exactly one"},
		{name: "no URI", template: x509.CertificateRequest{},
			reason: "the request names no SPIFFE ID: pod ns/app's is " + own},
		{name: "a DNS name beside it", template: x509.CertificateRequest{URIs: []*url.URL{spiffeURI(t, own)}, DNSNames: []string{"evil.example"}},
			reason: "dns name evil.example is asked for beside the SPIFFE ID: an SVID of pod ns/app names " + own + " alone"},
		{name: "an IP name beside it", template: x509.CertificateRequest{URIs: []*url.URL{spiffeURI(t, own)}, IPAddresses: []net.IP{net.ParseIP("10.0.0.9")}},
			reason: "ip name 10.0.0.9 is asked for beside the SPIFFE ID"},
		{name: "a common name", template: x509.CertificateRequest{URIs: []*url.URL{spiffeURI(t, own)}, Subject: pkix.Name{CommonName: "kube-apiserver"}},
			reason: `the subject's common name "kube-apiserver" is asked for: an SVID of pod ns/app names ` + own + " alone"},
		{name: "a CA", template: x509.CertificateRequest{URIs: []*url.URL{spiffeURI(t, own)}}, change: func(r *cmapi.CertificateRequest) { r.Spec.IsCA = true },
			reason: "a CA certificate is asked for: an SVID of pod ns/app is not a CA"},
		{name: "a CA basic constraint", template: x509.CertificateRequest{URIs: []*url.URL{spiffeURI(t, own)},
			ExtraExtensions: []pkix.Extension{{Id: asn1.ObjectIdentifier{2, 5, 29, 19}, Critical: true, Value: basicConstraintsCA}}},
			reason: "extension 2.5.29.19 (basic constraints) is asked for: an SVID of pod ns/app asks for its name alone"},
		{name: "a pod without a service account", template: x509.CertificateRequest{URIs: []*url.URL{spiffeURI(t, "spiffe://cluster.local/ns/ns/sa/")}},
			pod: pod("ns", "app", "u1", "node-a", func(p *corev1.Pod) { p.Spec.ServiceAccountName = "" }), reason: "pod ns/app names no service account: it has no SPIFFE ID"},
		{name: "no trust domain", template: x509.CertificateRequest{URIs: []*url.URL{spiffeURI(t, "spiffe:///ns/ns/sa/default")}}, rule: SPIFFERule(""),
			reason: `the approver's SPIFFE trust domain "" is not one`},
		{name: "no CSR", change: func(r *cmapi.CertificateRequest) { r.Spec.Request = nil }, reason: "the request holds no PEM certificate request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := csrRequest(t, &tc.template)
			if tc.change != nil {
				tc.change(req)
			}
			p, r := app, rule
			if tc.pod != nil {
				p = tc.pod
			}
			if tc.rule != nil {
				r = tc.rule
			}
			got := r(req, p)
			if tc.reason == "" && got != "" {
				t.Errorf("denied: %s", got)
			}
			if tc.reason != "" && !strings.HasPrefix(got, tc.reason) {
				t.Errorf("reason %q, want %q", got, tc.reason)
			}
		})
	}
}

// TestSPIFFERuleThroughCheck: another pod's service account is denied by the claim's check
// before the rule: root on a node cannot name its own pod with another account.
func TestSPIFFERuleThroughCheck(t *testing.T) {
	app := pod("ns", "app", "u1", "node-a", nil)
	req := csrRequest(t, &x509.CertificateRequest{URIs: []*url.URL{spiffeURI(t, "spiffe://cluster.local/ns/ns/sa/admin")}})
	req.Annotations[PodServiceAccountAnnotationKey] = "admin"
	v, err := Check(context.Background(), req, pods(nil, app), SPIFFERule("cluster.local"))
	if err != nil || v.Approve || v.Reason != `pod ns/app runs as service account "default", not "admin"` {
		t.Errorf("Check = %+v, %v", v, err)
	}
	req = csrRequest(t, &x509.CertificateRequest{URIs: []*url.URL{spiffeURI(t, SPIFFEID("cluster.local", app))}})
	if v, err := Check(context.Background(), req, pods(nil, app), SPIFFERule("cluster.local")); err != nil || !v.Approve {
		t.Errorf("the pod's own SVID: %+v, %v", v, err)
	}
}
