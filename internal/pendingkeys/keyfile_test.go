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
	"crypto/ecdh"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"testing"

	"github.com/cert-manager/csi-lib/test/testkit"
)

// TestGoesWithRequest: a persisted key goes with the request its header names, and with any
// request when it cannot be decoded, exactly as decodePendingKey decides, whether or not the
// key has to be parsed to tell.
func TestGoesWithRequest(t *testing.T) {
	signer, err := testkit.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	signerDER, err := x509.MarshalPKCS8PrivateKey(signer)
	if err != nil {
		t.Fatal(err)
	}
	x25519, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	x25519DER, err := x509.MarshalPKCS8PrivateKey(x25519) // decodes, but cannot sign
	if err != nil {
		t.Fatal(err)
	}
	persisted := func(header string, der []byte) []byte {
		block := &pem.Block{Type: "PRIVATE KEY", Bytes: der}
		if header != "" {
			block.Headers = map[string]string{RequestHeader: header}
		}
		return pem.EncodeToMemory(block)
	}
	for _, c := range []struct {
		name   string
		data   []byte
		reqKey string
		want   bool
	}{
		{"its own key", persisted("ns/a", signerDER), "ns/a", true},
		{"another request's key", persisted("ns/b", signerDER), "ns/a", false},
		{"a key naming no request", persisted("", signerDER), "ns/a", false},
		{"a key naming no request, asked for the empty key", persisted("", signerDER), "", true},
		{"not PEM", []byte("not a key"), "ns/a", true},
		{"its own header over bytes that do not parse", persisted("ns/a", []byte("junk")), "ns/a", true},
		{"another request's header over bytes that do not parse", persisted("ns/b", []byte("junk")), "ns/a", true},
		{"another request's header over a key that cannot sign", persisted("ns/b", x25519DER), "ns/a", true},
		{"its own header over a key that cannot sign", persisted("ns/a", x25519DER), "ns/a", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := goesWithRequest(c.data, c.reqKey); got != c.want {
				t.Errorf("goesWithRequest = %v, want %v", got, c.want)
			}
			named, _, err := decodePendingKey(c.data)
			if decoded := err != nil || named == c.reqKey; decoded != c.want {
				t.Errorf("decodePendingKey's rule gives %v, want %v: the case is wrong", decoded, c.want)
			}
		})
	}
}
