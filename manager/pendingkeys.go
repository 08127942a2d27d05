package manager

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"

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
	block, _ := pem.Decode(data)
	if block == nil {
		return "", nil, true, errors.New("persisted pending key is not PEM")
	}
	parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return "", nil, true, fmt.Errorf("parsing persisted pending key: %w", err)
	}
	signer, ok := parsed.(crypto.Signer)
	if !ok {
		return "", nil, true, fmt.Errorf("persisted pending key of type %T cannot sign", parsed)
	}
	return block.Headers[pendingKeyRequestHeader], signer, true, nil
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
		return nil, false
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
