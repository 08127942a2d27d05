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

// Package outage notices when the apiserver cannot be reached, probes it, and tells those who
// failed for want of it when it is back.
package outage

import (
	"context"
	"sync"
	"time"

	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	"github.com/cert-manager/csi-lib/internal/lifetime"
	"k8s.io/utils/clock"
)

const (
	// ProbeInterval is how often the apiserver is probed during an outage (on the
	// injected clock).
	ProbeInterval = 500 * time.Millisecond
	// probeTimeout bounds one probe.
	probeTimeout = 5 * time.Second
)

// Outage notices when the apiserver cannot be reached and when it can be again. A loop whose
// attempt failed for want of it waits its renewal backoff as after any error, but the end of the
// outage ends that wait, so that due volumes renew as soon as the apiserver is back instead of at
// the end of a backoff step (admission still bounds how many attempts start at once). An outage
// is confirmed by a probe that fails; a failure the first probe contradicts was not one, and its
// loop waits its backoff in full.
type Outage struct {
	clock clock.Clock
	// probe asks the apiserver something cheap; nil error: it answered.
	probe func(ctx context.Context) error
	life  *lifetime.Lifetime
	// ended is told of each outage that ends, by the ID Noticed returned for it.
	ended func(ID)

	mu      sync.Mutex
	probing bool
	current ID // the outage being probed, or the next one
}

// ID names an outage: the failures Noticed during one outage get the same ID, and ended is told
// it when that outage ends.
type ID uint64

// New returns an Outage that probes with probe, on goroutines of life. ended, if not nil, is
// called with an outage's ID when the outage ends.
func New(clk clock.Clock, probe func(ctx context.Context) error, life *lifetime.Lifetime, ended func(ID)) *Outage {
	return &Outage{clock: clk, probe: probe, life: life, ended: ended}
}

// Noticed records a failure to reach the apiserver and returns the ID of the outage it belongs
// to; it starts probing the apiserver unless a probe is running.
func (o *Outage) Noticed() ID {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.probing {
		return o.current
	}
	tr := o.life.Track()
	if tr == nil {
		return o.current
	}
	o.probing = true
	go o.probeUntilBack(tr)
	return o.current
}

// probeUntilBack probes the apiserver at once and then every ProbeInterval until it
// answers; if a probe failed first (the outage was real), the answer ends the outage.
func (o *Outage) probeUntilBack(tr *lifetime.Tracked) {
	defer tr.Done()
	confirmed := false
	for {
		ctx, cancel := context.WithTimeout(o.life.Context(), probeTimeout)
		err := o.probe(ctx)
		cancel()
		if err == nil {
			o.mu.Lock()
			o.probing = false
			id := o.current
			if confirmed {
				o.current++
			}
			o.mu.Unlock()
			if confirmed && o.ended != nil {
				o.ended(id)
			}
			return
		}
		confirmed = true
		t := o.clock.NewTimer(ProbeInterval)
		select {
		case <-t.C():
		case <-o.life.Context().Done():
			t.Stop()
			o.mu.Lock()
			o.probing = false
			o.mu.Unlock()
			return
		}
	}
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

// Probing reports whether a probe is running.
func (o *Outage) Probing() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.probing
}
