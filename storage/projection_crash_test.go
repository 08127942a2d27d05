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

package storage

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/podcert"
	"github.com/cert-manager/csi-lib/test/testkit/podcertapp"
)

// bundleFile is the credential bundle's name in these tests, beside the usual three files.
const bundleFile = "credentialbundle.pem"

// issuance is the set of files a driver's WriteKeypair writes for one certificate: key, chain
// and CA, and the credential bundle of key and chain (podcert), in one WriteFiles call.
type issuance struct {
	serial *big.Int
	files  map[string][]byte
}

// newIssuance makes a key and a two-certificate chain (leaf, then its CA) for it.
func newIssuance(t *testing.T, serial int64) issuance {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "crash-test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "pod"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	chain := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}), caPEM...)
	return issuance{serial: big.NewInt(serial), files: driverFiles(t, key, chain, caPEM)}
}

// driverFiles is what a driver's WriteKeypair passes to WriteFiles.
func driverFiles(t *testing.T, key crypto.PrivateKey, chain, ca []byte) map[string][]byte {
	t.Helper()
	keyPEM, err := podcert.PrivateKeyPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"tls.key": keyPEM, "tls.crt": chain, "ca.crt": ca}
	if err := (podcert.Paths{CredentialBundle: bundleFile}).AddTo(files, key, chain); err != nil {
		t.Fatal(err)
	}
	return files
}

// checkVisibleSet reads every file of want through its visible name, as the pod does, and
// fails unless each holds want's bytes and the bundle reads as a pod certificate's, with the key
// of tls.key and the chain of tls.crt.
func checkVisibleSet(t *testing.T, f *Filesystem, volumeID string, want issuance) {
	t.Helper()
	got := map[string][]byte{}
	for name, content := range want.files {
		b, err := os.ReadFile(filepath.Join(f.dataDir(volumeID), name))
		if err != nil {
			t.Fatalf("reading %s: %v", name, err)
		}
		if !bytes.Equal(b, content) {
			t.Errorf("%s is not the one of issuance %s", name, want.serial)
		}
		got[name] = b
	}
	bundle, err := podcertapp.ReadBundle(got[bundleFile])
	if err != nil {
		t.Fatalf("the bundle does not read as a pod certificate's: %v", err)
	}
	pair, err := podcertapp.ReadKeyAndChain(got["tls.key"], got["tls.crt"])
	if err != nil {
		t.Fatalf("tls.key and tls.crt: %v", err)
	}
	if bundle.Leaf().SerialNumber.Cmp(want.serial) != 0 || !bundle.Leaf().Equal(pair.Leaf()) {
		t.Errorf("the bundle's leaf is serial %s, tls.crt's %s; want both %s", bundle.Leaf().SerialNumber, pair.Leaf().SerialNumber, want.serial)
	}
	if !bundle.Key.(crypto.Signer).Public().(*ecdsa.PublicKey).Equal(pair.Key.(crypto.Signer).Public()) {
		t.Error("the bundle's key is not tls.key's")
	}
}

// crashed is what the hook panics with: the process "dies" there.
type crashed struct{}

// writeAndCrash runs WriteFiles with the hook panicking at the n-th time point is reached, and
// reports whether it did (the write was cut there).
func writeAndCrash(t *testing.T, f *Filesystem, meta metadata.Metadata, files map[string][]byte, point projectPoint, n int) (cut bool) {
	t.Helper()
	seen := 0
	f.state.projectHook = func(p projectPoint) {
		if p == point {
			if seen++; seen == n {
				panic(crashed{})
			}
		}
	}
	defer func() {
		f.state.projectHook = nil
		if r := recover(); r != nil {
			if _, ok := r.(crashed); !ok {
				panic(r)
			}
			cut = true
		}
	}()
	if err := f.WriteFiles(meta, files); err != nil {
		t.Fatalf("WriteFiles: %v", err)
	}
	return false
}

// generations lists the generation directories in a data directory.
func generations(t *testing.T, dataDir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	var gens []string
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), generationPrefix) {
			gens = append(gens, e.Name())
		}
	}
	return gens
}

// TestCrashMidWriteKeepsTheBundleWithItsKey: a driver writes the credential bundle beside the
// key and the chain in one WriteFiles call; the process dies in the middle of writing the next
// issuance (the hook panics; projectFiles' clean-up is not deferred, so the directory is left as
// a kill leaves it). Through the visible names the pod reads the complete previous set, or,
// once "..data" has been swapped, the complete new one: never a bundle of one issuance beside
// the key or chain of another, never a missing file. The restarted store's sweep removes the
// leftovers and the next issuance is written whole.
func TestCrashMidWriteKeepsTheBundleWithItsKey(t *testing.T) {
	for _, tc := range []struct {
		name      string
		point     projectPoint
		n         int
		newIsLive bool // the crash came after the swap: the new set is the live one
		leftFiles int  // files in the unpublished generation the crash leaves (-1: none left)
	}{
		{name: "after the first file of the new generation", point: pointFileWritten, n: 1, leftFiles: 1},
		{name: "after the third file of the new generation", point: pointFileWritten, n: 3, leftFiles: 3},
		{name: "after the new generation is complete, before the swap", point: pointGenerationReady, n: 1, leftFiles: 4},
		{name: "after the swap, before the links and the clean-up", point: pointDataSwapped, n: 1, newIsLive: true, leftFiles: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			f := newPlainFilesystem(t, base)
			meta := testMeta("vol-1")
			if _, err := f.RegisterMetadata(meta); err != nil {
				t.Fatal(err)
			}
			if err := f.SetMounted("vol-1"); err != nil {
				t.Fatal(err)
			}
			first, second, third := newIssuance(t, 1001), newIssuance(t, 1002), newIssuance(t, 1003)
			if err := f.WriteFiles(meta, first.files); err != nil {
				t.Fatal(err)
			}
			checkVisibleSet(t, f, "vol-1", first)
			live, err := os.Readlink(filepath.Join(f.dataDir("vol-1"), dataLinkName))
			if err != nil {
				t.Fatal(err)
			}

			if !writeAndCrash(t, f, meta, second.files, tc.point, tc.n) {
				t.Fatal("the write was not cut: the crash point was never reached")
			}
			want := first
			if tc.newIsLive {
				want = second
			}
			checkVisibleSet(t, f, "vol-1", want)
			// The crash left what a kill leaves: a second generation, unpublished (holding
			// the files written so far) or published with the previous one not yet removed.
			gens := generations(t, f.dataDir("vol-1"))
			if len(gens) != 2 {
				t.Fatalf("generations after the crash: %v; want the live one and the cut one", gens)
			}
			if tc.leftFiles >= 0 {
				for _, g := range gens {
					if g == live {
						continue
					}
					entries, _ := os.ReadDir(filepath.Join(f.dataDir("vol-1"), g))
					if len(entries) != tc.leftFiles {
						t.Fatalf("the cut generation holds %d files; want %d", len(entries), tc.leftFiles)
					}
				}
			}

			restarted := newPlainFilesystem(t, base)
			if res := restarted.StartupSweep(); len(res.RemovedLeftovers) != 1 || res.Kept != 1 {
				t.Fatalf("sweep = %+v; want the stale generation removed and the volume kept", res)
			}
			checkVisibleSet(t, restarted, "vol-1", want)
			if err := restarted.WriteFiles(meta, third.files); err != nil {
				t.Fatal(err)
			}
			checkVisibleSet(t, restarted, "vol-1", third)
			if gens := generations(t, restarted.dataDir("vol-1")); len(gens) != 1 {
				t.Fatalf("generations after the next write: %v; want one", gens)
			}
		})
	}
}
