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

package testkit

import (
	"crypto"
	"crypto/x509"

	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/storage"
)

// The functions below have the shapes of the manager's GeneratePrivateKeyFunc, SignRequestFunc
// and WriteKeypairFunc, so tests, benchmarks and the demo can plug them in like a real driver.

// GenerateKey generates a P-256 key for any volume.
func GenerateKey(metadata.Metadata) (crypto.PrivateKey, error) { return NewKey() }

// SignCSR returns the PEM CSR for req signed with key.
func SignCSR(_ metadata.Metadata, key crypto.PrivateKey, req *x509.CertificateRequest) ([]byte, error) {
	return CSR(req, key)
}

// KeypairWriter returns a WriteKeypair function that writes tls.key, tls.crt and ca.crt into
// store as one set, persists the metadata (and so the next issuance time), then calls each of
// after.
func KeypairWriter(store storage.Interface, after ...func(meta metadata.Metadata, key crypto.PrivateKey, chain []byte)) func(metadata.Metadata, crypto.PrivateKey, []byte, []byte) error {
	return func(meta metadata.Metadata, key crypto.PrivateKey, chain, ca []byte) error {
		keyPEM, err := KeyPEM(key)
		if err != nil {
			return err
		}
		if err := store.WriteFiles(meta, map[string][]byte{"tls.key": keyPEM, "tls.crt": chain, "ca.crt": ca}); err != nil {
			return err
		}
		if err := store.WriteMetadata(meta.VolumeID, meta); err != nil {
			return err
		}
		for _, f := range after {
			f(meta, key, chain)
		}
		return nil
	}
}
