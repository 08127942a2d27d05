package manager

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"sort"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/tools/cache"

	"github.com/cert-manager/csi-lib/internal/api"
	"github.com/cert-manager/csi-lib/internal/api/util"
	"github.com/cert-manager/csi-lib/metadata"
)

// cacheRetryInterval is how soon an attempt re-reads the informer cache after an error other
// than "not found" (on the injected clock).
const cacheRetryInterval = time.Second

// issue makes one issuance attempt for a volume; see the package documentation for the steps.
func (m *Manager) issue(ctx context.Context, v *volume) error {
	m.opts.Metrics.IncrementIssueCallCountTotal(m.nodeNameHash, v.id)
	if err := waitForSync(ctx, m.informer.HasSynced); err != nil {
		return fmt.Errorf("CertificateRequest informer not synced: %w", context.Cause(ctx))
	}

	// Step 1: delete requests beyond MaxRequestsPerVolume, oldest first.
	reqs, err := m.requestsForVolume(v.id)
	if err != nil {
		return err
	}
	if reqs, err = m.deleteOldest(ctx, v, reqs, m.opts.MaxRequestsPerVolume); err != nil {
		return err
	}

	// Step 2: read metadata.
	meta, err := m.opts.MetadataReader.ReadMetadata(v.id)
	if err != nil {
		return fmt.Errorf("reading metadata: %w", err)
	}

	// Step 3: resume the newest request if it is pending and its key is still in memory; a
	// pending request whose key is gone (a restart) can never be used, so delete it.
	if n := len(reqs); n > 0 && isPending(reqs[n-1]) {
		newest := reqs[n-1]
		if key, ok := m.pendingKey(newest); ok {
			v.log.V(2).Info("Resuming pending CertificateRequest", "request", newest.Name)
			return m.waitAndWrite(ctx, v, meta, newest.Namespace, newest.Name, key)
		}
		if err := m.deleteRequest(ctx, v, newest); err != nil {
			return err
		}
		reqs = reqs[:n-1]
	}

	// Step 4: the readiness gate.
	if ready, reason := m.opts.ReadyToRequest(meta); !ready {
		return &NotReadyToRequestError{Reason: reason}
	}

	// Step 5: key, request and CSR from the driver.
	key, err := m.opts.GeneratePrivateKey(meta)
	if err != nil {
		return fmt.Errorf("generating private key: %w", err)
	}
	bundle, err := m.opts.GenerateRequest(meta)
	if err != nil {
		return fmt.Errorf("generating certificate request: %w", err)
	}
	csrPEM, err := m.opts.SignRequest(meta, key, bundle.Request)
	if err != nil {
		return fmt.Errorf("signing certificate request: %w", err)
	}

	// Step 6: make room for the new request, then create it.
	if _, err := m.deleteOldest(ctx, v, reqs, m.opts.MaxRequestsPerVolume-1); err != nil {
		return err
	}
	client, err := m.opts.ClientForMetadata(meta)
	if err != nil {
		return fmt.Errorf("building client for volume: %w", err)
	}
	req := m.newRequest(meta, bundle, csrPEM)
	// Remember the key before the request exists, so an informer event never finds a request
	// of ours without it.
	nsName := req.Namespace + "/" + req.Name
	m.mu.Lock()
	m.pendingKeys[nsName] = pendingKey{volumeID: v.id, key: key}
	m.mu.Unlock()
	created, err := client.CertmanagerV1().CertificateRequests(req.Namespace).Create(ctx, req, metav1.CreateOptions{})
	if err != nil {
		m.dropKey(nsName)
		return fmt.Errorf("creating CertificateRequest: %w", err)
	}
	v.log.Info("Created CertificateRequest", "request", created.Name, "namespace", created.Namespace)

	// Step 7: wait for it, then hand the key pair to the driver.
	return m.waitAndWrite(ctx, v, meta, created.Namespace, created.Name, key)
}

func (m *Manager) newRequest(meta metadata.Metadata, bundle *CertificateRequestBundle, csrPEM []byte) *cmapi.CertificateRequest {
	req := &cmapi.CertificateRequest{
		ObjectMeta: metav1.ObjectMeta{
			Name:        string(uuid.NewUUID()),
			Namespace:   bundle.Namespace,
			Annotations: bundle.Annotations,
			Labels: map[string]string{
				api.NodeIDHashLabelKey:   m.nodeNameHash,
				api.VolumeIDHashLabelKey: util.HashIdentifier(meta.VolumeID),
			},
			// The apiserver sets its own; fake clientsets keep this one, so ordering works there.
			CreationTimestamp: metav1.NewTime(m.clock.Now()),
		},
		Spec: cmapi.CertificateRequestSpec{
			Request:   csrPEM,
			IsCA:      bundle.IsCA,
			Usages:    bundle.Usages,
			IssuerRef: bundle.IssuerRef,
		},
	}
	if bundle.Duration > 0 {
		req.Spec.Duration = &metav1.Duration{Duration: bundle.Duration}
	}
	podName, podUID := meta.VolumeContext[podNameKey], meta.VolumeContext[podUIDKey]
	if podName != "" && podUID != "" {
		req.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: "v1",
			Kind:       "Pod",
			Name:       podName,
			UID:        types.UID(podUID),
		}}
	}
	return req
}

// waitAndWrite waits for a submitted request to finish, then writes the key pair.
func (m *Manager) waitAndWrite(ctx context.Context, v *volume, meta metadata.Metadata, namespace, name string, key any) error {
	req, err := m.waitForRequest(ctx, namespace, name)
	if err != nil {
		if !errors.Is(err, errAttemptTimeout) && !errors.Is(err, errStopped) && ctx.Err() == nil {
			// Denied, failed or deleted: the key is of no further use.
			m.dropKey(namespace + "/" + name)
		}
		return err
	}
	nit, err := defaultNextIssuanceTime(req.Status.Certificate)
	if err != nil {
		m.dropKey(namespace + "/" + name)
		return fmt.Errorf("CertificateRequest %s/%s: %w", namespace, name, err)
	}
	firstCertificate := meta.NextIssuanceTime == nil
	meta.NextIssuanceTime = &nit
	if err := m.opts.WriteKeypair(meta, key, req.Status.Certificate, req.Status.CA); err != nil {
		return fmt.Errorf("writing key pair: %w", err)
	}
	m.dropKey(namespace + "/" + name)
	v.fallbackDue.Store(&nit)
	if firstCertificate {
		m.opts.Metrics.ObservePublishToFirstCertificate(m.nodeNameHash, m.clock.Since(v.managedAt))
	}
	return nil
}

// waitForRequest waits until the informer reports the request issued (returned), denied or
// failed (errors carrying the request's message). It reacts to informer events; a request not
// yet in the cache is waited for, and a cache error other than "not found" is retried.
func (m *Manager) waitForRequest(ctx context.Context, namespace, name string) (*cmapi.CertificateRequest, error) {
	notify, unwatch := m.watch(namespace + "/" + name)
	defer unwatch()
	seen := false
	for {
		var retry <-chan time.Time
		req, err := m.lister.CertificateRequests(namespace).Get(name)
		switch {
		case err == nil:
			seen = true
			if done, err := requestOutcome(req); done {
				return req, err
			}
		case apierrors.IsNotFound(err):
			if seen {
				return nil, fmt.Errorf("CertificateRequest %s/%s was deleted before it was issued", namespace, name)
			}
		default:
			t := m.clock.NewTimer(cacheRetryInterval)
			defer t.Stop()
			retry = t.C()
		}
		select {
		case <-notify:
		case <-retry:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for CertificateRequest %s/%s: %w", namespace, name, context.Cause(ctx))
		}
	}
}

// requestOutcome reports whether a request is finished and, if it is not issued, why.
func requestOutcome(req *cmapi.CertificateRequest) (bool, error) {
	if c := condition(req, cmapi.CertificateRequestConditionDenied); c != nil && c.Status == cmmeta.ConditionTrue {
		return true, fmt.Errorf("CertificateRequest %s/%s was denied: %s", req.Namespace, req.Name, c.Message)
	}
	if c := condition(req, cmapi.CertificateRequestConditionInvalidRequest); c != nil && c.Status == cmmeta.ConditionTrue {
		return true, fmt.Errorf("CertificateRequest %s/%s is invalid: %s", req.Namespace, req.Name, c.Message)
	}
	if c := condition(req, cmapi.CertificateRequestConditionReady); c != nil {
		switch {
		case c.Status == cmmeta.ConditionFalse && c.Reason == cmapi.CertificateRequestReasonFailed:
			return true, fmt.Errorf("CertificateRequest %s/%s failed: %s", req.Namespace, req.Name, c.Message)
		case c.Status == cmmeta.ConditionTrue && len(req.Status.Certificate) > 0:
			return true, nil
		}
	}
	return false, nil
}

func isPending(req *cmapi.CertificateRequest) bool {
	done, _ := requestOutcome(req)
	return !done
}

func condition(req *cmapi.CertificateRequest, t cmapi.CertificateRequestConditionType) *cmapi.CertificateRequestCondition {
	for i := range req.Status.Conditions {
		if req.Status.Conditions[i].Type == t {
			return &req.Status.Conditions[i]
		}
	}
	return nil
}

// defaultNextIssuanceTime is two thirds of the way from the leaf's NotBefore to its NotAfter.
func defaultNextIssuanceTime(chain []byte) (time.Time, error) {
	block, _ := pem.Decode(chain)
	if block == nil {
		return time.Time{}, errors.New("issued certificate is not PEM")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return time.Time{}, fmt.Errorf("parsing issued certificate: %w", err)
	}
	life := cert.NotAfter.Sub(cert.NotBefore)
	return cert.NotBefore.Add(life * 2 / 3), nil
}

// requestsForVolume returns the volume's requests from the informer cache, oldest first, using
// the volume-hash index (no scan over the node's requests).
func (m *Manager) requestsForVolume(volumeID string) ([]*cmapi.CertificateRequest, error) {
	objs, err := m.informer.GetIndexer().ByIndex(volumeHashIndex, util.HashIdentifier(volumeID))
	if err != nil {
		return nil, fmt.Errorf("listing CertificateRequests of volume: %w", err)
	}
	reqs := make([]*cmapi.CertificateRequest, 0, len(objs))
	for _, o := range objs {
		if req, ok := o.(*cmapi.CertificateRequest); ok && req.DeletionTimestamp == nil {
			reqs = append(reqs, req)
		}
	}
	sort.Slice(reqs, func(i, j int) bool {
		ti, tj := reqs[i].CreationTimestamp, reqs[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return ti.Before(&tj)
		}
		return reqs[i].Name < reqs[j].Name
	})
	return reqs, nil
}

// deleteOldest deletes the oldest requests until at most keep remain, and returns the rest.
func (m *Manager) deleteOldest(ctx context.Context, v *volume, reqs []*cmapi.CertificateRequest, keep int) ([]*cmapi.CertificateRequest, error) {
	if keep < 0 {
		keep = 0
	}
	for len(reqs) > keep {
		if err := m.deleteRequest(ctx, v, reqs[0]); err != nil {
			return nil, err
		}
		reqs = reqs[1:]
	}
	return reqs, nil
}

func (m *Manager) deleteRequest(ctx context.Context, v *volume, req *cmapi.CertificateRequest) error {
	err := m.opts.Client.CertmanagerV1().CertificateRequests(req.Namespace).Delete(ctx, req.Name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting stale CertificateRequest %s/%s: %w", req.Namespace, req.Name, err)
	}
	m.dropKey(req.Namespace + "/" + req.Name)
	v.log.V(2).Info("Deleted stale CertificateRequest", "request", req.Name)
	return nil
}

func (m *Manager) pendingKey(req *cmapi.CertificateRequest) (any, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	pk, ok := m.pendingKeys[req.Namespace+"/"+req.Name]
	return pk.key, ok
}

func (m *Manager) dropKey(nsName string) {
	m.mu.Lock()
	delete(m.pendingKeys, nsName)
	m.mu.Unlock()
}

// watch registers interest in changes to one request.
func (m *Manager) watch(nsName string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	m.mu.Lock()
	if m.watchers[nsName] == nil {
		m.watchers[nsName] = make(map[chan struct{}]struct{})
	}
	m.watchers[nsName][ch] = struct{}{}
	m.mu.Unlock()
	return ch, func() {
		m.mu.Lock()
		delete(m.watchers[nsName], ch)
		if len(m.watchers[nsName]) == 0 {
			delete(m.watchers, nsName)
		}
		m.mu.Unlock()
	}
}

// requestChanged is the informer's add and update handler: it wakes attempts waiting on the
// request.
func (m *Manager) requestChanged(obj any) {
	key, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for ch := range m.watchers[key] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// requestDeleted forgets the key of a deleted request and wakes its waiters.
func (m *Manager) requestDeleted(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	m.dropKey(key)
	m.requestChanged(cache.ExplicitKey(key))
}
