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
			out := make(chan watch.Event)
			relay := watch.NewProxyWatcher(out)
			go h.relay(ctx, w, relay.StopChan(), out)
			return relay, nil
		},
	}
}

// relay passes w's events on to out, unbuffered, each after telling h the watch is live, until
// stopped is closed (the relay's Stop was called) or ctx ends; it then stops w and closes out.
// Only relay stops w, so a stream that ends while ctx is live ended unasked: the watch is
// suspect.
func (h *Health) relay(ctx context.Context, w watch.Interface, stopped <-chan struct{}, out chan<- watch.Event) {
	defer close(out)
	defer w.Stop()
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				if ctx.Err() == nil && !isClosed(stopped) {
					h.suspectWatch(false)
				}
				return
			}
			h.watchLive()
			select {
			case out <- ev:
			case <-stopped:
				return
			case <-ctx.Done():
				return
			}
		case <-stopped:
			return
		case <-ctx.Done():
			return
		}
	}
}

// isClosed reports whether ch is closed: a watch stopped as its stream ended was not ended
// unasked.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
