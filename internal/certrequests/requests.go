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

// Package certrequests is a CSI node's view of its cert-manager CertificateRequests: one
// informer on the requests labelled with the node's hash, indexed by volume, and the calls that
// find, create, settle, wait for and delete a volume's requests. It knows nothing of volumes'
// lifecycles or private keys: the package manager decides what to create and when, and learns of
// every request the informer sees or loses through the callbacks given to New. Nor does it own
// the apiserver's health: it tells apihealth of every call that fails and of the informer's
// watches, and asks it whether the watch is suspect.
package certrequests

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	cmlisters "github.com/cert-manager/cert-manager/pkg/client/listers/certmanager/v1"
	"golang.org/x/time/rate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/cert-manager/csi-lib/internal/api"
	"github.com/cert-manager/csi-lib/internal/apicall"
	"github.com/cert-manager/csi-lib/internal/apihealth"
)

const (
	// volumeHashIndex indexes the informer's requests by the volume-hash label.
	volumeHashIndex = "volumeIDHash"

	// DirectReadInterval is how often a wait reads its request from the apiserver while the
	// informer's watch is suspect (see apihealth; on the injected clock); directReadRate and
	// directReadBurst bound those reads node-wide.
	DirectReadInterval = 500 * time.Millisecond
	directReadRate     = 50
	directReadBurst    = 50
)

// View is the node's view of its CertificateRequests: one informer selected by the
// node-hash label and indexed by the volume-hash label, the order in which this process created
// requests, and the waiters the informer's events wake. It finds, builds, creates, settles,
// waits for and deletes a volume's requests. It reads the apiserver past its cache only to
// settle a create whose outcome is unknown, when a delete shows the cache stale, and, one request
// per waiter within a node-wide bound, while its watch is suspect; never a list of everything.
// Every call it makes with the driver's own client uses the verbs the consumers' charts grant
// (list, watch, delete, and create where the driver creates): a request is read by name with a
// list that selects the name, never a get. What else must happen when a request shows up in the
// cache or is gone (its private key dropped) is the seen and deleted callbacks' business.
type View struct {
	client   cmclient.Interface // the driver's own client: lists, watches, reads and deletes requests
	clock    clock.Clock
	nodeHash string
	informer cache.SharedIndexInformer
	// informerDone is closed when the informer started by Start has stopped.
	informerDone chan struct{}
	lister       cmlisters.CertificateRequestLister
	// seen is called with the key of every request the informer adds or updates, deleted with
	// the key of every request it sees deleted.
	seen, deleted func(reqKey string)
	// health is told of every call that fails and of the informer's watches, and says whether
	// the watch is suspect.
	health *apihealth.Health
	// fallbackReads: a wait reads its request from the apiserver while the watch is suspect,
	// within directReads.
	fallbackReads bool
	directReads   *rate.Limiter

	mu sync.Mutex
	// created orders the requests this process created, by request key: the apiserver's
	// CreationTimestamp has one-second resolution.
	created    map[string]uint64
	createdSeq uint64
	// watchers are notified when the informer sees a change to a request, by request key.
	watchers map[string]map[chan struct{}]struct{}
	// informerRefused holds, by verb (list, watch), the apiserver's refusal of the informer's
	// last call of that verb; nil when a call of that verb succeeded since. accessChanged is
	// closed, and replaced, whenever a verb goes from refused to not refused or back.
	informerRefused map[string]error
	accessChanged   chan struct{}
}

// New sets up the informer on the node's requests (those labelled with nodeHash); Start runs
// it. seen and deleted are called with the key (see Key) of every request the informer adds or
// updates, and deletes. health observes the informer's watches and is told of every call that
// fails. fallbackReads: a wait reads its request from the apiserver while the informer's watch
// is suspect (see Wait); false, it relies on the informer alone.
func New(client cmclient.Interface, clk clock.Clock, nodeHash string, health *apihealth.Health, fallbackReads bool, seen, deleted func(reqKey string)) (*View, error) {
	r := &View{
		client:        client,
		clock:         clk,
		nodeHash:      nodeHash,
		health:        health,
		seen:          seen,
		deleted:       deleted,
		created:       make(map[string]uint64),
		watchers:      make(map[string]map[chan struct{}]struct{}),
		fallbackReads: fallbackReads,
		directReads:   rate.NewLimiter(directReadRate, directReadBurst),

		informerRefused: make(map[string]error),
		accessChanged:   make(chan struct{}),
	}
	selector := labels.SelectorFromSet(labels.Set{api.NodeIDHashLabelKey: nodeHash}).String()
	crs := client.CertmanagerV1().CertificateRequests(metav1.NamespaceAll)
	lw := health.Observe(&cache.ListWatch{
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
	})
	r.informer = cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, client),
		&cmapi.CertificateRequest{}, cache.SharedIndexInformerOptions{Indexers: cache.Indexers{volumeHashIndex: indexByVolumeHash}})
	if err := r.informer.SetWatchErrorHandlerWithContext(health.WatchError); err != nil {
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

// Start runs the informer until ctx ends and waits for its cache to sync. An error matching
// apicall.ErrPermissionDenied says the apiserver refuses the informer's list or watch: the informer
// goes on trying (on client-go's reflector backoff, up to 30 s between tries) and syncs once the
// permission is granted.
func (r *View) Start(ctx context.Context) error {
	r.informerDone = make(chan struct{})
	go func() {
		defer close(r.informerDone)
		r.informer.RunWithContext(ctx)
	}()
	if err := r.WaitForSync(ctx); err != nil {
		return fmt.Errorf("CertificateRequest informer did not sync: %w", err)
	}
	return nil
}

// Shutdown waits for the informer once the context given to Start has ended.
func (r *View) Shutdown() {
	<-r.informerDone
}

// WaitForSync waits until the informer has synced or ctx ends, and ends at once with the
// apiserver's refusal (matching apicall.ErrPermissionDenied) while it refuses the informer's list
// or watch and the cache has not synced. It reacts to the informer's own signal; no timer is
// involved.
func (r *View) WaitForSync(ctx context.Context) error {
	for {
		// A synced cache answers without the lock: the sync, once done, stays done.
		if r.informer.HasSynced() {
			return nil
		}
		// A refusal of the list is told before one of the watch.
		r.mu.Lock()
		refused := r.informerRefused["list"]
		if refused == nil {
			refused = r.informerRefused["watch"]
		}
		changed := r.accessChanged
		r.mu.Unlock()
		// The cache may have synced while the refusal was read.
		if refused != nil && !r.informer.HasSynced() {
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
func (r *View) noteInformerCall(verb string, err error) {
	refused := apicall.Refusal(err, verb, apicall.CertificateRequests, "", apicall.DriverAccount)
	if refused != nil && !errors.Is(refused, apicall.ErrPermissionDenied) {
		return // another failure: the reflector retries; the watch's suspicion covers it
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	changed := (r.informerRefused[verb] == nil) != (refused == nil)
	r.informerRefused[verb] = refused
	if changed {
		close(r.accessChanged)
		r.accessChanged = make(chan struct{})
	}
}

func indexByVolumeHash(obj any) ([]string, error) {
	if req, ok := obj.(*cmapi.CertificateRequest); ok {
		if h, ok := req.Labels[api.VolumeIDHashLabelKey]; ok {
			return []string{h}, nil
		}
	}
	return nil, nil
}

// Key names a request the way the informer's events do ("namespace/name", or just
// "name" in the empty namespace: client-go's cache.ObjectName), so waiters and keys always match
// the events.
func Key(namespace, name string) string {
	return cache.NewObjectName(namespace, name).String()
}

func (r *View) forgetOrder(reqKey string) {
	r.mu.Lock()
	delete(r.created, reqKey)
	r.mu.Unlock()
}

// changed is the informer's add and update handler: it calls seen and wakes the request's
// waiters.
func (r *View) changed(obj any) {
	if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
		r.seen(key)
		r.notify(key)
	}
}

// gone is the informer's delete handler: it forgets the request's creation order, calls
// deleted, and wakes the request's waiters.
func (r *View) gone(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	r.forgetOrder(key)
	r.deleted(key)
	r.notify(key)
}

// notify wakes the request's waiters.
func (r *View) notify(reqKey string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for ch := range r.watchers[reqKey] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Lister lists the node's requests from the informer's cache.
func (r *View) Lister() cmlisters.CertificateRequestLister {
	return r.lister
}
