package manager

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/cert-manager/csi-lib/storage"
)

// Persisted pending keys: when the store implements storage.PendingKeyStore, the private key
// of the request an attempt creates is written beside the volume's metadata before the request
// is created, as a PEM block ("PRIVATE KEY", PKCS #8) whose header names the request. A
// restarted manager (or any attempt that finds no key in memory) resumes the volume's newest
// pending request with it, after checking it against the request's CSR. The file goes as soon
// as its key is of no more use: the key pair is written, the request is denied, failed, deleted
// or superseded, or the volume is removed (with the volume's directory).

// pendingKeyRequestHeader is the PEM header naming the request a persisted key belongs to.
const pendingKeyRequestHeader = "CertificateRequest"

// keyStore returns the store's PendingKeyStore, or nil if it has none.
func (m *Manager) keyStore() storage.PendingKeyStore {
	ks, _ := m.opts.MetadataReader.(storage.PendingKeyStore)
	return ks
}

// persistKey writes the key of a request about to be created, if the store can keep it. A key
// that cannot be encoded, or a failed write, is logged: the request then lives on the key in
// memory only, as with a store without PendingKeyStore.
func (m *Manager) persistKey(v *volume, reqKey string, key crypto.PrivateKey) {
	ks := m.keyStore()
	if ks == nil {
		return
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		m.logFor(v).V(2).Info("Cannot persist the private key of a pending request; it will not survive a restart", "request", reqKey, "key_type", fmt.Sprintf("%T", key))
		return
	}
	data := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Headers: map[string]string{pendingKeyRequestHeader: reqKey}, Bytes: der})
	m.keyFileMu.Lock()
	defer m.keyFileMu.Unlock()
	if err := ks.WritePendingKey(v.id, data); err != nil {
		m.logFor(v).Error(err, "Cannot persist the private key of a pending request; it will not survive a restart", "request", reqKey)
	}
}

// readPersistedKey decodes the volume's persisted key: the request it names and the key.
// found is false when there is none.
func (m *Manager) readPersistedKey(ks storage.PendingKeyStore, volumeID string) (reqKey string, key crypto.Signer, found bool, err error) {
	data, err := ks.ReadPendingKey(volumeID)
	if errors.Is(err, storage.ErrNotFound) {
		return "", nil, false, nil
	}
	if err != nil {
		return "", nil, false, err
	}
	reqKey, key, err = decodePendingKey(data)
	return reqKey, key, true, err
}

// decodePendingKey decodes a persisted key: the request its header names, and the key.
func decodePendingKey(data []byte) (reqKey string, key crypto.Signer, err error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return "", nil, errors.New("persisted pending key is not PEM")
	}
	parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return "", nil, fmt.Errorf("parsing persisted pending key: %w", err)
	}
	signer, ok := parsed.(crypto.Signer)
	if !ok {
		return "", nil, fmt.Errorf("persisted pending key of type %T cannot sign", parsed)
	}
	return block.Headers[pendingKeyRequestHeader], signer, nil
}

// recoverPersistedKey looks for a persisted key for the volume's newest resumable request
// (nil if there is none). It returns the key if the store holds one for that request and it
// matches the request's CSR, and remembers it in memory. A persisted key for another request
// (a key without a request) or one that does not match is removed and logged.
func (m *Manager) recoverPersistedKey(v *volume, newest *cmapi.CertificateRequest) (any, bool) {
	ks := m.keyStore()
	if ks == nil {
		return nil, false
	}
	m.keyFileMu.Lock()
	defer m.keyFileMu.Unlock()
	reqKey, key, found, err := m.readPersistedKey(ks, v.id)
	if !found && err == nil {
		if newest == nil || !m.adoptSweptKeyLocked(ks, v) {
			return nil, false
		}
		reqKey, key, found, err = m.readPersistedKey(ks, v.id)
	}
	log := m.logFor(v)
	remove := func(why string) {
		log.Info("Removing a persisted pending key: "+why, "request", reqKey)
		if err := ks.RemovePendingKey(v.id); err != nil {
			log.Error(err, "Removing a persisted pending key")
		}
	}
	switch {
	case err != nil:
		remove(err.Error())
		return nil, false
	case newest == nil || reqKey != requestKey(newest.Namespace, newest.Name):
		remove("its request is not the volume's pending request")
		return nil, false
	case !keyMatchesRequest(key, newest):
		remove("it does not match the request's CSR")
		return nil, false
	}
	m.mu.Lock()
	m.pendingKeys[reqKey] = pendingKey{volumeID: v.id, key: key}
	m.mu.Unlock()
	log.Info("Recovered the persisted private key of a pending CertificateRequest", "request", newest.Name, "namespace", newest.Namespace)
	return key, true
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

// removePersistedKey removes the volume's persisted key if it belongs to reqKey: a newer
// request's key is left alone.
func (m *Manager) removePersistedKey(volumeID, reqKey string) {
	ks := m.keyStore()
	if ks == nil {
		return
	}
	m.keyFileMu.Lock()
	defer m.keyFileMu.Unlock()
	persisted, _, found, err := m.readPersistedKey(ks, volumeID)
	if found && (err != nil || persisted == reqKey) {
		if err := ks.RemovePendingKey(volumeID); err != nil {
			m.log.Error(err, "Removing a persisted pending key", "volume_id", volumeID, "request", reqKey)
		}
	}
}

// Swept keys: when the start-up sweep removed a volume whose publish never succeeded (the
// driver stopped during its first issuance), a store that implements storage.SweptKeyStore
// kept the volume's pending key. If the pod still exists, kubelet publishes the same volume ID
// again, with a backoff that reaches about two minutes; that publish adopts the kept key (moves
// it back into the volume) and resumes the volume's request instead of creating another. A kept
// key is removed when its request is deleted or was already gone at start-up, and in any case
// sweptKeyGrace after the manager started.

// sweptKeyGrace is how long a kept key waits for its volume to be published again: more than
// two of kubelet's longest retry intervals.
const sweptKeyGrace = 5 * time.Minute

// sweptKeys returns the store's SweptKeyStore, or nil if it has none.
func (m *Manager) sweptKeyStore() storage.SweptKeyStore {
	ss, _ := m.opts.MetadataReader.(storage.SweptKeyStore)
	return ss
}

// loadSweptKeys learns which request each kept key belongs to, removes those whose request is
// gone (the informer has synced) or that cannot be decoded, and arms the grace period's end.
func (m *Manager) loadSweptKeys() {
	ss := m.sweptKeyStore()
	if ss == nil {
		return
	}
	ids, err := ss.SweptPendingKeys()
	if err != nil {
		m.log.Error(err, "Cannot list the pending keys the start-up sweep kept")
		return
	}
	m.keyFileMu.Lock()
	defer m.keyFileMu.Unlock()
	for _, id := range ids {
		log := m.log.WithValues("volume_id", id)
		data, err := ss.ReadSweptPendingKey(id)
		if err != nil {
			log.Error(err, "Cannot read a pending key the start-up sweep kept")
			continue
		}
		reqKey, _, err := decodePendingKey(data)
		if err == nil && !m.requestExists(reqKey) {
			err = errors.New("its request no longer exists")
		}
		if err != nil {
			m.removeSweptKeyLocked(ss, id, "request", reqKey, "reason", err.Error())
			continue
		}
		m.sweptKeys[id] = reqKey
		log.Info("Keeping the pending key of a removed volume until its volume is published again", "request", reqKey, "grace_period", sweptKeyGrace)
	}
	if len(m.sweptKeys) > 0 {
		m.stopSweptKeyExpiry = m.afterFunc(sweptKeyGrace, m.expireSweptKeys)
	}
}

// requestExists reports whether the informer's cache holds the request.
func (m *Manager) requestExists(reqKey string) bool {
	ns, name, err := cache.SplitMetaNamespaceKey(reqKey)
	if err != nil || name == "" {
		return false
	}
	_, err = m.lister.CertificateRequests(ns).Get(name)
	return err == nil
}

// adoptSweptKeyLocked moves the key the sweep kept for v's volume ID back into the volume, so
// that the attempt resumes the volume's request with it; m.keyFileMu is held. It reports
// whether there was one.
func (m *Manager) adoptSweptKeyLocked(ks storage.PendingKeyStore, v *volume) bool {
	ss := m.sweptKeyStore()
	if _, kept := m.sweptKeys[v.id]; !kept || ss == nil {
		return false
	}
	delete(m.sweptKeys, v.id)
	data, err := ss.ReadSweptPendingKey(v.id)
	if err == nil {
		err = ks.WritePendingKey(v.id, data)
	}
	if err != nil {
		m.logFor(v).Error(err, "Cannot adopt the pending key the start-up sweep kept")
		return false
	}
	if err := ss.RemoveSweptPendingKey(v.id); err != nil {
		m.logFor(v).Error(err, "Removing an adopted swept pending key")
	}
	m.logFor(v).Info("Adopted the pending key the start-up sweep kept for this volume")
	return true
}

// dropSweptKey removes the kept key that belongs to a deleted request, if any.
func (m *Manager) dropSweptKey(reqKey string) {
	ss := m.sweptKeyStore()
	if ss == nil {
		return
	}
	m.keyFileMu.Lock()
	defer m.keyFileMu.Unlock()
	for id, kept := range m.sweptKeys {
		if kept == reqKey {
			m.removeSweptKeyLocked(ss, id, "request", reqKey, "reason", "its request was deleted")
		}
	}
}

// expireSweptKeys removes every kept key still waiting when the grace period ends.
func (m *Manager) expireSweptKeys() {
	tr := m.active.track()
	if tr == nil {
		return
	}
	defer tr.done()
	m.keyFileMu.Lock()
	defer m.keyFileMu.Unlock()
	for id, reqKey := range m.sweptKeys {
		m.removeSweptKeyLocked(m.sweptKeyStore(), id, "request", reqKey, "reason", "its volume was not published again within the grace period")
	}
}

// removeSweptKeyLocked removes a kept key and forgets it; m.keyFileMu is held.
func (m *Manager) removeSweptKeyLocked(ss storage.SweptKeyStore, volumeID string, keysAndValues ...any) {
	delete(m.sweptKeys, volumeID)
	log := m.log.WithValues("volume_id", volumeID)
	if err := ss.RemoveSweptPendingKey(volumeID); err != nil {
		log.Error(err, "Removing a pending key the start-up sweep kept", keysAndValues...)
		return
	}
	log.Info("Removed a pending key the start-up sweep kept", keysAndValues...)
}
