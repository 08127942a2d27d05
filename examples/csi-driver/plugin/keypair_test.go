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
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"k8s.io/mount-utils"

	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/storage"
	"github.com/cert-manager/csi-lib/test/testkit"
	"github.com/cert-manager/csi-lib/test/testkit/podcertapp"
)

const bundleName = "credentialbundle.pem"

// plainStore is a Filesystem on a plain directory (no tmpfs: tests may not mount), with one
// registered volume.
func plainStore(t *testing.T, volumeContext map[string]string) (*storage.Filesystem, metadata.Metadata) {
	t.Helper()
	fsys, err := storage.NewFilesystemWithOptions(testr.New(t), t.TempDir(), storage.FilesystemOptions{PlainDirectory: true, Mounter: mount.NewFakeMounter(nil)})
	if err != nil {
		t.Fatal(err)
	}
	meta := metadata.Metadata{VolumeID: "csi-0a9d8c7b", TargetPath: "/target", VolumeContext: volumeContext}
	if _, err := fsys.RegisterMetadata(meta); err != nil {
		t.Fatal(err)
	}
	return fsys, meta
}

// signed is one issuance: a new key and its chain (the leaf, then the CA).
func signed(t *testing.T, ca *testkit.CA) (crypto.PrivateKey, []byte) {
	t.Helper()
	key, err := testkit.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	csr, err := signCSR(metadata.Metadata{}, key, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "my-app-0"}})
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Sign(csr, time.Now().Add(-time.Minute), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return key, append(leaf, ca.CertPEM...)
}

// readSet reads tls.key, tls.crt and the bundle in dir and returns the serial of the leaf they
// share; an error if an application would refuse one of them, or if they are not of one
// issuance.
func readSet(dir string) (*big.Int, error) {
	var data [3][]byte
	for i, name := range []string{"tls.key", "tls.crt", bundleName} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		data[i] = b
	}
	pair, err := podcertapp.ReadKeyAndChain(data[0], data[1])
	if err != nil {
		return nil, err
	}
	bundle, err := podcertapp.ReadBundle(data[2])
	if err != nil {
		return nil, err
	}
	if !bundle.Leaf().Equal(pair.Leaf()) || !bundle.Key.(interface{ Equal(crypto.PrivateKey) bool }).Equal(pair.Key) {
		return nil, errors.New("the bundle and tls.key/tls.crt are of different issuances")
	}
	return bundle.Leaf().SerialNumber, nil
}

// checkingStore checks, after every WriteFiles call, that the files read through their visible
// names are one complete issuance: a WriteKeypair that wrote the bundle apart from the key and
// chain would leave a state between its calls that fails here, whatever the timing.
type checkingStore struct {
	*storage.Filesystem
	calls  int
	failed []error
}

func (s *checkingStore) WriteFiles(meta metadata.Metadata, files map[string][]byte) error {
	if err := s.Filesystem.WriteFiles(meta, files); err != nil {
		return err
	}
	s.calls++
	if _, err := readSet(s.PathForVolume(meta.VolumeID)); err != nil {
		s.failed = append(s.failed, fmt.Errorf("after WriteFiles call %d: %w", s.calls, err))
	}
	return nil
}

// TestCredentialBundleAcrossRenewals: with the credential-bundle attribute, the driver's
// WriteKeypair writes the bundle in the same set as tls.key and tls.crt, through the real
// Filesystem. After every WriteFiles call and every renewal the files read through their visible
// names are of one issuance, the newest; while renewals run, a reader reading the bundle through
// its name (as a pod certificate's application does) never sees it torn or missing, and one
// reading the three files through one resolution of "..data" (the projection's promise) never
// sees two issuances.
func TestCredentialBundleAcrossRenewals(t *testing.T) {
	ca, err := testkit.NewCA("example-ca")
	if err != nil {
		t.Fatal(err)
	}
	fsys, meta := plainStore(t, map[string]string{CredentialBundleAttribute: bundleName})
	store := &checkingStore{Filesystem: fsys}
	write := keypairWriter(store)
	dir := fsys.PathForVolume(meta.VolumeID)

	key, chain := signed(t, ca)
	if err := write(meta, key, chain, ca.CertPEM); err != nil {
		t.Fatal(err)
	}
	if _, err := readSet(dir); err != nil {
		t.Fatal(err)
	}

	var stop atomic.Bool
	var bundleReads, setReads, regenerated atomic.Int64
	var wg sync.WaitGroup
	failures := make(chan error, 100)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			b, err := os.ReadFile(filepath.Join(dir, bundleName))
			if err == nil {
				_, err = podcertapp.ReadBundle(b)
			}
			if err != nil {
				failures <- err
				return
			}
			bundleReads.Add(1)
			gen, err := os.Readlink(filepath.Join(dir, "..data"))
			if err == nil {
				_, err = readSet(filepath.Join(dir, gen))
			}
			switch {
			case errors.Is(err, fs.ErrNotExist):
				regenerated.Add(1) // the generation was replaced and removed meanwhile: read again
			case err != nil:
				failures <- err
				return
			default:
				setReads.Add(1)
			}
		}
	}()

	const renewals = 30
	for i := range renewals {
		key, chain := signed(t, ca)
		if err := write(meta, key, chain, ca.CertPEM); err != nil {
			t.Fatalf("renewal %d: %v", i, err)
		}
		serial, err := readSet(dir)
		if err != nil {
			t.Fatalf("after renewal %d, through the visible names: %v", i, err)
		}
		leaf, _ := testkit.VerifyKeyPair(mustRead(t, dir, "tls.key"), chain, ca.CertPEM, time.Now())
		if leaf == nil || serial.Cmp(leaf.SerialNumber) != 0 {
			t.Fatalf("after renewal %d the files are not of that renewal", i)
		}
	}
	stop.Store(true)
	wg.Wait()
	for _, err := range store.failed {
		t.Error(err)
	}
	if store.calls != renewals+1 {
		t.Errorf("%d WriteFiles calls for %d key pairs; want one each", store.calls, renewals+1)
	}
	close(failures)
	for err := range failures {
		t.Errorf("a concurrent reader: %v", err)
	}
	if bundleReads.Load() == 0 || setReads.Load() == 0 {
		t.Fatalf("the reader did not run: %d bundle reads, %d set reads", bundleReads.Load(), setReads.Load())
	}
	t.Logf("%d renewals; %d bundle reads, %d set reads, %d re-reads after a swap", renewals, bundleReads.Load(), setReads.Load(), regenerated.Load())
}

// TestNoAttributeNoBundle: without the attribute the volume holds tls.key, tls.crt and ca.crt
// alone, as before.
func TestNoAttributeNoBundle(t *testing.T) {
	ca, err := testkit.NewCA("example-ca")
	if err != nil {
		t.Fatal(err)
	}
	fsys, meta := plainStore(t, nil)
	key, chain := signed(t, ca)
	if err := keypairWriter(fsys)(meta, key, chain, ca.CertPEM); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(fsys.PathForVolume(meta.VolumeID))
	if err != nil {
		t.Fatal(err)
	}
	var visible []string
	for _, e := range entries {
		if e.Type()&fs.ModeSymlink != 0 && e.Name() != "..data" {
			visible = append(visible, e.Name())
		}
	}
	if want := []string{"ca.crt", "tls.crt", "tls.key"}; !slices.Equal(visible, want) {
		t.Fatalf("visible files %v; want %v", visible, want)
	}
}

// TestBundleAttributeNamingAnotherFile: a bundle name that is one of the driver's own files is
// refused with the attribute named, and nothing is written.
func TestBundleAttributeNamingAnotherFile(t *testing.T) {
	ca, err := testkit.NewCA("example-ca")
	if err != nil {
		t.Fatal(err)
	}
	fsys, meta := plainStore(t, map[string]string{CredentialBundleAttribute: "tls.crt"})
	key, chain := signed(t, ca)
	err = keypairWriter(fsys)(meta, key, chain, ca.CertPEM)
	if err == nil {
		t.Fatal("no error")
	}
	t.Log(err)
	if _, err := fsys.ReadFile(meta.VolumeID, "tls.key"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("tls.key was written: %v", err)
	}
}

func mustRead(t *testing.T, dir, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
