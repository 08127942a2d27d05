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

package manager

import (
	"context"
	"errors"
	"fmt"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	"github.com/go-logr/logr"

	"github.com/cert-manager/csi-lib/internal/certrequests"
	"github.com/cert-manager/csi-lib/internal/certs"
	"github.com/cert-manager/csi-lib/internal/lifetime"
	"github.com/cert-manager/csi-lib/metadata"
)

// issueAttempt is one issuance attempt of one volume, from the loop or for a caller
// (ManageVolumeImmediate, a publish).
type issueAttempt struct {
	m *Manager
	v *managedVolume
	// meta is the volume's metadata as read just before the attempt: by the loop's turn that
	// found the volume due, or by a caller whose volume has no loop yet.
	meta metadata.Metadata
	// gateOpen: the caller asked the readiness gate already and it said yes.
	gateOpen bool
	// tr is the queue worker's registration with Stop; nil for a caller's attempt, which runs
	// on the caller's goroutine.
	tr *lifetime.Tracked
	// deadline is a background attempt's timeout, paused while it waits for admission; nil for
	// a caller's attempt, which waits within the caller's deadline.
	deadline *attemptDeadline
}

// callDriver runs f, which calls driver-supplied functions, and returns its error; errStopped
// if the manager stopped while it ran: the attempt must then return without doing anything
// more. A caller's attempt runs it directly: Stop does not wait for the caller's goroutine.
func (a *issueAttempt) callDriver(f func() error) error {
	if a.tr == nil {
		return f()
	}
	var err error
	if !a.tr.Outside(func() { err = f() }) {
		return errStopped
	}
	return err
}

// issue makes the attempt:
//  1. delete the volume's requests beyond MaxRequestsPerVolume, oldest first;
//  2. if this process created (or may have created) a request of the volume that the informer's
//     cache has not shown yet (see pendingkeys.Keys.HoldUnseen), settle it (see
//     certrequests.View.Settle) and wait for it: never a second request for one issuance, whether
//     the create's outcome is unknown or the cache lags;
//  3. resume the newest request if it can be resumed (certrequests.Resumable): with
//     its private key held (pendingkeys.Keys), wait for it; without, delete it and go on; a request
//     that cannot be resumed is left alone;
//  4. ask the readiness gate, unless the caller did (a refusal is a *NotReadyToRequestError), then
//     wait for admission (see admit), which is held until the attempt is over; a resume (steps 2
//     and 3) never waits for admission;
//  5. generate the key, the request bundle and the CSR; create the CertificateRequest;
//  6. wait for it; on success call WriteKeypair and forget the key.
//
// Steps 1 and 3 read the volume's requests from the informer's cache. A delete that finds a request
// already gone shows the cache is stale; the requests are then read from the apiserver, and the
// step goes on with those.
func (a *issueAttempt) issue(ctx context.Context) error {
	m, v := a.m, a.v
	log := v.logger()
	if v.is(flagTerminating) {
		return ErrPodTerminating
	}
	m.status.attemptStarted(v)
	if err := m.requests.WaitForSync(ctx); err != nil {
		return fmt.Errorf("CertificateRequest informer not synced: %w", err)
	}

	// Step 1. The hold on a request the cache has not shown (step 2) is read before the cache:
	// the cache shows a request before its hold ends, so one of the two reads always has it.
	held, holding := m.keys.UnseenRequest(v.id)
	reqs, err := m.requests.ForVolume(v.id)
	if err != nil {
		return err
	}
	if h := m.opts.testHooks.requestsRead; h != nil {
		h(v.id)
	}
	// fromAPIServer: reqs are the apiserver's answer, read once a delete found the cache stale.
	fromAPIServer := false
	for len(reqs) > m.opts.MaxRequestsPerVolume {
		oldest := reqs[0]
		reqs = reqs[1:]
		stale, err := a.deleteRequest(ctx, log, oldest)
		if err != nil {
			return err
		}
		if stale && !fromAPIServer {
			if reqs, err = a.requestsFromAPIServer(ctx, log, oldest); err != nil {
				return err
			}
			fromAPIServer = true
		}
	}

	// Step 2.
	meta := a.meta
	if holding {
		settled, err := a.settle(ctx, log, meta, held.Request, held.Created)
		if err != nil {
			return err
		}
		if settled != nil {
			return a.waitAndWrite(ctx, meta, settled, held.Key)
		}
	}

	// Step 3. A key not in memory may have been persisted by an earlier process.
	deletedNewest := false
	for n := len(reqs); n > 0 && certrequests.Resumable(reqs[n-1]); n = len(reqs) {
		newest := reqs[n-1]
		reqKey := certrequests.Key(newest.Namespace, newest.Name)
		key, ok := m.keys.InMemoryKey(reqKey)
		if !ok {
			key, ok = m.keys.Recover(log, v.id, newest)
		}
		if ok {
			log.V(2).Info("Resuming CertificateRequest", "request", newest.Name, "namespace", newest.Namespace)
			return a.waitAndWrite(ctx, meta, newest, key)
		}
		stale, err := a.deleteRequest(ctx, log, newest)
		if err != nil {
			return err
		}
		if !stale || fromAPIServer {
			// Deleted now, or meanwhile by someone else: the apiserver listed it.
			deletedNewest = true
			break
		}
		// The cache was stale: the step goes on with the requests the apiserver holds.
		if reqs, err = a.requestsFromAPIServer(ctx, log, newest); err != nil {
			return err
		}
		fromAPIServer = true
	}
	if !deletedNewest {
		m.keys.RemoveUnclaimed(log, v.id)
	}

	// Step 4.
	if !a.gateOpen {
		if err := a.callDriver(func() error {
			if ready, reason := m.opts.ReadyToRequest(meta); !ready {
				return &NotReadyToRequestError{Reason: reason}
			}
			return nil
		}); err != nil {
			return err
		}
	}
	release, err := a.admit(ctx)
	if err != nil {
		return err
	}
	defer release()

	// Step 5.
	var key any
	var bundle *CertificateRequestBundle
	var csrPEM []byte
	var client cmclient.Interface
	if err := a.callDriver(func() (err error) {
		if key, err = m.opts.GeneratePrivateKey(meta); err != nil {
			return fmt.Errorf("generating private key: %w", err)
		}
		if bundle, err = m.opts.GenerateRequest(meta); err != nil {
			return fmt.Errorf("generating certificate request: %w", err)
		}
		if csrPEM, err = m.opts.SignRequest(meta, key, bundle.Request); err != nil {
			return fmt.Errorf("signing certificate request: %w", err)
		}
		if client, err = m.opts.ClientForMetadata(meta); err != nil {
			return fmt.Errorf("building client for volume: %w", err)
		}
		return nil
	}); err != nil {
		return err
	}
	// The driver's functions may outlast the attempt (unmanaged, stopped, deadline): then
	// nothing is created.
	if v.is(flagClosed) {
		return errStopped
	}
	if err := context.Cause(ctx); err != nil {
		return fmt.Errorf("creating CertificateRequest: %w", err)
	}
	req, err := m.newRequest(meta, bundle, csrPEM)
	if err != nil {
		return err
	}
	// Hold the key before the request exists, so an informer event never finds a request of
	// ours without it.
	reqKey := certrequests.Key(req.Namespace, req.Name)
	m.keys.Remember(log, v.id, reqKey, key)
	created, err := m.requests.Create(ctx, client, m.createAccount, req)
	if err != nil {
		if certrequests.CreateOutcomeUnknown(err) {
			// The request may exist: its key and the request as sent stay held, and it is settled
			// at once, or by the next attempt if the apiserver still does not answer; never
			// replaced by another.
			a.holdUntilSeen(reqKey, req, false)
			log.Info("The outcome of creating a CertificateRequest is unknown; settling it", "request", req.Name, "namespace", req.Namespace, "error", err.Error())
			settled, settleErr := a.settle(ctx, log, meta, req, false)
			if errors.Is(settleErr, ErrPermissionDenied) {
				return settleErr // what to fix, rather than the lost answer
			}
			if settleErr != nil || settled == nil {
				return err
			}
			return a.waitAndWrite(ctx, meta, settled, key)
		}
		m.keys.Drop(reqKey)
		return err
	}
	log.Info("Created CertificateRequest", "request", created.Name, "namespace", created.Namespace)
	// Until the cache shows it, a later attempt (kubelet's retry after this one's deadline)
	// settles this request rather than creating another.
	a.holdUntilSeen(reqKey, req, true)

	// Step 6.
	return a.waitAndWrite(ctx, meta, created, key)
}

// deleteRequest deletes a stale request of the volume and forgets its key. stale reports that
// the request was gone already (certrequests.ErrStaleCache): the cache that listed it is stale,
// unless the list was the apiserver's own, in which case it was deleted meanwhile.
func (a *issueAttempt) deleteRequest(ctx context.Context, log logr.Logger, req *cmapi.CertificateRequest) (stale bool, err error) {
	m := a.m
	err = m.requests.Delete(ctx, req)
	if err != nil && !errors.Is(err, certrequests.ErrStaleCache) {
		return false, err
	}
	m.keys.Drop(certrequests.Key(req.Namespace, req.Name))
	if err != nil {
		return true, nil
	}
	log.V(2).Info("Deleted stale CertificateRequest", "request", req.Name, "namespace", req.Namespace)
	return false, nil
}

// requestsFromAPIServer reads the volume's requests from the apiserver, once a delete of gone,
// listed by the cache, found the cache stale.
func (a *issueAttempt) requestsFromAPIServer(ctx context.Context, log logr.Logger, gone *cmapi.CertificateRequest) ([]*cmapi.CertificateRequest, error) {
	log.Info("The CertificateRequest informer's cache is stale; reading the volume's requests from the apiserver", "request", gone.Name, "namespace", gone.Namespace)
	return a.m.requests.ForVolumeFromAPIServer(ctx, a.v.id)
}

// holdUntilSeen holds the request as sent with its key (pendingkeys.Keys.HoldUnseen) until the
// informer's cache shows it (seenIfCached covers an event that came before this call).
func (a *issueAttempt) holdUntilSeen(reqKey string, sent *cmapi.CertificateRequest, created bool) {
	a.m.keys.HoldUnseen(reqKey, sent, created)
	a.seenIfCached(reqKey)
}

// seenIfCached tells the pending keys that the request is seen if the informer's cache shows
// it.
func (a *issueAttempt) seenIfCached(reqKey string) {
	if a.m.requests.Exists(reqKey) {
		a.m.keys.Seen(reqKey)
	}
}

// settle settles the volume's request that the cache has not shown (certrequests.View.Settle;
// created: the apiserver answered its create): it returns the request to wait for; nil, nil if
// it was created and has been deleted since (its key is forgotten, and the attempt goes on to a
// new request); an error if its outcome is still unknown (it stays held for the next attempt) or
// it can never be settled (its key is forgotten).
func (a *issueAttempt) settle(ctx context.Context, log logr.Logger, meta metadata.Metadata, sent *cmapi.CertificateRequest, created bool) (*cmapi.CertificateRequest, error) {
	m := a.m
	var client cmclient.Interface
	if err := a.callDriver(func() (err error) {
		if client, err = m.opts.ClientForMetadata(meta); err != nil {
			return fmt.Errorf("building client for volume: %w", err)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	reqKey := certrequests.Key(sent.Namespace, sent.Name)
	got, err := m.requests.Settle(ctx, client, m.createAccount, sent, created)
	switch {
	case err == nil:
		a.seenIfCached(reqKey)
		log.Info("Resuming the CertificateRequest created for this volume (its create's outcome was unknown, or the informer's cache had not shown it)", "request", got.Name, "namespace", got.Namespace)
		return got, nil
	case errors.Is(err, certrequests.ErrRequestGone):
		log.Info("A CertificateRequest whose create's outcome was unknown was created and has been deleted since", "request", sent.Name, "namespace", sent.Namespace)
		m.keys.Drop(reqKey)
		return nil, nil
	case errors.Is(err, certrequests.ErrStillUnknown):
		return nil, err
	default:
		m.keys.Drop(reqKey)
		return nil, err
	}
}

// waitAndWrite waits for a submitted request (read: as last read, see certrequests.View.Wait) to
// finish, then hands the key pair to WriteKeypair (unless the volume was unmanaged meanwhile),
// forgets the key and shows the new certificate.
func (a *issueAttempt) waitAndWrite(ctx context.Context, meta metadata.Metadata, read *cmapi.CertificateRequest, key any) error {
	m, v := a.m, a.v
	namespace, name := read.Namespace, read.Name
	reqKey := certrequests.Key(namespace, name)
	req, finished, err := m.requests.Wait(ctx, read)
	if err != nil {
		if finished {
			// Denied, failed or deleted: the key is of no further use.
			m.keys.Drop(reqKey)
		}
		if errors.Is(err, certrequests.ErrDeleted) {
			// This process never deletes a request it waits for, and the garbage collector
			// deletes one when its pod is gone: the error matches ErrPodTerminating. Were the pod
			// alive after all, kubelet's retry of the publish issues anew.
			return fmt.Errorf("request %q was deleted before it was issued (%w)", name, ErrPodTerminating)
		}
		return err
	}
	leaf, err := certs.ParseLeaf(req.Status.Certificate)
	if err != nil {
		m.keys.Drop(reqKey)
		return fmt.Errorf("CertificateRequest %s/%s: %w", namespace, name, err)
	}
	nit, window := renewalSchedule(leaf, v.id, m.opts.RenewalJitter)
	// A driver that persists no NextIssuanceTime keeps none in its metadata: its renewals are
	// not first certificates either.
	firstCertificate := !hasCertificate(meta) && v.lastWritten() == nil
	meta.NextIssuanceTime = &nit

	if !v.writeStarts() {
		return errStopped
	}
	if err := a.callDriver(func() error {
		if err := m.opts.WriteKeypair(meta, key, req.Status.Certificate, req.Status.CA); err != nil {
			return fmt.Errorf("writing key pair: %w", err)
		}
		return nil
	}); err != nil {
		v.writeEnded(nil)
		return err
	}
	now := m.opts.Clock.Now()
	v.writeEnded(&keypairWrite{at: now, handed: nit, window: window})
	m.keys.Drop(reqKey)
	if !nit.After(now) {
		v.logger().Info("Warning: the new certificate is already due for renewal; waiting before renewing it (signer or clock skew?)",
			"request", name, "next_issuance_time", nit, "wait", minWaitAfterSuccess)
	}
	m.status.written(v, namespace, name, leaf.NotAfter, firstCertificate)
	return nil
}

// admit waits for the attempt's admission (see package admission), pausing a background attempt's
// deadline meanwhile. The returned release frees the slot; call it when the attempt is over.
func (a *issueAttempt) admit(ctx context.Context) (release func(), err error) {
	m := a.m
	if release, ok := m.admission.TryAcquire(); ok {
		return release, nil
	}
	if a.deadline != nil {
		if !a.deadline.pause() {
			return nil, fmt.Errorf("waiting for issuance admission: %w", errAttemptTimeout)
		}
		defer a.deadline.restart()
	}
	a.v.logger().V(2).Info("Waiting for issuance admission (node-wide limit on concurrent issuances or CertificateRequest creations)")
	release, err = m.admission.Wait(ctx)
	if err != nil {
		return nil, fmt.Errorf("waiting for issuance admission: %w", err)
	}
	a.v.logger().V(4).Info("Admitted to issuance")
	return release, nil
}

// issueFirst is ManageVolumeImmediate's and a publish's attempt, for a just-registered volume
// whose metadata the caller just read (gateOpen: the caller asked the gate already): if the
// metadata records no certificate, one attempt on the caller's goroutine, under the caller's
// ctx, which the volume's end ends too; then the loop starts, unless the attempt failed. The
// attempt runs before the volume's loop starts, so it never overlaps another attempt of the
// volume. Every error it returns counts as an issuance error, the gate's refusal and the
// caller's deadline included.
func (m *Manager) issueFirst(ctx context.Context, v *managedVolume, meta metadata.Metadata, gateOpen bool) error {
	if hasCertificate(meta) {
		m.startLoop(v, &meta)
		return nil
	}
	ctx, cancel := context.WithCancelCause(ctx)
	err := (&issueAttempt{m: m, v: v, meta: meta, gateOpen: gateOpen}).run(ctx, cancel)
	cancel(nil)
	if err != nil {
		m.status.attemptFailed(v, err, true, 0)
		return err
	}
	m.startLoop(v, nil)
	return nil
}

// run makes the attempt under ctx, which end ends with a cause (unmanaged, the pod terminating,
// the deadline), as the volume's attempt in flight. An attempt ended because its pod terminates
// returns an error matching ErrPodTerminating, whatever the call it was in reported (often only a
// cancelled context).
func (a *issueAttempt) run(ctx context.Context, end context.CancelCauseFunc) error {
	a.v.attemptStarted(end)
	err := a.issue(ctx)
	a.v.attemptDone()
	if err != nil && !errors.Is(err, ErrPodTerminating) && errors.Is(context.Cause(ctx), ErrPodTerminating) {
		return fmt.Errorf("%w: %v", ErrPodTerminating, err)
	}
	return err
}
