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

package testkit

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"
)

// WatchTracker is what SlowWatches needs of a fake clientset: its reactors and its tracker.
type WatchTracker interface {
	PrependWatchReactor(resource string, reaction k8stesting.WatchReactionFunc)
	Tracker() k8stesting.ObjectTracker
}

// SlowWatches makes every watch of gvr's resource that client opens from now on deliver each
// event lag after it happened, in order (a slow watch: an informer whose cache lags behind the
// apiserver). The returned release delivers every event at once from then on, held ones
// included; a test that holds events for good passes a lag longer than it runs. Stopping a watch
// ends its relay.
func SlowWatches(client WatchTracker, gvr schema.GroupVersionResource, lag time.Duration) (release func()) {
	released := make(chan struct{})
	var once sync.Once
	client.PrependWatchReactor(gvr.Resource, func(a k8stesting.Action) (bool, watch.Interface, error) {
		src, err := client.Tracker().Watch(gvr, a.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		w := &slowWatch{src: src, out: make(chan watch.Event), stop: make(chan struct{})}
		go w.relay(lag, released)
		return true, w, nil
	})
	return func() { once.Do(func() { close(released) }) }
}

type slowWatch struct {
	src  watch.Interface
	out  chan watch.Event
	stop chan struct{}
	once sync.Once
}

func (w *slowWatch) Stop() {
	w.once.Do(func() {
		close(w.stop)
		w.src.Stop()
	})
}

func (w *slowWatch) ResultChan() <-chan watch.Event { return w.out }

// relay queues the source's events and hands each on once lag has passed since it arrived, or
// at once after release.
func (w *slowWatch) relay(lag time.Duration, released <-chan struct{}) {
	defer close(w.out)
	type queued struct {
		ev  watch.Event
		due time.Time
	}
	var queue []queued
	in := w.src.ResultChan()
	flush := false
	for in != nil || len(queue) > 0 {
		var out chan watch.Event
		var next watch.Event
		var timer *time.Timer
		var due <-chan time.Time
		if len(queue) > 0 {
			next = queue[0].ev
			if wait := time.Until(queue[0].due); flush || wait <= 0 {
				out = w.out
			} else {
				timer = time.NewTimer(wait)
				due = timer.C
			}
		}
		select {
		case ev, ok := <-in:
			if !ok {
				in = nil
			} else {
				queue = append(queue, queued{ev: ev, due: time.Now().Add(lag)})
			}
		case out <- next:
			queue = queue[1:]
		case <-due:
		case <-released:
			flush, released = true, nil
		case <-w.stop:
			in, queue = nil, nil
		}
		if timer != nil {
			timer.Stop()
		}
	}
}
