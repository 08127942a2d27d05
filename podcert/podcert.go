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

// Package podcert writes a volume's key and chain in the file formats of Kubernetes pod
// certificates (KEP-4317, kubelet's projected podCertificate volume), so that an application
// written for pod certificates reads a volume of a driver built on this library unchanged.
//
// The credential bundle (the projection's credentialBundlePath) is one file: the private key as
// a PEM "PRIVATE KEY" block (PKCS #8), then the certificate chain as "CERTIFICATE" blocks, leaf
// first. The projection's keyPath and certificateChainPath are the same two parts in two files.
// Chains are written as kubelet writes them: every CERTIFICATE block re-encoded without PEM
// headers, text between blocks dropped.
//
// A driver's WriteKeypair adds the files to the map it passes to the store's WriteFiles, in the
// same call as its usual files: the Filesystem store swaps one call's files in as one set, so a
// reader never sees a bundle, key or chain of one issuance beside those of another:
//
//	files := map[string][]byte{"tls.key": keyPEM, "tls.crt": chain, "ca.crt": ca}
//	if err := (podcert.Paths{CredentialBundle: "credentialbundle.pem"}).AddTo(files, key, chain); err != nil {
//		return err
//	}
//	return store.WriteFiles(meta, files)
//
// Every function refuses a chain without a certificate, a block that is not a certificate, and
// a key that does not belong to the leaf, so a driver never writes a bundle that an application
// would reject. Nothing else in the library uses this package: without it, a volume holds what
// the driver writes, as upstream. The package imports the standard library only.
package podcert

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
)

// PEM block types of the credential bundle.
const (
	PrivateKeyBlockType  = "PRIVATE KEY"
	CertificateBlockType = "CERTIFICATE"
)

var (
	// ErrNoCertificate is returned for a chain that holds no PEM block at all.
	ErrNoCertificate = errors.New("the certificate chain holds no PEM certificate")

	// ErrKeyMismatch is returned when the private key is not the key of the chain's leaf
	// certificate.
	ErrKeyMismatch = errors.New("the private key does not belong to the chain's leaf certificate")
)

// PrivateKeyPEM returns key as one PEM "PRIVATE KEY" block holding its PKCS #8 encoding, the
// format of the projection's keyPath. Any key x509.MarshalPKCS8PrivateKey accepts works (RSA,
// ECDSA, Ed25519, X25519).
func PrivateKeyPEM(key crypto.PrivateKey) ([]byte, error) {
	if key == nil {
		return nil, errors.New("no private key")
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding the private key as PKCS #8: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: PrivateKeyBlockType, Bytes: der}), nil
}

// CertificateChainPEM returns chain's certificates in their order (leaf first, as issued), one
// "CERTIFICATE" block each, without PEM headers or text between blocks: the format of the
// projection's certificateChainPath. A chain without a PEM block is ErrNoCertificate; a block of
// another type, or one that does not parse as an X.509 certificate, is an error naming it.
func CertificateChainPEM(chain []byte) ([]byte, error) {
	_, chainPEM, err := parseChain(chain)
	return chainPEM, err
}

// Bundle returns the credential bundle of key and chain: PrivateKeyPEM(key) followed by
// CertificateChainPEM(chain), after checking that key belongs to the leaf (ErrKeyMismatch
// otherwise). It is the concatenation of the two files Paths.Key and Paths.CertificateChain
// would hold, as in kubelet's projection.
func Bundle(key crypto.PrivateKey, chain []byte) ([]byte, error) {
	keyPEM, chainPEM, err := encode(key, chain)
	if err != nil {
		return nil, err
	}
	return append(keyPEM, chainPEM...), nil
}

// Paths names the files of the podCertificate projection in a volume, after its fields
// credentialBundlePath, keyPath and certificateChainPath. An empty name writes no file; the
// names are relative to the volume and follow the store's rules (storage.Filesystem: kubelet's).
type Paths struct {
	// CredentialBundle is the file holding the key, then the chain (Bundle).
	CredentialBundle string
	// Key is the file holding the key alone (PrivateKeyPEM).
	Key string
	// CertificateChain is the file holding the chain alone (CertificateChainPEM).
	CertificateChain string
}

// AddTo adds the files that p names to files, the map a driver's WriteKeypair passes to the
// store's WriteFiles, so that they are written in the same set as the driver's own files. It
// checks the key and the chain as Bundle does. With no name set it adds nothing and checks
// nothing. A name already in files, or given twice, is an error: the set would lose one of the
// two. On error files is left unchanged.
func (p Paths) AddTo(files map[string][]byte, key crypto.PrivateKey, chain []byte) error {
	named := make(map[string]bool, 3)
	for _, name := range []string{p.CredentialBundle, p.Key, p.CertificateChain} {
		if name == "" {
			continue
		}
		if named[name] {
			return fmt.Errorf("the file name %q is given twice", name)
		}
		if _, ok := files[name]; ok {
			return fmt.Errorf("the file name %q is already in the volume's files", name)
		}
		named[name] = true
	}
	if len(named) == 0 {
		return nil
	}
	keyPEM, chainPEM, err := encode(key, chain)
	if err != nil {
		return err
	}
	if p.CredentialBundle != "" {
		files[p.CredentialBundle] = slices.Concat(keyPEM, chainPEM)
	}
	if p.Key != "" {
		files[p.Key] = keyPEM
	}
	if p.CertificateChain != "" {
		files[p.CertificateChain] = chainPEM
	}
	return nil
}

// encode returns the key and chain parts of a bundle, having checked that key belongs to the
// leaf (ErrKeyMismatch otherwise).
func encode(key crypto.PrivateKey, chain []byte) (keyPEM, chainPEM []byte, err error) {
	leaf, chainPEM, err := parseChain(chain)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err = PrivateKeyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	priv, ok := key.(interface{ Public() crypto.PublicKey })
	if !ok {
		return nil, nil, fmt.Errorf("%w: a %T has no public key to compare", ErrKeyMismatch, key)
	}
	pub, ok := priv.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(leaf.PublicKey) {
		return nil, nil, fmt.Errorf("%w (leaf subject %q, serial %s)", ErrKeyMismatch, leaf.Subject.String(), leaf.SerialNumber)
	}
	return keyPEM, chainPEM, nil
}

// parseChain parses every PEM block of chain as a certificate, in order, and returns the first
// (the leaf) and the chain as kubelet writes it: every block re-encoded without PEM headers,
// nothing between blocks. There must be at least one block, and every block must be a
// CERTIFICATE.
func parseChain(chain []byte) (leaf *x509.Certificate, chainPEM []byte, err error) {
	var out bytes.Buffer
	rest := chain
	for n := 1; ; n++ {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != CertificateBlockType {
			return nil, nil, fmt.Errorf("block %d of the certificate chain is %q, not %q", n, block.Type, CertificateBlockType)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, nil, fmt.Errorf("block %d of the certificate chain: %w", n, err)
		}
		if leaf == nil {
			leaf = cert
		}
		// Encoding into a buffer fails only for headers, and there are none.
		_ = pem.Encode(&out, &pem.Block{Type: CertificateBlockType, Bytes: cert.Raw})
	}
	if leaf == nil {
		return nil, nil, ErrNoCertificate
	}
	return leaf, out.Bytes(), nil
}
