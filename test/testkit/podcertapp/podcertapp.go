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

// Package podcertapp reads pod-certificate files as an application written for Kubernetes pod
// certificates (KEP-4317) reads them, written from the projection's documentation and not from
// package podcert, so that the tests of what podcert and the stores write check it against an
// independent reader. It imports the standard library only, so that the storage package's own
// tests may use it.
package podcertapp

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

// Credentials is what an application takes from the files: the key, and the chain leaf first.
type Credentials struct {
	Key   crypto.PrivateKey
	Chain []*x509.Certificate
}

// Leaf is the chain's first certificate.
func (c *Credentials) Leaf() *x509.Certificate { return c.Chain[0] }

// ReadBundle parses a credential bundle: the first PEM block is a "PRIVATE KEY" (PKCS #8), every
// other block a "CERTIFICATE", at least one, the first being the leaf, whose public key is the
// key's.
func ReadBundle(bundle []byte) (*Credentials, error) {
	block, rest := pem.Decode(bundle)
	if block == nil {
		return nil, errors.New("the bundle holds no PEM block")
	}
	if block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("the bundle's first block is %q, not PRIVATE KEY", block.Type)
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("the bundle's key: %w", err)
	}
	return check(key, rest)
}

// ReadKeyAndChain parses the two files of keyPath and certificateChainPath, with the check the
// projection asks of applications that read them apart: the key must be the leaf's.
func ReadKeyAndChain(keyPEM, chainPEM []byte) (*Credentials, error) {
	block, rest := pem.Decode(keyPEM)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, errors.New("the key file holds no PRIVATE KEY block")
	}
	if b, _ := pem.Decode(rest); b != nil {
		return nil, errors.New("the key file holds more than one block")
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("the key file: %w", err)
	}
	return check(key, chainPEM)
}

func check(key crypto.PrivateKey, chainPEM []byte) (*Credentials, error) {
	creds := &Credentials{Key: key}
	for rest := chainPEM; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("chain block %d is %q, not CERTIFICATE", len(creds.Chain)+1, block.Type)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("chain block %d: %w", len(creds.Chain)+1, err)
		}
		creds.Chain = append(creds.Chain, cert)
	}
	if len(creds.Chain) == 0 {
		return nil, errors.New("no certificate after the key")
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("a %T cannot sign", key)
	}
	pub, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(creds.Leaf().PublicKey) {
		return nil, errors.New("the key is not the leaf certificate's")
	}
	return creds, nil
}
