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

package certrequests

import (
	"context"
	"errors"
	"fmt"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/csi-lib/internal/apicall"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
)

// ErrDeleted is the error of a wait whose request was deleted before it was issued.
var ErrDeleted = errors.New("the request was deleted before it was issued")

// waitError is how a wait for a request ends without an outcome: the last state seen, with
// the cause (deadline, unmanage, stop) kept for errors.Is.
type waitError struct {
	reason string
	cause  error
}

func (e *waitError) Error() string { return "waiting for request: " + e.reason }

func (e *waitError) Unwrap() error { return e.cause }

// Wait waits until the request is issued (returned), denied or failed (finished is true, with
// the error drivers' tests match). read is the request as last read (from the cache, or from the
// apiserver: a create's answer, a settling's read), which counts until the cache shows something
// newer, so that a request already issued when a lagging cache does not show it yet ends the wait
// at once. The wait reacts to informer events; a request not yet in the cache is waited for.
// While the informer's watch is suspect (see apihealth.Health) it also reads the request from the
// apiserver every DirectReadInterval, within the node-wide bound on those reads, unless the View
// was made without fallback reads, so that a broken watch never holds a signed certificate back.
// A request that the cache showed and then lost, or that a direct read no longer finds, was
// deleted. When ctx ends the error is a *waitError naming the last state seen.
func (r *View) Wait(ctx context.Context, read *cmapi.CertificateRequest) (req *cmapi.CertificateRequest, finished bool, err error) {
	namespace, name := read.Namespace, read.Name
	notify, unwatch := r.watch(Key(namespace, name))
	defer unwatch()
	inCache := false
	direct := read // the last read past the cache, newer than the cache's copy while it lags
	// directRefused: the apiserver refused a direct read; the wait relies on the cache alone.
	directRefused := false
	var pollTimer clock.Timer
	defer func() {
		if pollTimer != nil {
			pollTimer.Stop()
		}
	}()
	for {
		var poll <-chan time.Time
		req = direct
		cached, err := r.lister.CertificateRequests(namespace).Get(name)
		switch {
		case err == nil:
			inCache = true
			if !newerThan(direct, cached) {
				req = cached
			}
		case apierrors.IsNotFound(err) && inCache:
			return nil, true, ErrDeleted
		}
		done, err := requestOutcome(req)
		if done {
			return req, err != nil, err
		}
		suspect, becomesSuspect := r.health.WatchSuspect()
		if !r.fallbackReads || directRefused {
			suspect, becomesSuspect = false, nil // the wait relies on the cache alone
		}
		switch {
		case suspect && pollTimer == nil:
			pollTimer = r.clock.NewTimer(DirectReadInterval)
			poll = pollTimer.C()
		case suspect:
			poll = pollTimer.C()
		case pollTimer != nil:
			pollTimer.Stop()
			pollTimer = nil
		}
		select {
		case <-notify:
		case <-becomesSuspect:
		case <-poll:
			pollTimer = nil
			if r.directReads.AllowN(r.clock.Now(), 1) {
				got, err := r.readByName(ctx, namespace, name)
				if apierrors.IsNotFound(err) {
					return nil, true, ErrDeleted
				}
				if err == nil {
					direct = got
				}
				directRefused = errors.Is(err, apicall.ErrPermissionDenied)
			}
		case <-ctx.Done():
			return nil, false, &waitError{reason: pendingReason(req), cause: context.Cause(ctx)}
		}
	}
}

// newerThan reports whether a request read from the apiserver is newer than the cache's copy:
// it carries an outcome the cache's copy lacks.
func newerThan(direct, cached *cmapi.CertificateRequest) bool {
	directDone, _ := requestOutcome(direct)
	cachedDone, _ := requestOutcome(cached)
	return directDone && !cachedDone
}

// watch registers interest in changes to one request.
func (r *View) watch(reqKey string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	r.mu.Lock()
	if r.watchers[reqKey] == nil {
		r.watchers[reqKey] = make(map[chan struct{}]struct{})
	}
	r.watchers[reqKey][ch] = struct{}{}
	r.mu.Unlock()
	return ch, func() {
		r.mu.Lock()
		delete(r.watchers[reqKey], ch)
		if len(r.watchers[reqKey]) == 0 {
			delete(r.watchers, reqKey)
		}
		r.mu.Unlock()
	}
}

// requestOutcome reports whether a request is finished and, if it is not issued, why. A
// request marked issued without a certificate is not finished.
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

// Resumable reports whether the newest request of a volume may be waited on again: it has no
// Ready condition, or its Ready reason is Pending, Issued or empty.
func Resumable(req *cmapi.CertificateRequest) bool {
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
