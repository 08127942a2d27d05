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

// Package apihealth is the one owner of what the library knows of the apiserver's health:
// whether the informer's watch of the node's requests is suspect (its events may not come), and
// whether the apiserver is unreachable and probed (an outage, with its ID). A renewal attempt that
// fails for want of the apiserver tells both at once; any other call that gets no answer makes
// the watch suspect. Those who act on them subscribe: a wait for a request takes WatchSuspect's
// channel, closed when the watch becomes suspect, and the loops whose attempts failed in an
// outage are told its end by the function given to New. Both are told after the lock is
// released.
package apihealth

import (
	"context"
	"sync"
	"time"

	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/cert-manager/csi-lib/internal/apicall"
	"github.com/cert-manager/csi-lib/internal/lifetime"
)

const (
	// ProbeInterval is how often the apiserver is probed during an outage (on the injected
	// clock).
	ProbeInterval = 500 * time.Millisecond
	// probeTimeout bounds one probe.
	probeTimeout = 5 * time.Second
)

// ID names an outage: the failures noticed during one outage get the same ID, and the function
// given to New is told it when that outage ends.
type ID uint64

// Health is what the library knows of the apiserver's health.
//
// The watch is suspect from the moment its stream ends unasked, a new watch cannot be opened, or
// a call finds the apiserver unreachable (client-go retries a refused watch without reporting
// it), until a watch is opened or an event comes through one. A wait for a request then reads it
// past the cache, so that a broken watch never holds a signed certificate back.
//
// An outage starts when a renewal attempt fails for want of the apiserver: it is probed at once
// and every ProbeInterval until it answers. Only such a failure starts one, since only a loop
// waits for its end: kubelet retries a publish, and a call whose loss the attempt itself settled
// (a lost response) failed nothing. A loop whose attempt failed in the outage waits its renewal
// backoff as after any error, but the outage's end ends that wait, so that due volumes renew as
// soon as the apiserver is back (admission still bounds how many attempts start at once). An
// outage is confirmed by a probe that fails; a failure the first probe contradicts was not one,
// and its loop waits its backoff in full.
type Health struct {
	clock clock.Clock
	// probe asks the apiserver something cheap (nil error: it answered); nil: no probing.
	probe func(ctx context.Context) error
	life  *lifetime.Lifetime
	// outageEnded, if not nil, is told of each outage that ends, by its ID.
	outageEnded func(ID)

	mu sync.Mutex
	// suspect: the watch is suspect. suspected is closed, and replaced, when it becomes so.
	suspect   bool
	suspected chan struct{}
	// probing: a probe runs; current is the outage it probes, or the next one.
	probing bool
	current ID
}

// New returns a Health whose watch is not suspect. probe, if not nil, probes the apiserver
// during an outage, on goroutines of life; outageEnded, if not nil, is called with an outage's
// ID when a probe finds that outage ended.
func New(clk clock.Clock, probe func(ctx context.Context) error, life *lifetime.Lifetime, outageEnded func(ID)) *Health {
	return &Health{clock: clk, probe: probe, life: life, outageEnded: outageEnded, suspected: make(chan struct{})}
}

// CallFailed learns from a call to the apiserver that failed with err: one that got no answer
// at all (apicall.Unreachable) makes the watch suspect, the watch depending on the same
// apiserver (client-go retries a refused watch without reporting it).
func (h *Health) CallFailed(err error) {
	if apicall.Unreachable(err) {
		h.suspectWatch(false)
	}
}

// AttemptFailed learns from a renewal attempt that failed with err. One that failed for want of
// the apiserver (apicall.Unreachable: a call of it got no answer) makes the watch suspect and
// starts an outage's probe, unless a probe runs. It returns the ID of the outage and whether its
// end will be told: false when err is not an outage's, or without a probe.
func (h *Health) AttemptFailed(err error) (ID, bool) {
	if !apicall.Unreachable(err) {
		return 0, false
	}
	return h.suspectWatch(true)
}

// WatchSuspect reports whether the watch is suspect, and returns a channel that is closed when
// it next becomes suspect.
func (h *Health) WatchSuspect() (bool, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.suspect, h.suspected
}

// WatchError is an informer's watch error handler: client-go's own (it logs), and the watch is
// suspect, since it could not be opened.
func (h *Health) WatchError(ctx context.Context, r *cache.Reflector, err error) {
	cache.DefaultWatchErrorHandler(ctx, r, err)
	h.suspectWatch(false)
}

// suspectWatch makes the watch suspect and, with probe, probes the apiserver unless a probe runs
// or New was given none. It returns the current outage's ID and whether its end will be told.
func (h *Health) suspectWatch(probe bool) (ID, bool) {
	h.mu.Lock()
	var suspected chan struct{}
	if !h.suspect {
		h.suspect = true
		suspected, h.suspected = h.suspected, make(chan struct{})
	}
	id, probed := h.current, probe && h.probe != nil
	if probed && !h.probing {
		if tr := h.life.Track(); tr != nil {
			h.probing = true
			go h.probeUntilBack(tr)
		}
	}
	h.mu.Unlock()
	if suspected != nil {
		close(suspected) // after the lock: the waits are told, never called, under it
	}
	return id, probed
}

// watchLive is told that a watch was opened (it sends everything that changed since the cache's
// resource version) or that an event came through one: the watch is not suspect. Events an
// informer delivers after a relist prove nothing of the watch.
func (h *Health) watchLive() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.suspect = false
}

// probeUntilBack probes the apiserver at once and then every ProbeInterval until it answers; if
// a probe failed first (the outage was real), the answer ends the outage.
func (h *Health) probeUntilBack(tr *lifetime.Tracked) {
	defer tr.Done()
	confirmed := false
	for {
		ctx, cancel := context.WithTimeout(h.life.Context(), probeTimeout)
		err := h.probe(ctx)
		cancel()
		if err == nil {
			h.mu.Lock()
			h.probing = false
			id := h.current
			if confirmed {
				h.current++
			}
			h.mu.Unlock()
			if confirmed && h.outageEnded != nil {
				h.outageEnded(id)
			}
			return
		}
		confirmed = true
		t := h.clock.NewTimer(ProbeInterval)
		select {
		case <-t.C():
		case <-h.life.Context().Done():
			t.Stop()
			h.mu.Lock()
			h.probing = false
			h.mu.Unlock()
			return
		}
	}
}

// Probing reports whether a probe runs.
func (h *Health) Probing() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.probing
}

// APIServerProbe asks the apiserver for its version: the cheapest request every client may make.
func APIServerProbe(client cmclient.Interface) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if rc := client.Discovery().RESTClient(); rc != nil {
			return rc.Get().AbsPath("/version").Do(ctx).Error()
		}
		_, err := client.Discovery().ServerVersion() // a fake clientset's discovery
		return err
	}
}
