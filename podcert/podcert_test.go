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

package podcert_test

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/cert-manager/csi-lib/podcert"
	"github.com/cert-manager/csi-lib/test/testkit"
	"github.com/cert-manager/csi-lib/test/testkit/podcertapp"
)

// issueChain returns a chain for key as an issuer returns it: the leaf, then the CA.
func issueChain(t *testing.T, ca *testkit.CA, key crypto.PrivateKey) []byte {
	t.Helper()
	csr, err := testkit.CSR(&x509.CertificateRequest{Subject: pkix.Name{CommonName: "pod"}}, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Sign(csr, time.Now().Add(-time.Minute), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return append(leaf, ca.CertPEM...)
}

func newCA(t *testing.T) *testkit.CA {
	t.Helper()
	ca, err := testkit.NewCA("podcert-test-ca")
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func mustKey(t *testing.T, gen func() (crypto.PrivateKey, error)) crypto.PrivateKey {
	t.Helper()
	key, err := gen()
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// TestBundleReadsAsAPodCertificate: for every key type the podCertificate projection offers,
// the bundle reads as an application written for pod certificates reads it (first block a
// PKCS #8 PRIVATE KEY, then CERTIFICATE blocks, leaf first, the key the leaf's), and the files
// Paths adds are kubelet's: the bundle is the key file followed by the chain file.
func TestBundleReadsAsAPodCertificate(t *testing.T) {
	ca := newCA(t)
	ecKey := func(c elliptic.Curve) func() (crypto.PrivateKey, error) {
		return func() (crypto.PrivateKey, error) { return ecdsa.GenerateKey(c, rand.Reader) }
	}
	for _, tc := range []struct {
		keyType string // the projection's keyType
		gen     func() (crypto.PrivateKey, error)
	}{
		{"ECDSAP256", ecKey(elliptic.P256())},
		{"ECDSAP384", ecKey(elliptic.P384())},
		{"ECDSAP521", ecKey(elliptic.P521())},
		{"ED25519", func() (crypto.PrivateKey, error) { _, k, err := ed25519.GenerateKey(rand.Reader); return k, err }},
		// RSA4096 takes seconds to generate under -race; the encoding is the same.
		{"RSA3072", func() (crypto.PrivateKey, error) { return rsa.GenerateKey(rand.Reader, 3072) }},
	} {
		t.Run(tc.keyType, func(t *testing.T) {
			key := mustKey(t, tc.gen)
			chain := issueChain(t, ca, key)
			bundle, err := podcert.Bundle(key, chain)
			if err != nil {
				t.Fatal(err)
			}
			creds, err := podcertapp.ReadBundle(bundle)
			if err != nil {
				t.Fatalf("an application cannot read the bundle: %v\n%s", err, bundle)
			}
			if len(creds.Chain) != 2 || !creds.Chain[1].Equal(ca.Cert) {
				t.Fatalf("the bundle's chain has %d certificates; want the leaf, then the CA", len(creds.Chain))
			}
			if !creds.Key.(interface{ Equal(crypto.PrivateKey) bool }).Equal(key) {
				t.Fatal("the bundle's key is not the key given")
			}

			files := map[string][]byte{}
			paths := podcert.Paths{CredentialBundle: "credentialbundle.pem", Key: "key.pem", CertificateChain: "chain.pem"}
			if err := paths.AddTo(files, key, chain); err != nil {
				t.Fatal(err)
			}
			if len(files) != 3 {
				t.Fatalf("AddTo added %d files; want 3", len(files))
			}
			if !bytes.Equal(files["credentialbundle.pem"], bundle) {
				t.Error("AddTo's bundle differs from Bundle's")
			}
			if !bytes.Equal(files["credentialbundle.pem"], append(append([]byte{}, files["key.pem"]...), files["chain.pem"]...)) {
				t.Error("the bundle is not the key file followed by the chain file")
			}
			if _, err := podcertapp.ReadKeyAndChain(files["key.pem"], files["chain.pem"]); err != nil {
				t.Errorf("an application cannot read the key and chain files: %v", err)
			}
			if !bytes.Equal(files["chain.pem"], chain) {
				t.Error("a chain already as kubelet writes it changed")
			}
		})
	}
}

// TestChainIsCleanedAsKubeletCleansIt: PEM headers and text between blocks are dropped, the
// certificates keep their order.
func TestChainIsCleanedAsKubeletCleansIt(t *testing.T) {
	ca := newCA(t)
	key := mustKey(t, testkit.NewKey)
	chain := issueChain(t, ca, key)
	leafBlock, rest := pem.Decode(chain)
	caBlock, _ := pem.Decode(rest)
	leafBlock.Headers = map[string]string{"Comment": "from the issuer"}
	messy := "subject=CN = pod\n" + string(pem.EncodeToMemory(leafBlock)) + "issuer text\n" + string(pem.EncodeToMemory(caBlock)) + "trailing\n"

	got, err := podcert.CertificateChainPEM([]byte(messy))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, chain) {
		t.Fatalf("cleaned chain:\n%s\nwant:\n%s", got, chain)
	}
	bundle, err := podcert.Bundle(key, []byte(messy))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(bundle), "text") || strings.Contains(string(bundle), "Comment") {
		t.Fatalf("the bundle kept text or headers:\n%s", bundle)
	}
	if _, err := podcertapp.ReadBundle(bundle); err != nil {
		t.Fatal(err)
	}
}

// TestRefusals: a chain without a certificate, a block that is not a certificate, a leaf of
// another key (or a chain in the wrong order) and a missing or unusable key are refused with an
// error that says which, and AddTo then adds nothing.
func TestRefusals(t *testing.T) {
	ca := newCA(t)
	key := mustKey(t, testkit.NewKey)
	other := mustKey(t, testkit.NewKey)
	chain := issueChain(t, ca, key)
	keyPEM, err := podcert.PrivateKeyPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := pem.Decode(chain)
	rootFirst := append(append([]byte{}, ca.CertPEM...), pem.EncodeToMemory(leaf)...)
	garbage := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("not DER")})

	for _, tc := range []struct {
		name    string
		key     crypto.PrivateKey
		chain   []byte
		wantIs  error
		wantSub string
	}{
		{name: "no chain", key: key, chain: nil, wantIs: podcert.ErrNoCertificate},
		{name: "text only", key: key, chain: []byte("no PEM here\n"), wantIs: podcert.ErrNoCertificate},
		{name: "a bundle given as the chain", key: key, chain: append(append([]byte{}, keyPEM...), chain...), wantSub: `block 1 of the certificate chain is "PRIVATE KEY"`},
		{name: "a block that is not DER", key: key, chain: garbage, wantSub: "block 1 of the certificate chain: x509"},
		{name: "a leaf of another key", key: other, chain: chain, wantIs: podcert.ErrKeyMismatch},
		{name: "the CA first", key: key, chain: rootFirst, wantIs: podcert.ErrKeyMismatch},
		{name: "no key", key: nil, chain: chain, wantSub: "no private key"},
		{name: "not a key", key: struct{}{}, chain: chain, wantSub: "PKCS #8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check := func(what string, err error) {
				t.Helper()
				switch {
				case err == nil:
					t.Errorf("%s: no error", what)
				case tc.wantIs != nil && !errors.Is(err, tc.wantIs):
					t.Errorf("%s: %v; want %v", what, err, tc.wantIs)
				case !strings.Contains(err.Error(), tc.wantSub):
					t.Errorf("%s: %q; want it to contain %q", what, err, tc.wantSub)
				}
			}
			_, err := podcert.Bundle(tc.key, tc.chain)
			check("Bundle", err)
			files := map[string][]byte{"tls.crt": tc.chain}
			err = podcert.Paths{CredentialBundle: "b.pem", Key: "k.pem", CertificateChain: "c.pem"}.AddTo(files, tc.key, tc.chain)
			check("AddTo", err)
			if len(files) != 1 {
				t.Errorf("AddTo failed and still added files: %v", slicesOfKeys(files))
			}
		})
	}
}

// TestAddToNames: nothing named adds and checks nothing (a driver calls it whatever the
// volume asks); a name already in the set or given twice is refused, the set unchanged.
func TestAddToNames(t *testing.T) {
	files := map[string][]byte{"tls.key": []byte("k")}
	if err := (podcert.Paths{}).AddTo(files, nil, nil); err != nil {
		t.Fatalf("no name: %v", err)
	}
	if len(files) != 1 {
		t.Fatalf("no name, files %v", slicesOfKeys(files))
	}

	ca := newCA(t)
	key := mustKey(t, testkit.NewKey)
	chain := issueChain(t, ca, key)
	for _, paths := range []podcert.Paths{
		{CredentialBundle: "tls.key"},
		{Key: "tls.key"},
		{CredentialBundle: "b.pem", CertificateChain: "b.pem"},
	} {
		before := maps.Clone(files)
		err := paths.AddTo(files, key, chain)
		if err == nil || !strings.Contains(err.Error(), "file name") {
			t.Errorf("%+v: %v; want the name refused", paths, err)
		}
		if !maps.EqualFunc(before, files, bytes.Equal) {
			t.Errorf("%+v: files changed: %v", paths, slicesOfKeys(files))
		}
	}
}

func slicesOfKeys(m map[string][]byte) []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}
