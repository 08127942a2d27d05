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
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"sync"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/go-logr/logr"

	"github.com/cert-manager/csi-lib/storage"
)

// slowFiles is a key store whose writes wait until the test lets them finish.
type slowFiles struct {
	writing chan struct{} // receives when a write starts
	finish  chan struct{} // closed to let writes finish

	mu    sync.Mutex
	files map[string][]byte
}

func (f *slowFiles) WritePendingKey(volumeID string, data []byte) error {
	f.writing <- struct{}{}
	<-f.finish
	f.mu.Lock()
	defer f.mu.Unlock()
	f.files[volumeID] = data
	return nil
}

func (f *slowFiles) ReadPendingKey(volumeID string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if data, ok := f.files[volumeID]; ok {
		return data, nil
	}
	return nil, storage.ErrNotFound
}

func (f *slowFiles) RemovePendingKey(volumeID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.files, volumeID)
	return nil
}

// TestEventsNeverWaitForAKeyFile: while one volume's key file is being written (a slow disk),
// the informer's events (Seen, and Drop of another volume's request) and the reads of the
// keys in memory go on; a Drop of the request being written waits for its write, and then
// removes its file, so that no file outlives its key.
func TestEventsNeverWaitForAKeyFile(t *testing.T) {
	files := &slowFiles{writing: make(chan struct{}), finish: make(chan struct{}), files: map[string][]byte{}}
	k := New(logr.Discard(), files)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}

	remembered := make(chan struct{})
	go func() {
		defer close(remembered)
		k.Remember(logr.Discard(), "v1", "ns/r1", key)
	}()
	<-files.writing // v1's write has started, and waits

	// What the informer and the attempts of other volumes do meanwhile returns: were any of
	// these to wait for v1's write, the test would never get past them.
	k.HoldUnseen("ns/r1", &cmapi.CertificateRequest{}, true)
	k.Seen("ns/r1")
	k.Seen("ns/other")
	k.Drop("ns/other")
	if got, ok := k.InMemoryKey("ns/r1"); !ok || got != key {
		t.Fatalf("the key in memory is %v, %v while its file is written", got, ok)
	}
	if _, unseen := k.UnseenRequest("v1"); unseen {
		t.Fatal("the request is still unseen after Seen")
	}

	dropped := make(chan struct{})
	go func() {
		defer close(dropped)
		k.Drop("ns/r1")
	}()
	close(files.finish)
	<-remembered
	<-dropped
	if _, err := files.ReadPendingKey("v1"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("the dropped request's key file outlived it (read: %v)", err)
	}
	for _, reqKey := range []string{"ns/r1", "ns/other"} {
		if _, ok := k.InMemoryKey(reqKey); ok {
			t.Fatalf("the key of %s is held after the drop", reqKey)
		}
	}
}

// memFiles is a key store in memory.
type memFiles struct {
	mu    sync.Mutex
	files map[string][]byte
}

func (f *memFiles) WritePendingKey(volumeID string, data []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.files[volumeID] = data
	return nil
}

func (f *memFiles) ReadPendingKey(volumeID string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if data, ok := f.files[volumeID]; ok {
		return data, nil
	}
	return nil, storage.ErrNotFound
}

func (f *memFiles) RemovePendingKey(volumeID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.files, volumeID)
	return nil
}

// TestRequestDeletedForgetsTheKey: a request that no longer exists (deleted, or whose create the
// apiserver refused) leaves nothing behind: its key is forgotten in memory, its hold ends and its
// file goes.
func TestRequestDeletedForgetsTheKey(t *testing.T) {
	files := &memFiles{files: map[string][]byte{}}
	k := New(logr.Discard(), files)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k.Remember(logr.Discard(), "v1", "ns/r1", key)
	k.HoldUnseen("ns/r1", &cmapi.CertificateRequest{}, false)
	if _, err := files.ReadPendingKey("v1"); err != nil {
		t.Fatalf("the key was not persisted: %v", err)
	}
	k.Drop("ns/r1")
	if _, ok := k.InMemoryKey("ns/r1"); ok {
		t.Fatal("the key is held after the request was deleted")
	}
	if _, unseen := k.UnseenRequest("v1"); unseen {
		t.Fatal("the deleted request is still held as unseen")
	}
	if _, err := files.ReadPendingKey("v1"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("the deleted request's key file outlived it (read: %v)", err)
	}
}
