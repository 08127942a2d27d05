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

// Package watchend tells an informer's owner what client-go's reflector does not report: that a
// watch was opened, that events come through it, and that an open watch's stream ended although
// nobody stopped it (a broken connection, an apiserver restart, a proxy's timeout). The reflector handles both quietly: it
// watches again, or relists after its backoff, and calls the informer's watch error handler
// only when a new watch cannot be opened at all. An owner that waits for events can use these
// signals to stop trusting its cache between a stream's end and the next watch.
package watchend

import (
	"context"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// Observer is told of the watches a ListWatch opens.
type Observer struct {
	// Opened is called each time a watch is opened: the apiserver accepted it and will send what
	// changed from the requested resource version on.
	Opened func()
	// Delivered is called for each event that comes through an open watch, bookmarks included,
	// before the event is passed on.
	Delivered func()
	// Ended is called when an open watch's stream ends without Stop having been called and
	// while the context the watch was opened with is still live.
	Ended func()
}

// Observe returns a ListWatch that lists and watches through lw, telling o of every watch it
// opens and of every stream that ends unasked. Each watch it returns runs one goroutine that
// ends when the stream ends or the watch is stopped.
func Observe(lw cache.ListerWatcherWithContext, o Observer) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: lw.ListWithContext,
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			w, err := lw.WatchWithContext(ctx, options)
			if err != nil {
				return nil, err
			}
			if o.Opened != nil {
				o.Opened()
			}
			r := &relay{inner: w, out: make(chan watch.Event), stop: make(chan struct{})}
			go r.run(ctx, o)
			return r, nil
		},
	}
}

// relay passes a watch's events on, unbuffered, and learns whether its stream ended unasked.
type relay struct {
	inner watch.Interface
	out   chan watch.Event
	stop  chan struct{}
	once  sync.Once
}

// Stop stops the watch. stop is closed before the inner watch is stopped, so that run, seeing
// the inner stream end, knows it was asked to.
func (r *relay) Stop() {
	r.once.Do(func() {
		close(r.stop)
		r.inner.Stop()
	})
}

func (r *relay) ResultChan() <-chan watch.Event { return r.out }

func (r *relay) run(ctx context.Context, o Observer) {
	defer close(r.out)
	in := r.inner.ResultChan()
	for {
		select {
		case ev, ok := <-in:
			if !ok {
				if !r.stopped() && ctx.Err() == nil && o.Ended != nil {
					o.Ended()
				}
				return
			}
			if o.Delivered != nil {
				o.Delivered()
			}
			select {
			case r.out <- ev:
			case <-r.stop:
				return
			}
		case <-r.stop:
			return
		}
	}
}

func (r *relay) stopped() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}
