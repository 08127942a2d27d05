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
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"

	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/podcert"
	"github.com/cert-manager/csi-lib/storage"
)

// generateKey is the driver's GeneratePrivateKey: a new P-256 key for every issuance.
func generateKey(metadata.Metadata) (crypto.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

// signCSR is the driver's SignRequest: the PEM CSR of the request, signed with the key.
func signCSR(_ metadata.Metadata, key crypto.PrivateKey, req *x509.CertificateRequest) ([]byte, error) {
	der, err := x509.CreateCertificateRequest(rand.Reader, req, key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// keypairWriter returns the driver's WriteKeypair: tls.key, tls.crt and ca.crt, and the
// credential bundle of pod certificates under the name the volume's credential-bundle attribute
// gives, written into the volume as one set; then the metadata with the renewal point persisted
// (the library's default, handed in meta.NextIssuanceTime, or NotAfter less the volume's
// renew-before attribute); then each of after.
func keypairWriter(store storage.Interface, after ...func(meta metadata.Metadata)) func(metadata.Metadata, crypto.PrivateKey, []byte, []byte) error {
	return func(meta metadata.Metadata, key crypto.PrivateKey, chain, ca []byte) error {
		keyPEM, err := podcert.PrivateKeyPEM(key)
		if err != nil {
			return err
		}
		files := map[string][]byte{"tls.key": keyPEM, "tls.crt": chain, "ca.crt": ca}
		bundle := podcert.Paths{CredentialBundle: meta.VolumeContext[CredentialBundleAttribute]}
		if err := bundle.AddTo(files, key, chain); err != nil {
			return fmt.Errorf("the credential bundle (%s): %w", CredentialBundleAttribute, err)
		}
		// One call: the bundle is swapped in with the key and chain it holds.
		if err := store.WriteFiles(meta, files); err != nil {
			return err
		}
		if rb, err := time.ParseDuration(meta.VolumeContext[RenewBeforeAttribute]); err == nil && rb > 0 {
			notAfter, err := leafNotAfter(chain)
			if err != nil {
				return err
			}
			next := notAfter.Add(-rb)
			meta.NextIssuanceTime = &next
		}
		if err := store.WriteMetadata(meta.VolumeID, meta); err != nil {
			return err
		}
		for _, f := range after {
			f(meta)
		}
		return nil
	}
}

// leafNotAfter is the NotAfter of the first certificate of a PEM chain.
func leafNotAfter(chain []byte) (time.Time, error) {
	block, _ := pem.Decode(chain)
	if block == nil || block.Type != "CERTIFICATE" {
		return time.Time{}, errors.New("the chain holds no PEM certificate")
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return time.Time{}, err
	}
	return leaf.NotAfter, nil
}
