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

// Package pendingkeys holds the private keys of a node's submitted CertificateRequests until
// their key pairs are written: in memory, and, with a store that can keep them, in a file beside
// the volume's metadata, so that a restarted driver resumes a pending request instead of
// creating another. It is the only code that writes or removes those files.
package pendingkeys

import (
	"crypto"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/cert-manager/csi-lib/internal/certrequests"
	"github.com/cert-manager/csi-lib/internal/clockutil"
	"github.com/cert-manager/csi-lib/internal/keylock"
	"github.com/cert-manager/csi-lib/storage"
)

// Keys holds the private keys of submitted CertificateRequests whose key pair is not yet
// written, and is the only code that writes or deletes a persisted key file.
//
// In memory, keys are held by request key. They outlive UnmanageVolume, so that kubelet's retry
// of a publish resumes the same request; a key is dropped once its key pair is written, or when
// its request is denied, failed or deleted (the request's owner reference lets the garbage
// collector delete it with the pod).
//
// With a store that implements storage.PendingKeyStore, the key is also written beside the
// volume's metadata before its request is created, as a PEM block ("PRIVATE KEY", PKCS #8)
// whose header names the request. A restarted manager (or any attempt that finds no key in
// memory) resumes the volume's newest pending request with it, after checking it against the
// request's CSR. The file goes as soon as its key is of no more use, or with the volume.
//
// With a store that implements storage.SweptKeyStore, the keys the start-up sweep kept (of
// volumes whose first publish was in flight when the driver stopped) wait for their volume to
// be published again, which adopts the key back into the volume and resumes its request. A kept
// key is removed when its request is deleted or was already gone at start-up, and in any case
// SweptKeyGrace after start-up.
type Keys struct {
	log   logr.Logger
	store storage.PendingKeyStore // nil: keys live in memory only
	swept storage.SweptKeyStore   // nil: the store keeps no swept keys

	// files serialises the reads and writes of one volume's key files (its pending key and the
	// key the sweep kept): the informer's delete events remove keys while attempts write them.
	// A volume's file lock is taken before mu, never under it, and mu is never held across a
	// file's read or write, so that the informer's add and update events (Seen) never wait for
	// a disk. A delete event (Drop) removes the request's files, if any, itself.
	files keylock.Locks

	// mu guards the maps.
	mu       sync.Mutex
	inMemory map[string]Held
	// unseen holds, by volume ID, the request key of the volume's request that this process
	// created, or may have created, and that the informer's cache has not shown yet (see
	// HoldUnseen); its key is in inMemory.
	unseen map[string]string
	// sweptFor holds, by volume ID, the request each kept key belongs to.
	sweptFor map[string]string
	// stopExpiry stops the end of the kept keys' grace period.
	stopExpiry func() bool
}

// Held is the private key of one submitted request, and the volume it is for.
type Held struct {
	VolumeID string
	Key      any
	// Request is the request as it was sent, until the informer's cache shows it; nil after.
	Request *cmapi.CertificateRequest
	// Created: the apiserver answered the create of Request with the request (its outcome is
	// known); false while the outcome is unknown.
	Created bool
}

// New holds keys for the volumes of store: on disk too if store implements
// storage.PendingKeyStore, and the keys its start-up sweep kept if it implements
// storage.SweptKeyStore.
func New(log logr.Logger, store any) *Keys {
	k := &Keys{log: log, inMemory: make(map[string]Held), unseen: make(map[string]string), sweptFor: make(map[string]string)}
	k.store, _ = store.(storage.PendingKeyStore)
	k.swept, _ = store.(storage.SweptKeyStore)
	if k.store == nil {
		k.swept = nil // a kept key can only be adopted into a PendingKeyStore
	}
	return k
}

// Remember holds the key of a request about to be created, in memory and, if the store can
// keep it, on disk. A key that cannot be encoded, or a failed write, is logged: the request then
// lives on the key in memory only.
func (k *Keys) Remember(log logr.Logger, volumeID, reqKey string, key crypto.PrivateKey) {
	defer k.files.LockNoContext(volumeID)()
	k.mu.Lock()
	k.inMemory[reqKey] = Held{VolumeID: volumeID, Key: key}
	k.mu.Unlock()
	if k.store == nil {
		return
	}
	data, err := encodePendingKey(key, reqKey)
	if err != nil {
		log.V(2).Info("Cannot persist the private key of a pending request; it will not survive a restart", "request", reqKey, "key_type", fmt.Sprintf("%T", key))
		return
	}
	if err := k.store.WritePendingKey(volumeID, data); err != nil {
		log.Error(err, "Cannot persist the private key of a pending request; it will not survive a restart", "request", reqKey)
	}
}

// InMemoryKey returns the request's key if this process holds it.
func (k *Keys) InMemoryKey(reqKey string) (any, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	pk, ok := k.inMemory[reqKey]
	return pk.Key, ok
}

// HoldUnseen keeps the key of a request this process created (created is true), or may have
// created (the connection broke, or the deadline passed, after the create was sent), with the
// request as it was sent, until the informer's cache shows that request (Seen). Meanwhile the
// volume's next attempt settles that request (from the cache, else by reading it from the
// apiserver) instead of creating another: a cache that lags behind a create never costs a
// second request. The key was remembered before the create.
func (k *Keys) HoldUnseen(reqKey string, req *cmapi.CertificateRequest, created bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	pk, ok := k.inMemory[reqKey]
	if !ok {
		return
	}
	pk.Request, pk.Created = req, created
	k.inMemory[reqKey] = pk
	k.unseen[pk.VolumeID] = reqKey
}

// UnseenRequest returns what is held of the volume's request that the cache has not shown yet
// (HoldUnseen): the request as sent, its key and whether it was created for certain; ok is
// false when there is none.
func (k *Keys) UnseenRequest(volumeID string) (held Held, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	reqKey, ok := k.unseen[volumeID]
	if !ok {
		return Held{}, false
	}
	return k.inMemory[reqKey], true
}

// Seen records that the informer's cache shows the request: its key stays held as any pending
// request's, and the volume's attempts find the request in the cache from now on. The
// informer's add and update events call it for every request.
func (k *Keys) Seen(reqKey string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	pk, ok := k.inMemory[reqKey]
	if !ok || pk.Request == nil {
		return
	}
	pk.Request, pk.Created = nil, false
	k.inMemory[reqKey] = pk
	delete(k.unseen, pk.VolumeID)
}

// Drop forgets everything held for a request whose key can no longer be used (its key pair is
// written; it was denied, failed or deleted; its create was refused): its key in memory, the
// volume's persisted key if it is this request's (a newer request's key is left alone), and a key
// the sweep kept for it. The informer's delete events call it for every request.
func (k *Keys) Drop(reqKey string) {
	k.mu.Lock()
	pk, held := k.inMemory[reqKey]
	delete(k.inMemory, reqKey)
	if held && k.unseen[pk.VolumeID] == reqKey {
		delete(k.unseen, pk.VolumeID)
	}
	var swept []string
	for id, kept := range k.sweptFor {
		if kept == reqKey {
			delete(k.sweptFor, id)
			swept = append(swept, id)
		}
	}
	k.mu.Unlock()
	if held {
		k.removeFileOf(pk.VolumeID, reqKey)
	}
	for _, id := range swept {
		k.removeSwept(id, "request", reqKey, "reason", "its request was deleted")
	}
}

// removeFileOf removes the volume's persisted key if it is the request's (a newer request's key
// is left alone).
func (k *Keys) removeFileOf(volumeID, reqKey string) {
	if k.store == nil {
		return
	}
	defer k.files.LockNoContext(volumeID)()
	data, err := k.store.ReadPendingKey(volumeID)
	if err != nil {
		return // none, or unreadable: left alone
	}
	if goesWithRequest(data, reqKey) {
		if err := k.store.RemovePendingKey(volumeID); err != nil {
			k.log.Error(err, "Removing a persisted pending key", "volume_id", volumeID, "request", reqKey)
		}
	}
}

// Recover returns the persisted key of the volume's newest certrequests.Resumable request, newest,
// and holds it in memory, if the store has one for that request that matches the request's CSR. A
// key the start-up sweep kept for the volume is adopted first. A persisted key for another request,
// or one that does not match, is removed and logged.
func (k *Keys) Recover(log logr.Logger, volumeID string, newest *cmapi.CertificateRequest) (any, bool) {
	if k.store == nil {
		return nil, false
	}
	defer k.files.LockNoContext(volumeID)()
	reqKey, key, found, err := k.read(volumeID)
	if !found && err == nil {
		if !k.adoptSwept(log, volumeID) {
			return nil, false
		}
		reqKey, key, _, err = k.read(volumeID)
	}
	switch {
	case err != nil:
		k.remove(log, volumeID, reqKey, err.Error())
		return nil, false
	case reqKey != certrequests.Key(newest.Namespace, newest.Name):
		k.remove(log, volumeID, reqKey, "its request is not the volume's pending request")
		return nil, false
	case !keyMatchesRequest(key, newest):
		k.remove(log, volumeID, reqKey, "it does not match the request's CSR")
		return nil, false
	}
	k.mu.Lock()
	k.inMemory[reqKey] = Held{VolumeID: volumeID, Key: key}
	k.mu.Unlock()
	log.Info("Recovered the persisted private key of a pending CertificateRequest", "request", newest.Name, "namespace", newest.Namespace)
	return key, true
}

// RemoveUnclaimed removes the volume's persisted key, if any, when the volume has no pending
// request: the key belongs to a request that no longer exists.
func (k *Keys) RemoveUnclaimed(log logr.Logger, volumeID string) {
	if k.store == nil {
		return
	}
	defer k.files.LockNoContext(volumeID)()
	reqKey, _, found, err := k.read(volumeID)
	switch {
	case err != nil:
		k.remove(log, volumeID, reqKey, err.Error())
	case found:
		k.remove(log, volumeID, reqKey, "its request is not the volume's pending request")
	}
}

// remove removes the volume's persisted key and logs why; the volume's file lock is held.
func (k *Keys) remove(log logr.Logger, volumeID, reqKey, why string) {
	log.Info("Removing a persisted pending key: "+why, "request", reqKey)
	if err := k.store.RemovePendingKey(volumeID); err != nil {
		log.Error(err, "Removing a persisted pending key")
	}
}

// read decodes the volume's persisted key: the request it names and the key. found is false when
// there is none; the volume's file lock is held.
func (k *Keys) read(volumeID string) (reqKey string, key crypto.Signer, found bool, err error) {
	data, err := k.store.ReadPendingKey(volumeID)
	if errors.Is(err, storage.ErrNotFound) {
		return "", nil, false, nil
	}
	if err != nil {
		return "", nil, false, err
	}
	reqKey, key, err = decodePendingKey(data)
	return reqKey, key, true, err
}

// SweptKeyGrace is how long a kept key waits for its volume to be published again: more than
// two of kubelet's longest retry intervals (about two minutes).
const SweptKeyGrace = 5 * time.Minute

// LoadSwept learns which request each kept key belongs to and removes those whose request does
// not exist (requestExists reads the synced informer) or that cannot be decoded. If any key is
// kept, the end of the grace period on clk calls expire.
func (k *Keys) LoadSwept(requestExists func(reqKey string) bool, clk clock.Clock, expire func()) {
	if k.swept == nil {
		return
	}
	ids, err := k.swept.SweptPendingKeys()
	if err != nil {
		k.log.Error(err, "Cannot list the pending keys the start-up sweep kept")
		return
	}
	kept := make(map[string]string)
	for _, id := range ids {
		log := k.log.WithValues("volume_id", id)
		data, err := k.swept.ReadSweptPendingKey(id)
		if err != nil {
			log.Error(err, "Cannot read a pending key the start-up sweep kept")
			continue
		}
		reqKey, _, err := decodePendingKey(data)
		if err == nil && !requestExists(reqKey) {
			err = errors.New("its request no longer exists")
		}
		if err != nil {
			k.removeSwept(id, "request", reqKey, "reason", err.Error())
			continue
		}
		kept[id] = reqKey
		log.Info("Keeping the pending key of a removed volume until its volume is published again", "request", reqKey, "grace_period", SweptKeyGrace)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	maps.Copy(k.sweptFor, kept)
	if len(k.sweptFor) > 0 {
		k.stopExpiry = clockutil.AfterFunc(clk, SweptKeyGrace, expire)
	}
}

// ExpireSwept removes every kept key still waiting when the grace period ends.
func (k *Keys) ExpireSwept() {
	k.mu.Lock()
	expired := k.sweptFor
	k.sweptFor = make(map[string]string)
	k.mu.Unlock()
	for id, reqKey := range expired {
		k.removeSwept(id, "request", reqKey, "reason", "its volume was not published again within the grace period")
	}
}

// Stop stops the grace period's timer.
func (k *Keys) Stop() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopExpiry != nil {
		k.stopExpiry()
	}
}

// adoptSwept moves the key the sweep kept for the volume ID back into the volume; the volume's
// file lock is held. It reports whether there was one.
func (k *Keys) adoptSwept(log logr.Logger, volumeID string) bool {
	k.mu.Lock()
	_, kept := k.sweptFor[volumeID]
	delete(k.sweptFor, volumeID)
	k.mu.Unlock()
	if !kept {
		return false
	}
	data, err := k.swept.ReadSweptPendingKey(volumeID)
	if err == nil {
		err = k.store.WritePendingKey(volumeID, data)
	}
	if err != nil {
		log.Error(err, "Cannot adopt the pending key the start-up sweep kept")
		return false
	}
	if err := k.swept.RemoveSweptPendingKey(volumeID); err != nil {
		log.Error(err, "Removing an adopted swept pending key")
	}
	log.Info("Adopted the pending key the start-up sweep kept for this volume")
	return true
}

// removeSwept removes a kept key, which is no longer in sweptFor, under the volume's file lock.
func (k *Keys) removeSwept(volumeID string, keysAndValues ...any) {
	defer k.files.LockNoContext(volumeID)()
	log := k.log.WithValues("volume_id", volumeID)
	if err := k.swept.RemoveSweptPendingKey(volumeID); err != nil {
		log.Error(err, "Removing a pending key the start-up sweep kept", keysAndValues...)
		return
	}
	log.Info("Removed a pending key the start-up sweep kept", keysAndValues...)
}
