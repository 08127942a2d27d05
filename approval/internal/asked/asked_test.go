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

package asked

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"net"
	"net/url"
	"slices"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestByBundleReadsWhatTheCSRSays: what ByBundle reads from a template is, item for item and in
// order, what ByRequest reads from the CSR x509.CreateCertificateRequest makes of it, for every
// kind of subject, name and extension a generator may set.
func TestByBundleReadsWhatTheCSRSays(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rawSubject, err := asn1.Marshal(pkix.Name{CommonName: "raw", Organization: []string{"o"}}.ToRDNSequence())
	if err != nil {
		t.Fatal(err)
	}
	otherName, err := asn1.Marshal([]asn1.RawValue{
		{Class: asn1.ClassContextSpecific, Tag: 2, Bytes: []byte("a.example")},
		{Class: asn1.ClassContextSpecific, Tag: 0, IsCompound: true, Bytes: []byte{0x06, 0x03, 0x2a, 0x03, 0x04, 0xa0, 0x03, 0x0c, 0x01, 0x78}},
	})
	if err != nil {
		t.Fatal(err)
	}
	basicConstraints := pkix.Extension{Id: asn1.ObjectIdentifier{2, 5, 29, 19}, Critical: true, Value: []byte{0x30, 0x03, 0x01, 0x01, 0xff}}
	u, _ := url.Parse("spiffe://td/ns/a/sa/b")
	for name, template := range map[string]x509.CertificateRequest{
		"empty":                   {},
		"a subject":               {Subject: pkix.Name{CommonName: "web", Organization: []string{"org"}, SerialNumber: "1"}},
		"a raw subject":           {RawSubject: rawSubject},
		"every kind of name":      {DNSNames: []string{"b.example", "a.example"}, EmailAddresses: []string{"a@b.example"}, IPAddresses: []net.IP{net.ParseIP("10.0.0.1"), net.ParseIP("2001:db8::1")}, URIs: []*url.URL{u}},
		"an IPv4 in 16 bytes":     {IPAddresses: []net.IP{net.IPv4(10, 0, 0, 2).To16()}},
		"another extension":       {DNSNames: []string{"a.example"}, ExtraExtensions: []pkix.Extension{basicConstraints}},
		"names as an extension":   {DNSNames: []string{"ignored.example"}, ExtraExtensions: []pkix.Extension{{Id: OIDSubjectAltName, Value: otherName}}},
		"a deprecated attribute":  {DNSNames: []string{"a.example"}, Attributes: []pkix.AttributeTypeAndValueSET{{Type: asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 7}, Value: [][]pkix.AttributeTypeAndValue{{{Type: asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 7}, Value: "challenge"}}}}}},
		"a subject and two names": {Subject: pkix.Name{CommonName: "web"}, DNSNames: []string{"web.ns.svc", "web.example"}},
	} {
		t.Run(name, func(t *testing.T) {
			issuer := cmmeta.IssuerReference{Kind: "ClusterIssuer", Name: "ca"}
			usages := []cmapi.KeyUsage{cmapi.UsageServerAuth}
			fromBundle, err := ByBundle(&template, "ns", issuer, usages, true, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			der, err := x509.CreateCertificateRequest(rand.Reader, &template, key)
			if err != nil {
				t.Fatal(err)
			}
			fromCSR, _, reason := ByRequest(&cmapi.CertificateRequest{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns"},
				Spec: cmapi.CertificateRequestSpec{Request: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
					IssuerRef: issuer, Usages: usages, IsCA: true, Duration: &metav1.Duration{Duration: time.Hour}},
			})
			if reason != "" {
				t.Fatal(reason)
			}
			if !slices.Equal(fromBundle.Items, fromCSR.Items) || fromBundle.Duration != fromCSR.Duration {
				t.Errorf("from the template %+v,\nfrom its CSR %+v", fromBundle, fromCSR)
			}
		})
	}
}
