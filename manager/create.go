/*
Copyright 2026 The cert-manager Authors.

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
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/cert-manager/csi-lib/approval"
	"github.com/cert-manager/csi-lib/internal/api"
	"github.com/cert-manager/csi-lib/internal/api/util"
	"github.com/cert-manager/csi-lib/internal/apicall"
	"github.com/cert-manager/csi-lib/metadata"
)

// build makes a volume's CertificateRequest: the node and volume hash labels, the bundle's
// annotations with the node's and the pod's names added (see originAnnotations), the bundle's
// spec, Duration always set, and exactly one owner reference to the pod (name and UID from the
// volume context, even if empty), so that the garbage collector deletes the request with the
// pod. CreationTimestamp is left to the apiserver.
func (r *requests) build(meta metadata.Metadata, bundle *CertificateRequestBundle, csrPEM []byte) (*cmapi.CertificateRequest, error) {
	annotations, err := r.originAnnotations(meta, bundle.Annotations)
	if err != nil {
		return nil, err
	}
	return &cmapi.CertificateRequest{
		ObjectMeta: metav1.ObjectMeta{
			Name:        string(uuid.NewUUID()),
			Namespace:   bundle.Namespace,
			Annotations: annotations,
			Labels: map[string]string{
				api.NodeIDHashLabelKey:   r.nodeHash,
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
	}, nil
}

// originAnnotations returns a copy of the bundle's annotations with the request's origin added,
// so that the apiserver (examples/deploy/node-bound-policy.yaml) and an approver (package
// approval) can check it: this node's name, and the pod's namespace, name and UID from the volume
// context (each only when the context has it). A bundle may set one of these keys only to the
// same value: a request naming another node or pod than its own is refused here, before anything
// is created. Without annotateOrigin it returns the copy alone.
func (r *requests) originAnnotations(meta metadata.Metadata, fromBundle map[string]string) (map[string]string, error) {
	annotations := make(map[string]string, len(fromBundle)+4)
	for k, v := range fromBundle {
		annotations[k] = v
	}
	if !r.annotateOrigin {
		return annotations, nil
	}
	for _, origin := range []struct{ key, value string }{
		{approval.NodeNameAnnotationKey, r.nodeName},
		{approval.PodNamespaceAnnotationKey, meta.VolumeContext[metadata.PodNamespaceVolumeContextKey]},
		{approval.PodNameAnnotationKey, meta.VolumeContext[metadata.PodNameVolumeContextKey]},
		{approval.PodUIDAnnotationKey, meta.VolumeContext[metadata.PodUIDVolumeContextKey]},
	} {
		if origin.value == "" {
			continue
		}
		if v, set := annotations[origin.key]; set && v != origin.value {
			return nil, fmt.Errorf("generating certificate request: the bundle's annotation %s is %q, but this request's is %q: the key is the library's", origin.key, v, origin.value)
		}
		annotations[origin.key] = origin.value
	}
	return annotations, nil
}

// create creates req with client, whose account who names (apicall.DriverAccount, apicall.PodAccount) for a
// refusal's text, recording its place in this process's creation order first (kept when the
// create's outcome is unknown).
func (r *requests) create(ctx context.Context, client cmclient.Interface, who string, req *cmapi.CertificateRequest) (*cmapi.CertificateRequest, error) {
	reqKey := requestKey(req.Namespace, req.Name)
	r.noteCreated(reqKey)
	created, err := client.CertmanagerV1().CertificateRequests(req.Namespace).Create(ctx, req, metav1.CreateOptions{})
	if err != nil {
		r.noteCallFailed(err)
		if !createOutcomeUnknown(err) {
			r.forgetOrder(reqKey)
		}
		return nil, fmt.Errorf("creating CertificateRequest: %w", apicall.Refusal(err, "create", apicall.CertificateRequests, req.Namespace, who))
	}
	return created, nil
}

// readByName reads one request from the apiserver with the driver's own client, as a list that
// selects its name (the consumers' charts grant list, not get); a request the apiserver does not
// have is a NotFound error, a refusal matches ErrPermissionDenied. The name is checked here too:
// a fake clientset ignores field selectors.
func (r *requests) readByName(ctx context.Context, namespace, name string) (*cmapi.CertificateRequest, error) {
	list, err := r.client.CertmanagerV1().CertificateRequests(namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(),
	})
	if err != nil {
		r.noteCallFailed(err)
		return nil, apicall.Refusal(err, "list", apicall.CertificateRequests, namespace, apicall.DriverAccount)
	}
	for i := range list.Items {
		if list.Items[i].Name == name && list.Items[i].Namespace == namespace {
			return &list.Items[i], nil
		}
	}
	return nil, apierrors.NewNotFound(cmapi.Resource("certificaterequests"), name)
}

// createOutcomeUnknown reports whether a failed create may nevertheless have created the
// request: no answer came from the apiserver (a broken connection, a deadline, a cancellation), or
// it answered that it could not finish in time or failed inside (5xx). A refused connection is
// not one, nor is a call the client's rate limiter held back (throttledBeforeSending): the
// request never left.
func createOutcomeUnknown(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		// A refused connection never carried the request, nor did a client that would not wait
		// for its own rate limiter.
		return !utilnet.IsConnectionRefused(err) && !throttledBeforeSending(err)
	}
	return status.Status().Code >= http.StatusInternalServerError
}

// throttledBeforeSending reports whether a call failed in the client's own rate limiter, before
// anything was sent: client-go's REST client waits there under the call's context and gives up
// at once when the wait would outlast the context's deadline. The text is client-go's own; the
// limiter's errors carry no sentinel to match.
func throttledBeforeSending(err error) bool {
	return strings.Contains(err.Error(), "client rate limiter Wait returned an error")
}

// errRequestGone: a request whose create's outcome was unknown was created, and has been deleted
// since.
var errRequestGone = errors.New("the CertificateRequest was created and has been deleted since")

// errStillUnknown: settle could not find out whether the request exists.
var errStillUnknown = errors.New("the outcome of creating the CertificateRequest is still unknown")

// settle finds the request this process created (created is true) or may have created (the
// create's outcome is unknown), which the cache did not show: from the cache if it shows it now;
// else by reading it from the apiserver (readByName, with the driver's own client: a read can be
// repeated without risk); and if the apiserver does not have it, errRequestGone for a request
// created for certain, else by creating it again under the same name with client (whose account
// who names), where AlreadyExists means the first create arrived meanwhile. A request read from
// the apiserver must be the one sent (same labels and CSR). It returns the request as the
// apiserver holds it; errRequestGone if it was created and deleted since; an error matching
// errStillUnknown if no answer settled it (a broken or refused connection, a 5xx, a 429, a
// refused read, which also matches ErrPermissionDenied); any other error says why the request can
// never be settled.
func (r *requests) settle(ctx context.Context, client cmclient.Interface, who string, sent *cmapi.CertificateRequest, created bool) (*cmapi.CertificateRequest, error) {
	if cached, err := r.lister.CertificateRequests(sent.Namespace).Get(sent.Name); err == nil {
		return cached, nil
	}
	got, err := r.readByName(ctx, sent.Namespace, sent.Name)
	if apierrors.IsNotFound(err) && created {
		return nil, errRequestGone
	}
	if apierrors.IsNotFound(err) {
		again, createErr := r.create(ctx, client, who, sent.DeepCopy())
		switch {
		case createErr == nil:
			return again, nil
		case settledBy(createErr):
			return nil, createErr
		case !apierrors.IsAlreadyExists(createErr):
			// create forgot the request's order if the apiserver turned it away, which says
			// nothing of the first create.
			r.noteCreated(requestKey(sent.Namespace, sent.Name))
			return nil, fmt.Errorf("%w: %w", errStillUnknown, createErr)
		}
		if got, err = r.readByName(ctx, sent.Namespace, sent.Name); apierrors.IsNotFound(err) {
			return nil, errRequestGone
		}
	}
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: reading CertificateRequest %s/%s: %w", errStillUnknown, sent.Namespace, sent.Name, err)
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

// errStaleCache: the informer's cache showed a request the apiserver no longer has.
var errStaleCache = errors.New("the informer's cache is stale")

// delete deletes a request and forgets its creation order. A request already gone means the
// cache that showed it is stale: the error matches errStaleCache.
func (r *requests) delete(ctx context.Context, req *cmapi.CertificateRequest) error {
	err := r.client.CertmanagerV1().CertificateRequests(req.Namespace).Delete(ctx, req.Name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		r.noteCallFailed(err)
		return fmt.Errorf("deleting stale CertificateRequest %s/%s: %w", req.Namespace, req.Name,
			apicall.Refusal(err, "delete", apicall.CertificateRequests, req.Namespace, apicall.DriverAccount))
	}
	r.forgetOrder(requestKey(req.Namespace, req.Name))
	if err != nil {
		return fmt.Errorf("deleting stale CertificateRequest %s/%s: it was already gone: %w", req.Namespace, req.Name, errStaleCache)
	}
	return nil
}

// noteCreated records that this process created (or is creating) a request, after every other
// it created.
func (r *requests) noteCreated(reqKey string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.createdSeq++
	r.created[reqKey] = r.createdSeq
}
