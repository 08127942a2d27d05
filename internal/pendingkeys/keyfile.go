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

package pendingkeys

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
)

// encodePendingKey is the persisted form of a pending request's key: a PEM block ("PRIVATE KEY",
// PKCS #8) whose header names the request.
func encodePendingKey(key crypto.PrivateKey, reqKey string) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Headers: map[string]string{RequestHeader: reqKey}, Bytes: der}), nil
}

// RequestHeader is the PEM header naming the request a persisted key belongs to.
const RequestHeader = "CertificateRequest"

// goesWithRequest reports whether a persisted key (data) is removed with the request reqKey:
// its header names that request, or it cannot be decoded (decodePendingKey fails). Every
// successful issuance asks this of its own key, so the key is parsed only when the header names
// another request, the one case where whether it decodes decides.
func goesWithRequest(data []byte, reqKey string) bool {
	block, _ := pem.Decode(data)
	if block == nil || block.Headers[RequestHeader] == reqKey {
		return true
	}
	_, err := pendingKeySigner(block)
	return err != nil
}

// decodePendingKey decodes a persisted key: the request its header names, and the key.
func decodePendingKey(data []byte) (reqKey string, key crypto.Signer, err error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return "", nil, errors.New("persisted pending key is not PEM")
	}
	signer, err := pendingKeySigner(block)
	if err != nil {
		return "", nil, err
	}
	return block.Headers[RequestHeader], signer, nil
}

// pendingKeySigner parses the key of a persisted key's PEM block.
func pendingKeySigner(block *pem.Block) (crypto.Signer, error) {
	parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing persisted pending key: %w", err)
	}
	signer, ok := parsed.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("persisted pending key of type %T cannot sign", parsed)
	}
	return signer, nil
}

// keyMatchesRequest reports whether key is the private key of the request's CSR.
func keyMatchesRequest(key crypto.Signer, req *cmapi.CertificateRequest) bool {
	block, _ := pem.Decode(req.Spec.Request)
	if block == nil {
		return false
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return false
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	return ok && pub.Equal(csr.PublicKey)
}
