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
	"sort"
	"strings"
	"sync"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	cmlisters "github.com/cert-manager/cert-manager/pkg/client/listers/certmanager/v1"
	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/cert-manager/csi-lib/approval"
	"github.com/cert-manager/csi-lib/internal/api"
	"github.com/cert-manager/csi-lib/internal/api/util"
	"github.com/cert-manager/csi-lib/internal/certs"
	"github.com/cert-manager/csi-lib/internal/watchend"
	"github.com/cert-manager/csi-lib/metadata"
)

const (
	// volumeHashIndex indexes the informer's requests by the volume-hash label.
	volumeHashIndex = "volumeIDHash"

	// cacheRetryInterval is how soon a wait re-reads the informer cache after an error other
	// than "not found" (on the injected clock).
	cacheRetryInterval = time.Second

	// directReadInterval is how often a wait reads its request from the apiserver while the
	// informer's watch is suspect (on the injected clock); directReadRate and directReadBurst
	// bound those reads node-wide.
	directReadInterval = 500 * time.Millisecond
	directReadRate     = 50
	directReadBurst    = 50
)

// requests is the node's view of its CertificateRequests: one informer selected by the
// node-hash label and indexed by the volume-hash label, the order in which this process created
// requests, and the waiters the informer's events wake. It finds, builds, creates, settles,
// waits for and deletes a volume's requests. It reads the apiserver past its cache only to
// settle a create whose outcome is unknown, when a delete shows the cache stale, and, one request
// per waiter within a node-wide bound, while its watch is suspect; never a list of everything.
// Every call it makes with the driver's own client uses the verbs the consumers' charts grant
// (list, watch, delete, and create where the driver creates): a request is read by name with a
// list that selects the name, never a get. What else must happen when a request shows up in the
// cache or is gone (its private key dropped) is the seen and deleted callbacks' business.
type requests struct {
	client   cmclient.Interface // the driver's own client: lists, watches, reads and deletes requests
	clock    clock.Clock
	nodeName string // Options.NodeID, named on every request unless annotateOrigin is false
	// annotateOrigin is false with Options.DisableOriginAnnotations: requests carry the
	// bundle's annotations alone, as upstream.
	annotateOrigin bool
	nodeHash       string
	informer       cache.SharedIndexInformer
	// informerDone is closed when the informer started by start has stopped.
	informerDone chan struct{}
	lister       cmlisters.CertificateRequestLister
	// seen is called with the key of every request the informer adds or updates, deleted with
	// the key of every request it sees deleted.
	seen, deleted func(reqKey string)

	mu sync.Mutex
	// created orders the requests this process created, by request key: the apiserver's
	// CreationTimestamp has one-second resolution.
	created    map[string]uint64
	createdSeq uint64
	// watchers are notified when the informer sees a change to a request, by request key.
	watchers map[string]map[chan struct{}]struct{}
	// watchSuspect: the informer's watch stream ended or could not be opened, or a call to the
	// apiserver found it unreachable, and since then no watch has been opened and no event has
	// come through one. Waiters then read their request from the apiserver, within
	// directReads.
	watchSuspect bool
	directReads  *rate.Limiter
	// informerRefused holds, by verb (list, watch), the apiserver's refusal of the informer's
	// last call of that verb; a call that succeeds clears its verb. accessChanged is closed, and
	// replaced, whenever it changes.
	informerRefused map[string]error
	accessChanged   chan struct{}
}

// newRequests sets up the informer on the node's requests; start runs it.
func newRequests(client cmclient.Interface, clk clock.Clock, nodeName, nodeHash string, annotateOrigin bool, seen, deleted func(reqKey string)) (*requests, error) {
	r := &requests{
		client:         client,
		nodeName:       nodeName,
		annotateOrigin: annotateOrigin,
		clock:          clk,
		nodeHash:       nodeHash,
		seen:           seen,
		deleted:        deleted,
		created:        make(map[string]uint64),
		watchers:       make(map[string]map[chan struct{}]struct{}),
		directReads:    rate.NewLimiter(directReadRate, directReadBurst),

		informerRefused: make(map[string]error),
		accessChanged:   make(chan struct{}),
	}
	selector := labels.SelectorFromSet(labels.Set{api.NodeIDHashLabelKey: nodeHash}).String()
	crs := client.CertmanagerV1().CertificateRequests(metav1.NamespaceAll)
	lw := watchend.Observe(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			list, err := crs.List(ctx, o)
			r.noteInformerCall("list", err)
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			w, err := crs.Watch(ctx, o)
			r.noteInformerCall("watch", err)
			return w, err
		},
	}, watchend.Observer{Opened: r.watchLive, Delivered: r.watchLive, Ended: r.suspectWatch})
	r.informer = cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, client),
		&cmapi.CertificateRequest{}, cache.SharedIndexInformerOptions{Indexers: cache.Indexers{volumeHashIndex: indexByVolumeHash}})
	if err := r.informer.SetWatchErrorHandlerWithContext(func(ctx context.Context, refl *cache.Reflector, err error) {
		cache.DefaultWatchErrorHandler(ctx, refl, err)
		r.suspectWatch()
	}); err != nil {
		return nil, fmt.Errorf("setting the CertificateRequest informer's watch error handler: %w", err)
	}
	if _, err := r.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    r.changed,
		UpdateFunc: func(_, obj any) { r.changed(obj) },
		DeleteFunc: r.gone,
	}); err != nil {
		return nil, fmt.Errorf("adding CertificateRequest event handler: %w", err)
	}
	r.lister = cmlisters.NewCertificateRequestLister(r.informer.GetIndexer())
	return r, nil
}

// start runs the informer until ctx ends and waits for its cache to sync. An error matching
// ErrPermissionDenied says the apiserver refuses the informer's list or watch: the informer goes
// on trying (on client-go's reflector backoff, up to 30 s between tries) and syncs once the
// permission is granted.
func (r *requests) start(ctx context.Context) error {
	r.informerDone = make(chan struct{})
	go func() {
		defer close(r.informerDone)
		r.informer.RunWithContext(ctx)
	}()
	if err := r.waitForSync(ctx); err != nil {
		return fmt.Errorf("CertificateRequest informer did not sync: %w", err)
	}
	return nil
}

// shutdown waits for the informer once the context given to start has ended.
func (r *requests) shutdown() {
	if r.informerDone != nil {
		<-r.informerDone
	}
}

// waitForSync waits until the informer has synced or ctx ends, and ends at once with the
// apiserver's refusal (matching ErrPermissionDenied) while it refuses the informer's list or
// watch and the cache has not synced. It reacts to the informer's own signal; no timer is
// involved.
func (r *requests) waitForSync(ctx context.Context) error {
	for {
		refused, changed := r.informerAccess()
		select {
		case <-r.informer.HasSyncedChecker().Done():
			return nil
		default:
		}
		if refused != nil {
			return refused
		}
		select {
		case <-r.informer.HasSyncedChecker().Done():
			return nil
		case <-changed:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// noteInformerCall records the outcome of one of the informer's calls (verb list or watch): a
// refusal is kept until a call of that verb succeeds.
func (r *requests) noteInformerCall(verb string, err error) {
	refused := refusal(err, verb, certificateRequestsResource, "", driverAccount)
	if refused != nil && !errors.Is(refused, ErrPermissionDenied) {
		return // another failure: the reflector retries; the watch's suspicion covers it
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if (r.informerRefused[verb] == nil) == (refused == nil) {
		if refused != nil {
			r.informerRefused[verb] = refused
		}
		return
	}
	if refused == nil {
		delete(r.informerRefused, verb)
	} else {
		r.informerRefused[verb] = refused
	}
	close(r.accessChanged)
	r.accessChanged = make(chan struct{})
}

// informerAccess returns a refusal of the informer's calls, if one stands (list first), and a
// channel closed when that changes.
func (r *requests) informerAccess() (refused error, changed <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, verb := range []string{"list", "watch"} {
		if err := r.informerRefused[verb]; err != nil {
			return err, r.accessChanged
		}
	}
	return nil, r.accessChanged
}

func indexByVolumeHash(obj any) ([]string, error) {
	req, ok := obj.(*cmapi.CertificateRequest)
	if !ok {
		return nil, nil
	}
	if h, ok := req.Labels[api.VolumeIDHashLabelKey]; ok {
		return []string{h}, nil
	}
	return nil, nil
}

// requestKey names a request the way the informer's events do ("namespace/name", or just
// "name" in the empty namespace), so waiters and keys always match the events.
func requestKey(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// forVolume returns the volume's requests from the informer cache, oldest first by
// CreationTimestamp, then by the order this process created them, then by name. It uses the
// volume-hash index (no scan over the node's requests).
func (r *requests) forVolume(volumeID string) ([]*cmapi.CertificateRequest, error) {
	objs, err := r.informer.GetIndexer().ByIndex(volumeHashIndex, util.HashIdentifier(volumeID))
	if err != nil {
		return nil, fmt.Errorf("listing CertificateRequests of volume: %w", err)
	}
	reqs := make([]*cmapi.CertificateRequest, 0, len(objs))
	for _, o := range objs {
		if req, ok := o.(*cmapi.CertificateRequest); ok && req.DeletionTimestamp == nil {
			reqs = append(reqs, req)
		}
	}
	r.sortByCreation(reqs)
	return reqs, nil
}

// sortByCreation orders requests oldest first by CreationTimestamp, then by the order this
// process created them, then by name.
func (r *requests) sortByCreation(reqs []*cmapi.CertificateRequest) {
	r.mu.Lock()
	seq := make(map[*cmapi.CertificateRequest]uint64, len(reqs))
	for _, req := range reqs {
		seq[req] = r.created[requestKey(req.Namespace, req.Name)]
	}
	r.mu.Unlock()
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
}

// exists reports whether the informer's cache holds the request.
func (r *requests) exists(reqKey string) bool {
	ns, name, err := cache.SplitMetaNamespaceKey(reqKey)
	if err != nil || name == "" {
		return false
	}
	_, err = r.lister.CertificateRequests(ns).Get(name)
	return err == nil
}

// newestNotAfter is the expiry of the newest certificate issued for the volume, from the
// informer's cache; zero if there is none.
func (r *requests) newestNotAfter(volumeID string) time.Time {
	reqs, err := r.forVolume(volumeID)
	if err != nil {
		return time.Time{}
	}
	for i := len(reqs) - 1; i >= 0; i-- {
		if leaf, err := certs.ParseLeaf(reqs[i].Status.Certificate); err == nil {
			return leaf.NotAfter
		}
	}
	return time.Time{}
}

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

// create creates req with client, whose account who names (driverAccount, podAccount) for a
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
		return nil, fmt.Errorf("creating CertificateRequest: %w", refusal(err, "create", certificateRequestsResource, req.Namespace, who))
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
		return nil, refusal(err, "list", certificateRequestsResource, namespace, driverAccount)
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
			refusal(err, "delete", certificateRequestsResource, req.Namespace, driverAccount))
	}
	r.forgetOrder(requestKey(req.Namespace, req.Name))
	if err != nil {
		return fmt.Errorf("deleting stale CertificateRequest %s/%s: it was already gone: %w", req.Namespace, req.Name, errStaleCache)
	}
	return nil
}

// forVolumeFromAPIServer returns the volume's requests as the apiserver holds them (a list of
// this node's requests of this one volume, by their labels), ordered as forVolume orders them:
// for when the informer's cache is known to be stale.
func (r *requests) forVolumeFromAPIServer(ctx context.Context, volumeID string) ([]*cmapi.CertificateRequest, error) {
	selector := labels.SelectorFromSet(labels.Set{
		api.NodeIDHashLabelKey:   r.nodeHash,
		api.VolumeIDHashLabelKey: util.HashIdentifier(volumeID),
	}).String()
	list, err := r.client.CertmanagerV1().CertificateRequests("").List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		r.noteCallFailed(err)
		return nil, fmt.Errorf("listing CertificateRequests of volume from the apiserver: %w",
			refusal(err, "list", certificateRequestsResource, "", driverAccount))
	}
	reqs := make([]*cmapi.CertificateRequest, 0, len(list.Items))
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp == nil {
			reqs = append(reqs, &list.Items[i])
		}
	}
	r.sortByCreation(reqs)
	return reqs, nil
}

// noteCreated records that this process created (or is creating) a request, after every other
// it created.
func (r *requests) noteCreated(reqKey string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.createdSeq++
	r.created[reqKey] = r.createdSeq
}

func (r *requests) forgetOrder(reqKey string) {
	r.mu.Lock()
	delete(r.created, reqKey)
	r.mu.Unlock()
}

// waitError is how a wait for a request ends without an outcome: the last state seen, with
// the cause (deadline, unmanage, stop) kept for errors.Is.
type waitError struct {
	reason string
	cause  error
}

func (e *waitError) Error() string { return "waiting for request: " + e.reason }
func (e *waitError) Unwrap() error { return e.cause }

// wait waits until the request is issued (returned), denied or failed (finished is true, with
// the error drivers' tests match). read is the request as last read (from the cache, or from the
// apiserver: a create's answer, a settling's read), which counts until the cache shows something
// newer, so that a request already issued when a lagging cache does not show it yet ends the wait
// at once. The wait reacts to informer events; a request not yet in the cache is waited for, and
// a cache error other than "not found" is retried after cacheRetryInterval. While the informer's
// watch is suspect (see watchSuspect) it also reads the request from the apiserver every
// directReadInterval, so that a broken watch never holds a signed certificate back. A request
// that the cache showed and then lost, or that a direct read no longer finds, was deleted. When
// ctx ends the error is a *waitError naming the last state seen.
func (r *requests) wait(ctx context.Context, read *cmapi.CertificateRequest) (req *cmapi.CertificateRequest, finished bool, err error) {
	namespace, name := read.Namespace, read.Name
	notify, unwatch := r.watch(requestKey(namespace, name))
	defer unwatch()
	inCache := false
	lastReason := "request not yet in the informer cache"
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
		var retry, poll <-chan time.Time
		req, err := r.lister.CertificateRequests(namespace).Get(name)
		switch {
		case err == nil:
			inCache = true
		case apierrors.IsNotFound(err) && inCache:
			return nil, true, deletedWhileWaiting(name)
		}
		if direct != nil && (err != nil || newerThan(direct, req)) {
			req, err = direct, nil
		}
		switch {
		case err == nil:
			done, err := requestOutcome(req)
			if done {
				return req, err != nil, err
			}
			lastReason = pendingReason(req)
		case apierrors.IsNotFound(err):
		default:
			lastReason = err.Error()
			t := r.clock.NewTimer(cacheRetryInterval)
			defer t.Stop()
			retry = t.C()
		}
		switch suspect := r.isWatchSuspect() && !directRefused; {
		case suspect && pollTimer == nil:
			pollTimer = r.clock.NewTimer(directReadInterval)
			poll = pollTimer.C()
		case suspect:
			poll = pollTimer.C()
		case pollTimer != nil:
			pollTimer.Stop()
			pollTimer = nil
		}
		select {
		case <-notify:
		case <-retry:
		case <-poll:
			pollTimer = nil
			got, gone, err := r.readDirect(ctx, namespace, name)
			if gone && (inCache || direct != nil) {
				return nil, true, deletedWhileWaiting(name)
			}
			if got != nil {
				direct = got
			}
			directRefused = errors.Is(err, ErrPermissionDenied)
		case <-ctx.Done():
			return nil, false, &waitError{reason: lastReason, cause: context.Cause(ctx)}
		}
	}
}

// deletedWhileWaiting is the error of a wait whose request was deleted before it was issued. It
// matches ErrPodTerminating: this process never deletes a request it waits for, and the garbage
// collector deletes one when its pod is gone. Were the pod alive after all, kubelet's retry of
// the publish issues anew.
func deletedWhileWaiting(name string) error {
	return fmt.Errorf("request %q was deleted before it was issued (%w)", name, ErrPodTerminating)
}

// readDirect reads a request from the apiserver (readByName), if the node-wide bound on direct
// reads allows one now. gone is true when the apiserver does not have it; err is any other
// failure.
func (r *requests) readDirect(ctx context.Context, namespace, name string) (req *cmapi.CertificateRequest, gone bool, err error) {
	if !r.directReads.AllowN(r.clock.Now(), 1) {
		return nil, false, nil
	}
	req, err = r.readByName(ctx, namespace, name)
	switch {
	case err == nil:
		return req, false, nil
	case apierrors.IsNotFound(err):
		return nil, true, nil
	default:
		return nil, false, err
	}
}

// noteCallFailed learns from a failed call to the apiserver: one that got no answer at all (a
// refused or broken connection, see unreachable) means the informer's watch is down too, though
// client-go retries a refused watch without reporting it.
func (r *requests) noteCallFailed(err error) {
	if unreachable(err) {
		r.suspectWatch()
	}
}

// newerThan reports whether a request read from the apiserver is newer than the cache's copy:
// it carries an outcome the cache's copy lacks.
func newerThan(direct, cached *cmapi.CertificateRequest) bool {
	if cached == nil {
		return true
	}
	directDone, _ := requestOutcome(direct)
	cachedDone, _ := requestOutcome(cached)
	return directDone && !cachedDone
}

// suspectWatch marks the informer's watch as suspect, and wakes every waiter so that it starts
// reading its request from the apiserver.
func (r *requests) suspectWatch() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.watchSuspect {
		return
	}
	r.watchSuspect = true
	for _, chans := range r.watchers {
		for ch := range chans {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// watchLive is told that the informer opened a watch (which sends everything that changed since
// the cache's resource version) or that an event came through one: the watch is not suspect.
// Events the informer delivers after a relist prove nothing of the watch.
func (r *requests) watchLive() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.watchSuspect = false
}

func (r *requests) isWatchSuspect() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.watchSuspect
}

// watch registers interest in changes to one request.
func (r *requests) watch(reqKey string) (<-chan struct{}, func()) {
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

// waiting reports how many requests are being waited for.
func (r *requests) waiting() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.watchers)
}

// changed is the informer's add and update handler: it calls seen and wakes the request's
// waiters.
func (r *requests) changed(obj any) {
	if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
		r.seen(key)
		r.notify(key)
	}
}

// gone is the informer's delete handler: it forgets the request's creation order, calls
// deleted, and wakes the request's waiters.
func (r *requests) gone(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	r.forgetOrder(key)
	r.deleted(key)
	r.notify(key)
}

// notify wakes the request's waiters.
func (r *requests) notify(reqKey string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for ch := range r.watchers[reqKey] {
		select {
		case ch <- struct{}{}:
		default:
		}
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

// resumable reports whether the newest request of a volume may be waited on again: it has no
// Ready condition, or its Ready reason is Pending, Issued or empty.
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
