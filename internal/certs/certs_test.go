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

package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"
)

func TestParseLeafAndRenewalPoint(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	notBefore := time.Unix(0, 0).UTC()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "leaf"}, NotBefore: notBefore, NotAfter: notBefore.Add(300 * time.Second)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	chain := append(append([]byte{}, leaf...), []byte("-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n")...)

	cert, err := ParseLeaf(chain)
	if err != nil {
		t.Fatal(err)
	}
	if cert.SerialNumber.Int64() != 7 {
		t.Errorf("serial %v, want the first block's 7", cert.SerialNumber)
	}
	if got, want := RenewalPoint(cert), notBefore.Add(200*time.Second); !got.Equal(want) {
		t.Errorf("renewal point %v, want %v", got, want)
	}
	for name, bad := range map[string][]byte{"empty": nil, "not PEM": []byte("hello"), "not a certificate": []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")} {
		if _, err := ParseLeaf(bad); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}
