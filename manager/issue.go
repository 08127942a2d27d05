package manager

import (
	"context"
	"fmt"
	"hash/fnv"
	"sort"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/tools/cache"

	"github.com/cert-manager/csi-lib/internal/api"
	"github.com/cert-manager/csi-lib/internal/api/util"
	"github.com/cert-manager/csi-lib/internal/certs"
	"github.com/cert-manager/csi-lib/metadata"
)

// cacheRetryInterval is how soon an attempt re-reads the informer cache after an error other
// than "not found" (on the injected clock).
const cacheRetryInterval = time.Second

// attempt is one issuance attempt of one volume.
type attempt struct {
	v *volume
	// tr is the loop goroutine's registration with Stop; nil for ManageVolumeImmediate's
	// attempt, which runs on the caller's goroutine.
	tr *tracked
	// deadline is a background attempt's timeout, paused while it waits for admission; nil for
	// ManageVolumeImmediate's attempt, which waits within the caller's deadline.
	deadline *attemptDeadline
}

// callDriver runs a driver-supplied function. It returns errStopped if the manager stopped
// while the function ran: the attempt must then return without doing anything more.
func (a *attempt) callDriver(f func()) error {
	if !a.tr.outside(f) {
		return errStopped
	}
	return nil
}

// issue makes one issuance attempt, in upstream's order:
//  1. delete the volume's requests beyond MaxRequestsPerVolume, oldest first;
//  2. read the metadata;
//  3. resume the newest request if it is resumable (see resumable): with its private key
//     still in memory, wait for it; without, delete it and go on; a request that is not
//     resumable is left alone;
//  4. ask the readiness gate (a refusal is a *NotReadyToRequestError), then wait for admission
//     (a slot under MaxConcurrentIssuances and an IssuanceRateLimit token; see admit), which
//     is held until the attempt is over; a resume (step 3) never waits for admission;
//  5. generate the key, the request bundle and the CSR; create the CertificateRequest;
//  6. wait for it; on success call WriteKeypair and forget the key.
func (m *Manager) issue(ctx context.Context, a *attempt) error {
	v := a.v
	m.opts.Metrics.IncrementIssueCallCountTotal(m.nodeNameHash, v.id)
	if err := m.waitForSync(ctx); err != nil {
		return fmt.Errorf("CertificateRequest informer not synced: %w", err)
	}

	// Step 1.
	reqs, err := m.requestsForVolume(v.id)
	if err != nil {
		return err
	}
	for len(reqs) > m.opts.MaxRequestsPerVolume {
		if err := m.deleteRequest(ctx, v, reqs[0]); err != nil {
			return err
		}
		reqs = reqs[1:]
	}

	// Step 2.
	meta, err := m.opts.MetadataReader.ReadMetadata(v.id)
	if err != nil {
		return fmt.Errorf("reading metadata: %w", err)
	}

	// Step 3. A key not in memory may have been persisted by an earlier process.
	if n := len(reqs); n > 0 && resumable(reqs[n-1]) {
		newest := reqs[n-1]
		key, ok := m.pendingKey(newest.Namespace, newest.Name)
		if !ok {
			key, ok = m.recoverPersistedKey(v, newest)
		}
		if ok {
			m.logFor(v).V(2).Info("Resuming CertificateRequest", "request", newest.Name, "namespace", newest.Namespace)
			return m.waitAndWrite(ctx, a, meta, newest.Namespace, newest.Name, key)
		}
		if err := m.deleteRequest(ctx, v, newest); err != nil {
			return err
		}
	} else {
		// No pending request: a persisted key is a key without a request.
		m.recoverPersistedKey(v, nil)
	}

	// Step 4.
	var ready bool
	var reason string
	if err := a.callDriver(func() { ready, reason = m.opts.ReadyToRequest(meta) }); err != nil {
		return err
	}
	if !ready {
		return &NotReadyToRequestError{Reason: reason}
	}
	release, err := m.admit(ctx, a)
	if err != nil {
		return err
	}
	defer release()

	// Step 5.
	var key any
	var bundle *CertificateRequestBundle
	var csrPEM []byte
	var client cmclient.Interface
	var driverErr error
	if err := a.callDriver(func() {
		if key, driverErr = m.opts.GeneratePrivateKey(meta); driverErr != nil {
			driverErr = fmt.Errorf("generating private key: %w", driverErr)
			return
		}
		if bundle, driverErr = m.opts.GenerateRequest(meta); driverErr != nil {
			driverErr = fmt.Errorf("generating certificate request: %w", driverErr)
			return
		}
		if csrPEM, driverErr = m.opts.SignRequest(meta, key, bundle.Request); driverErr != nil {
			driverErr = fmt.Errorf("signing certificate request: %w", driverErr)
			return
		}
		if client, driverErr = m.opts.ClientForMetadata(meta); driverErr != nil {
			driverErr = fmt.Errorf("building client for volume: %w", driverErr)
		}
	}); err != nil {
		return err
	}
	if driverErr != nil {
		return driverErr
	}
	// The driver's functions may outlast the attempt (unmanaged, stopped, deadline): then
	// nothing is created. The volume's context is checked directly: the attempt's context
	// learns of an unmanage asynchronously.
	if v.ctx.Err() != nil {
		return errStopped
	}
	if err := context.Cause(ctx); err != nil {
		return fmt.Errorf("creating CertificateRequest: %w", err)
	}
	req := m.newRequest(meta, bundle, csrPEM)
	// Remember the key before the request exists, so an informer event never finds a request
	// of ours without it.
	reqKey := requestKey(req.Namespace, req.Name)
	m.mu.Lock()
	m.pendingKeys[reqKey] = pendingKey{volumeID: v.id, key: key}
	m.createdSeq++
	m.created[reqKey] = m.createdSeq
	m.mu.Unlock()
	m.persistKey(v, reqKey, key)
	created, err := client.CertmanagerV1().CertificateRequests(req.Namespace).Create(ctx, req, metav1.CreateOptions{})
	if err != nil {
		m.forgetRequest(reqKey)
		return fmt.Errorf("creating CertificateRequest: %w", err)
	}
	m.logFor(v).Info("Created CertificateRequest", "request", created.Name, "namespace", created.Namespace)

	// Step 6.
	return m.waitAndWrite(ctx, a, meta, created.Namespace, created.Name, key)
}

// newRequest builds the CertificateRequest as upstream does: the node and volume hash labels,
// the bundle's annotations and spec, Duration always set, and exactly one owner reference to
// the pod (name and UID from the volume context, even if empty). CreationTimestamp is left to
// the apiserver.
func (m *Manager) newRequest(meta metadata.Metadata, bundle *CertificateRequestBundle, csrPEM []byte) *cmapi.CertificateRequest {
	return &cmapi.CertificateRequest{
		ObjectMeta: metav1.ObjectMeta{
			Name:        string(uuid.NewUUID()),
			Namespace:   bundle.Namespace,
			Annotations: bundle.Annotations,
			Labels: map[string]string{
				api.NodeIDHashLabelKey:   m.nodeNameHash,
				api.VolumeIDHashLabelKey: util.HashIdentifier(meta.VolumeID),
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1",
				Kind:       "Pod",
				Name:       meta.VolumeContext[metadata.PodNameVolumeContextKey],
				UID:        types.UID(meta.VolumeContext[metadata.PodUIDVolumeContextKey]),
			}},
		},
		Spec: cmapi.CertificateRequestSpec{
			Duration:  &metav1.Duration{Duration: bundle.Duration},
			Request:   csrPEM,
			IsCA:      bundle.IsCA,
			Usages:    bundle.Usages,
			IssuerRef: bundle.IssuerRef,
		},
	}
}

// waitAndWrite waits for a submitted request to finish, then hands the key pair to WriteKeypair
// (unless the volume was unmanaged meanwhile) and forgets the key.
func (m *Manager) waitAndWrite(ctx context.Context, a *attempt, meta metadata.Metadata, namespace, name string, key any) error {
	v := a.v
	reqKey := requestKey(namespace, name)
	req, finished, err := m.waitForRequest(ctx, namespace, name)
	if err != nil {
		if finished {
			// Denied, failed or deleted: the key is of no further use.
			m.dropKey(reqKey)
		}
		return err
	}
	nit, err := nextIssuanceTime(req.Status.Certificate, v.id, m.opts.RenewalJitter)
	if err != nil {
		m.dropKey(reqKey)
		return fmt.Errorf("CertificateRequest %s/%s: %w", namespace, name, err)
	}
	firstCertificate := !hasCertificate(meta)
	meta.NextIssuanceTime = &nit

	v.fence.Lock()
	if v.fenced {
		v.fence.Unlock()
		return errStopped
	}
	var writeErr error
	stopErr := a.callDriver(func() { writeErr = m.opts.WriteKeypair(meta, key, req.Status.Certificate, req.Status.CA) })
	v.fence.Unlock()
	if stopErr != nil {
		return stopErr
	}
	if writeErr != nil {
		return fmt.Errorf("writing key pair: %w", writeErr)
	}
	m.dropKey(reqKey)
	now := m.clock.Now()
	v.lastWrite.Store(&keypairWrite{at: now, due: nit})
	if !nit.After(now) {
		m.logFor(v).Info("Warning: the new certificate is already due for renewal; waiting before renewing it (signer or clock skew?)",
			"request", name, "next_issuance_time", nit, "wait", minWaitAfterSuccess)
	}
	if firstCertificate {
		m.opts.Metrics.ObservePublishToFirstCertificate(m.nodeNameHash, m.clock.Since(v.managedAt))
	}
	m.certificateWritten(v, namespace, name, req.Status.Certificate, firstCertificate)
	return nil
}

// waitError is how a wait for a request ends without an outcome: upstream's text, with the
// cause (deadline, unmanage, stop) kept for errors.Is.
type waitError struct {
	reason string
	cause  error
}

func (e *waitError) Error() string { return "waiting for request: " + e.reason }
func (e *waitError) Unwrap() error { return e.cause }

// waitForRequest waits until the informer reports the request issued (returned), denied or
// failed (errors with upstream's texts; finished is true). It reacts to informer events; a
// request not yet in the cache is waited for, and a cache error other than "not found" is
// retried. When ctx ends the error is a *waitError naming the last state seen.
func (m *Manager) waitForRequest(ctx context.Context, namespace, name string) (req *cmapi.CertificateRequest, finished bool, err error) {
	notify, unwatch := m.watch(requestKey(namespace, name))
	defer unwatch()
	seen := false
	lastReason := "request not yet in the informer cache"
	for {
		var retry <-chan time.Time
		req, err := m.lister.CertificateRequests(namespace).Get(name)
		switch {
		case err == nil:
			seen = true
			done, err := requestOutcome(req)
			if done {
				return req, err != nil, err
			}
			lastReason = pendingReason(req)
		case apierrors.IsNotFound(err):
			if seen {
				return nil, true, fmt.Errorf("request %q was deleted before it was issued", name)
			}
		default:
			lastReason = err.Error()
			t := m.clock.NewTimer(cacheRetryInterval)
			defer t.Stop()
			retry = t.C()
		}
		select {
		case <-notify:
		case <-retry:
		case <-ctx.Done():
			return nil, false, &waitError{reason: lastReason, cause: context.Cause(ctx)}
		}
	}
}

// requestOutcome reports whether a request is finished and, if it is not issued, why, with
// upstream's texts. A request marked issued without a certificate is not finished.
func requestOutcome(req *cmapi.CertificateRequest) (bool, error) {
	if c := condition(req, cmapi.CertificateRequestConditionDenied); c != nil && c.Status == cmmeta.ConditionTrue {
		return true, fmt.Errorf("request %q has been denied by the approval plugin: %s", req.Name, c.Message)
	}
	if c := condition(req, cmapi.CertificateRequestConditionReady); c != nil {
		switch {
		case c.Reason == cmapi.CertificateRequestReasonFailed:
			return true, fmt.Errorf("request %q has failed: %s", req.Name, c.Message)
		case c.Status == cmmeta.ConditionTrue && len(req.Status.Certificate) > 0:
			return true, nil
		}
	}
	return false, nil
}

// pendingReason describes a request that is not finished, for the error of a wait that ends.
func pendingReason(req *cmapi.CertificateRequest) string {
	c := condition(req, cmapi.CertificateRequestConditionReady)
	switch {
	case c == nil:
		return fmt.Sprintf("request %q has no Ready condition yet", req.Name)
	case c.Status == cmmeta.ConditionTrue:
		return fmt.Sprintf("request %q is marked ready but has no certificate", req.Name)
	default:
		return fmt.Sprintf("request %q is not ready: %s: %s", req.Name, c.Reason, c.Message)
	}
}

// resumable reports whether the newest request of a volume may be waited on again: it has no
// Ready condition, or its Ready reason is Pending, Issued or empty (upstream's rule).
func resumable(req *cmapi.CertificateRequest) bool {
	c := condition(req, cmapi.CertificateRequestConditionReady)
	if c == nil {
		return true
	}
	switch c.Reason {
	case "", cmapi.CertificateRequestReasonPending, cmapi.CertificateRequestReasonIssued:
		return true
	}
	return false
}

func condition(req *cmapi.CertificateRequest, t cmapi.CertificateRequestConditionType) *cmapi.CertificateRequestCondition {
	for i := range req.Status.Conditions {
		if req.Status.Conditions[i].Type == t {
			return &req.Status.Conditions[i]
		}
	}
	return nil
}

// nextIssuanceTime is the default next issuance time of a volume's new certificate: upstream's
// renewal point R, moved earlier by a deterministic draw from [0, jitter·(R − NotBefore)] when
// jitter is set. The draw depends only on the volume ID and the certificate's serial number.
func nextIssuanceTime(chain []byte, volumeID string, jitter float64) (time.Time, error) {
	cert, err := certs.ParseLeaf(chain)
	if err != nil {
		return time.Time{}, err
	}
	r := certs.RenewalPoint(cert)
	if jitter <= 0 {
		return r, nil
	}
	h := fnv.New64a()
	h.Write([]byte(volumeID))
	h.Write([]byte{0})
	h.Write(cert.SerialNumber.Bytes())
	fraction := float64(h.Sum64()>>11) / (1 << 53) // uniform in [0, 1)
	window := time.Duration(jitter * float64(r.Sub(cert.NotBefore)))
	return r.Add(-time.Duration(fraction * float64(window))), nil
}

// requestsForVolume returns the volume's requests from the informer cache, oldest first by
// CreationTimestamp, then by the order this process created them, then by name. It uses the
// volume-hash index (no scan over the node's requests).
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
	m.mu.Lock()
	seq := make(map[*cmapi.CertificateRequest]uint64, len(reqs))
	for _, r := range reqs {
		seq[r] = m.created[requestKey(r.Namespace, r.Name)]
	}
	m.mu.Unlock()
	sort.Slice(reqs, func(i, j int) bool {
		ti, tj := reqs[i].CreationTimestamp, reqs[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return ti.Before(&tj)
		}
		if si, sj := seq[reqs[i]], seq[reqs[j]]; si != 0 && sj != 0 && si != sj {
			return si < sj
		}
		return reqs[i].Name < reqs[j].Name
	})
	return reqs, nil
}

func (m *Manager) deleteRequest(ctx context.Context, v *volume, req *cmapi.CertificateRequest) error {
	err := m.opts.Client.CertmanagerV1().CertificateRequests(req.Namespace).Delete(ctx, req.Name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting stale CertificateRequest %s/%s: %w", req.Namespace, req.Name, err)
	}
	m.forgetRequest(requestKey(req.Namespace, req.Name))
	m.logFor(v).V(2).Info("Deleted stale CertificateRequest", "request", req.Name, "namespace", req.Namespace)
	return nil
}

// requestKey names a request the way the informer's events do ("namespace/name", or just
// "name" in the empty namespace), so waiters and keys always match the events.
func requestKey(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

func (m *Manager) pendingKey(namespace, name string) (any, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	pk, ok := m.pendingKeys[requestKey(namespace, name)]
	return pk.key, ok
}

// dropKey forgets a request's private key once it can no longer be used, in memory and, if it
// was persisted, in the store.
func (m *Manager) dropKey(reqKey string) {
	m.mu.Lock()
	pk, ok := m.pendingKeys[reqKey]
	delete(m.pendingKeys, reqKey)
	m.mu.Unlock()
	if ok {
		m.removePersistedKey(pk.volumeID, reqKey)
	}
}

// forgetRequest forgets everything the manager holds about a request that no longer exists:
// its private key (in memory and persisted) and its creation order.
func (m *Manager) forgetRequest(reqKey string) {
	m.dropKey(reqKey)
	m.dropSweptKey(reqKey)
	m.mu.Lock()
	delete(m.created, reqKey)
	m.mu.Unlock()
}

// watch registers interest in changes to one request.
func (m *Manager) watch(reqKey string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	m.mu.Lock()
	if m.watchers[reqKey] == nil {
		m.watchers[reqKey] = make(map[chan struct{}]struct{})
	}
	m.watchers[reqKey][ch] = struct{}{}
	m.mu.Unlock()
	return ch, func() {
		m.mu.Lock()
		delete(m.watchers[reqKey], ch)
		if len(m.watchers[reqKey]) == 0 {
			delete(m.watchers, reqKey)
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
	m.notifyWatchers(key)
}

func (m *Manager) notifyWatchers(reqKey string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for ch := range m.watchers[reqKey] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// requestDeleted forgets a deleted request and wakes its waiters.
func (m *Manager) requestDeleted(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	m.forgetRequest(key)
	m.notifyWatchers(key)
}
