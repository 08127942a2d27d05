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

package apihealth

import (
	"context"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// Observe returns a ListWatch that lists and watches through lw and learns what client-go's
// reflector does not report: a watch opened and events coming through it (the watch is live), and
// an open watch's stream that ended although nobody stopped it (a broken connection, an
// apiserver restart, a proxy's timeout: the watch is suspect). The reflector handles such an end
// quietly: it watches again, or relists after its backoff, and calls the informer's watch error
// handler only when a new watch cannot be opened at all. Each watch it returns runs one goroutine
// that ends when the stream ends or the watch is stopped.
func (h *Health) Observe(lw cache.ListerWatcherWithContext) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: lw.ListWithContext,
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			w, err := lw.WatchWithContext(ctx, options)
			if err != nil {
				return nil, err
			}
			h.watchLive()
			ctx, cancel := context.WithCancel(ctx)
			r := &relay{inner: w, out: make(chan watch.Event), ctx: ctx}
			r.stop = sync.OnceFunc(func() {
				cancel()
				w.Stop()
			})
			go r.run(h)
			return r, nil
		},
	}
}

// relay passes a watch's events on, unbuffered, and learns whether its stream ended unasked.
type relay struct {
	inner watch.Interface
	out   chan watch.Event
	// ctx ends when the watch is stopped or the context it was opened with ends; stop ends it
	// before it stops the inner watch, so that run, seeing the inner stream end, knows it was
	// asked to.
	ctx  context.Context
	stop func()
}

func (r *relay) Stop() { r.stop() }

func (r *relay) ResultChan() <-chan watch.Event { return r.out }

// run passes the events on, each after telling h the watch is live, and tells h the watch is
// suspect if the stream ends while ctx is live.
func (r *relay) run(h *Health) {
	defer close(r.out)
	for {
		select {
		case ev, ok := <-r.inner.ResultChan():
			if !ok {
				if r.ctx.Err() == nil {
					h.suspectWatch(false)
				}
				return
			}
			h.watchLive()
			select {
			case r.out <- ev:
			case <-r.ctx.Done():
				return
			}
		case <-r.ctx.Done():
			return
		}
	}
}
