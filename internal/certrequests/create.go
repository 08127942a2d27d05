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
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/cert-manager/csi-lib/internal/apicall"
)

// Create creates req with client, whose account who names (apicall.DriverAccount,
// apicall.PodAccount) for a refusal's text, recording its place in this process's creation order
// first (kept when the create's outcome is unknown).
func (r *View) Create(ctx context.Context, client cmclient.Interface, who string, req *cmapi.CertificateRequest) (*cmapi.CertificateRequest, error) {
	reqKey := Key(req.Namespace, req.Name)
	r.noteCreated(reqKey)
	created, err := client.CertmanagerV1().CertificateRequests(req.Namespace).Create(ctx, req, metav1.CreateOptions{})
	if err != nil {
		r.health.CallFailed(err)
		if !CreateOutcomeUnknown(err) {
			r.forgetOrder(reqKey)
		}
		return nil, fmt.Errorf("creating CertificateRequest: %w", apicall.Refusal(err, "create", apicall.CertificateRequests, req.Namespace, who))
	}
	return created, nil
}

// readByName reads one request from the apiserver with the driver's own client, as a list that
// selects its name (the consumers' charts grant list, not get); a request the apiserver does not
// have is a NotFound error, a refusal matches apicall.ErrPermissionDenied. The name is checked here
// too: a fake clientset ignores field selectors.
func (r *View) readByName(ctx context.Context, namespace, name string) (*cmapi.CertificateRequest, error) {
	list, err := r.client.CertmanagerV1().CertificateRequests(namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(),
	})
	if err != nil {
		r.health.CallFailed(err)
		return nil, apicall.Refusal(err, "list", apicall.CertificateRequests, namespace, apicall.DriverAccount)
	}
	for i := range list.Items {
		if list.Items[i].Name == name && list.Items[i].Namespace == namespace {
			return &list.Items[i], nil
		}
	}
	return nil, apierrors.NewNotFound(cmapi.Resource("certificaterequests"), name)
}

// CreateOutcomeUnknown reports whether a failed create may nevertheless have created the
// request: no answer came from the apiserver (a broken connection, a deadline, a cancellation), or
// it answered that it could not finish in time or failed inside (5xx). A refused connection is
// not one, nor is a call the client's rate limiter held back: the request never left.
func CreateOutcomeUnknown(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		// A refused connection never carried the request, nor did a call that failed in the
		// client's own rate limiter: client-go's REST client waits there under the call's context
		// and gives up at once when the wait would outlast the context's deadline. The text is
		// client-go's own; the limiter's errors carry no sentinel to match.
		return !utilnet.IsConnectionRefused(err) &&
			!strings.Contains(err.Error(), "client rate limiter Wait returned an error")
	}
	return status.Status().Code >= http.StatusInternalServerError
}

// ErrRequestGone: a request whose create's outcome was unknown was created, and has been deleted
// since.
var ErrRequestGone = errors.New("the CertificateRequest was created and has been deleted since")

// ErrStillUnknown: settle could not find out whether the request exists.
var ErrStillUnknown = errors.New("the outcome of creating the CertificateRequest is still unknown")

// Settle finds the request this process created (created is true) or may have created (the create's
// outcome is unknown), which the cache did not show: from the cache if it shows it now; else by
// reading it from the apiserver (readByName, with the driver's own client: a read can be repeated
// without risk); and if the apiserver does not have it, ErrRequestGone for a request created for
// certain, else by creating it again under the same name with client (whose account who names),
// where AlreadyExists means the first create arrived meanwhile. A request read from the apiserver
// must be the one sent (same labels and CSR). It returns the request as the apiserver holds it;
// ErrRequestGone if it was created and deleted since; an error matching ErrStillUnknown if no
// answer settled it (a broken or refused connection, a 5xx, a 429, a refused read, which also
// matches apicall.ErrPermissionDenied); any other error says why the request can never be settled.
func (r *View) Settle(ctx context.Context, client cmclient.Interface, who string, sent *cmapi.CertificateRequest, created bool) (*cmapi.CertificateRequest, error) {
	if cached, err := r.lister.CertificateRequests(sent.Namespace).Get(sent.Name); err == nil {
		return cached, nil
	}
	got, err := r.readByName(ctx, sent.Namespace, sent.Name)
	if apierrors.IsNotFound(err) && created {
		return nil, ErrRequestGone
	}
	if apierrors.IsNotFound(err) {
		again, createErr := r.Create(ctx, client, who, sent.DeepCopy())
		switch {
		case createErr == nil:
			return again, nil
		case settledBy(createErr):
			return nil, createErr
		case !apierrors.IsAlreadyExists(createErr):
			// create forgot the request's order if the apiserver turned it away, which says
			// nothing of the first create.
			r.noteCreated(Key(sent.Namespace, sent.Name))
			return nil, fmt.Errorf("%w: %w", ErrStillUnknown, createErr)
		}
		if got, err = r.readByName(ctx, sent.Namespace, sent.Name); apierrors.IsNotFound(err) {
			return nil, ErrRequestGone
		}
	}
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: reading CertificateRequest %s/%s: %w", ErrStillUnknown, sent.Namespace, sent.Name, err)
	case !maps.Equal(got.Labels, sent.Labels) || !bytes.Equal(got.Spec.Request, sent.Spec.Request):
		return nil, fmt.Errorf("CertificateRequest %s/%s exists but is not the request this volume sent", sent.Namespace, sent.Name)
	}
	return got, nil
}

// settledBy reports whether the apiserver's refusal of a create made again under the same name
// settles the first create too: the request as sent is refused (invalid, forbidden), so the
// first cannot have been created either. A 429 or a 5xx says nothing of the first.
func settledBy(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	code := status.Status().Code
	return code >= http.StatusBadRequest && code < http.StatusInternalServerError &&
		code != http.StatusTooManyRequests && !apierrors.IsAlreadyExists(err)
}

// ErrStaleCache: the informer's cache showed a request the apiserver no longer has.
var ErrStaleCache = errors.New("the informer's cache is stale")

// Delete deletes a request and forgets its creation order. A request already gone means the
// cache that showed it is stale: the error matches ErrStaleCache.
func (r *View) Delete(ctx context.Context, req *cmapi.CertificateRequest) error {
	err := r.client.CertmanagerV1().CertificateRequests(req.Namespace).Delete(ctx, req.Name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		r.health.CallFailed(err)
		return fmt.Errorf("deleting stale CertificateRequest %s/%s: %w", req.Namespace, req.Name,
			apicall.Refusal(err, "delete", apicall.CertificateRequests, req.Namespace, apicall.DriverAccount))
	}
	r.forgetOrder(Key(req.Namespace, req.Name))
	if err != nil {
		return fmt.Errorf("deleting stale CertificateRequest %s/%s: it was already gone: %w", req.Namespace, req.Name, ErrStaleCache)
	}
	return nil
}

// noteCreated records that this process created (or is creating) a request, after every other
// it created.
func (r *View) noteCreated(reqKey string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.createdSeq++
	r.created[reqKey] = r.createdSeq
}
