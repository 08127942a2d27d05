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
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"maps"
	"math/big"
	"slices"
	"time"

	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/podcert"
	"github.com/cert-manager/csi-lib/storage"
)

// A driver's WriteKeypair writes the credential bundle of pod certificates beside its usual
// files, in the same WriteFiles call, so that the store swaps them in as one set. The store here
// is the in-memory one of drivers' tests; in a driver it is the storage.Filesystem.
func ExamplePaths_AddTo() {
	store := storage.NewMemoryFS()
	meta := metadata.Metadata{VolumeID: "csi-0a9d8c7b", TargetPath: "/var/lib/kubelet/pods/p/volumes/tls"}
	if _, err := store.RegisterMetadata(meta); err != nil {
		panic(err)
	}

	// The driver's manager.WriteKeypairFunc.
	writeKeypair := func(meta metadata.Metadata, key crypto.PrivateKey, chain, ca []byte) error {
		keyPEM, err := podcert.PrivateKeyPEM(key)
		if err != nil {
			return err
		}
		files := map[string][]byte{"tls.key": keyPEM, "tls.crt": chain, "ca.crt": ca}
		bundle := podcert.Paths{CredentialBundle: "credentialbundle.pem"} // the name the volume asks for
		if err := bundle.AddTo(files, key, chain); err != nil {
			return err
		}
		return store.WriteFiles(meta, files)
	}

	key, chain, ca := issue()
	if err := writeKeypair(meta, key, chain, ca); err != nil {
		panic(err)
	}

	files, err := store.ReadFiles(meta.VolumeID)
	if err != nil {
		panic(err)
	}
	fmt.Println(slices.Sorted(maps.Keys(files)))
	// What an application written for pod certificates reads: the key, then the chain, leaf first.
	for rest := files["credentialbundle.pem"]; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		fmt.Println(block.Type)
	}
	// Output:
	// [ca.crt credentialbundle.pem metadata.json tls.crt tls.key]
	// PRIVATE KEY
	// CERTIFICATE
	// CERTIFICATE
}

// issue plays the issuer: a key, and its chain (the leaf, then the CA) and CA.
func issue() (crypto.PrivateKey, []byte, []byte) {
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "example-ca"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, _ := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "my-app-0"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour),
	}
	leafDER, _ := x509.CreateCertificate(rand.Reader, leafTmpl, caCert, key.Public(), caKey)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	chain := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}), ca...)
	return key, chain, ca
}
