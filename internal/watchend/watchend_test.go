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

package watchend

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// bound is how long a test waits for the relay's goroutine; nothing here waits for time to pass.
const bound = 10 * time.Second

type counts struct{ opened, delivered, ended atomic.Int32 }

func (c *counts) observer() Observer {
	return Observer{
		Opened:    func() { c.opened.Add(1) },
		Delivered: func() { c.delivered.Add(1) },
		Ended:     func() { c.ended.Add(1) },
	}
}

// source is a ListerWatcher whose watches are fakes the test drives.
type source struct {
	watches chan *watch.FakeWatcher
	err     error
}

func (s *source) ListWithContext(context.Context, metav1.ListOptions) (runtime.Object, error) {
	return &metav1.List{}, nil
}

func (s *source) WatchWithContext(context.Context, metav1.ListOptions) (watch.Interface, error) {
	if s.err != nil {
		return nil, s.err
	}
	w := watch.NewFakeWithChanSize(10, false)
	s.watches <- w
	return w, nil
}

func open(t *testing.T, ctx context.Context, c *counts) (*source, watch.Interface, *watch.FakeWatcher) {
	t.Helper()
	src := &source{watches: make(chan *watch.FakeWatcher, 1)}
	w, err := Observe(src, c.observer()).WatchWithContext(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return src, w, <-src.watches
}

// closed waits, with a bound, for the watch's result channel to close, and fails on any event.
func closed(t *testing.T, w watch.Interface) {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if ok {
			t.Fatalf("unexpected event %v", ev.Type)
		}
	case <-time.After(bound):
		t.Fatal("the result channel was not closed")
	}
}

func TestEventsPassInOrderAndAreCounted(t *testing.T) {
	var c counts
	_, w, inner := open(t, context.Background(), &c)
	defer w.Stop()
	for _, name := range []string{"a", "b", "c"} {
		inner.Add(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name}})
	}
	for _, want := range []string{"a", "b", "c"} {
		ev := <-w.ResultChan()
		if got := ev.Object.(*metav1.PartialObjectMetadata).Name; got != want {
			t.Fatalf("event for %q, want %q", got, want)
		}
	}
	if c.opened.Load() != 1 || c.delivered.Load() != 3 || c.ended.Load() != 0 {
		t.Fatalf("opened %d, delivered %d, ended %d; want 1, 3, 0", c.opened.Load(), c.delivered.Load(), c.ended.Load())
	}
}

// A stream that ends while nobody stopped the watch is reported once, and the relay closes its
// own channel.
func TestStreamEndingUnaskedIsReported(t *testing.T) {
	var c counts
	_, w, inner := open(t, context.Background(), &c)
	inner.Stop() // the stream ends: the relay's Stop was not called
	closed(t, w)
	if c.ended.Load() != 1 {
		t.Fatalf("ended %d times, want 1", c.ended.Load())
	}
	w.Stop()
	if c.ended.Load() != 1 {
		t.Fatalf("ended %d times after Stop, want 1", c.ended.Load())
	}
}

// Stop ends the watch without a report. The relay sees its stop and the inner stream's end at
// once, and picks either first: many watches cover both orders.
func TestStopIsNotAnEnd(t *testing.T) {
	var c counts
	for range 200 {
		_, w, inner := open(t, context.Background(), &c)
		w.Stop()
		closed(t, w)
		if !inner.IsStopped() {
			t.Fatal("Stop did not stop the inner watch")
		}
	}
	if n := c.ended.Load(); n != 0 {
		t.Fatalf("%d stopped watches were reported as ended", n)
	}
}

// A stream that ends because the context it was opened with ended is the owner's own stop.
func TestEndAfterTheContextIsNotReported(t *testing.T) {
	var c counts
	ctx, cancel := context.WithCancel(context.Background())
	_, w, inner := open(t, ctx, &c)
	cancel()
	inner.Stop()
	closed(t, w)
	if c.ended.Load() != 0 {
		t.Fatal("a stream ended by its context was reported as ended")
	}
}

// A relay blocked passing an event on ends when the watch is stopped.
func TestStopWhileAnEventIsPending(t *testing.T) {
	var ended atomic.Int32
	delivered := make(chan struct{}, 1)
	src := &source{watches: make(chan *watch.FakeWatcher, 1)}
	w, err := Observe(src, Observer{
		Delivered: func() { delivered <- struct{}{} },
		Ended:     func() { ended.Add(1) },
	}).WatchWithContext(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	(<-src.watches).Add(&metav1.PartialObjectMetadata{})
	select {
	case <-delivered: // the relay holds the event, and nobody reads it
	case <-time.After(bound):
		t.Fatal("the event never reached the relay")
	}
	w.Stop()
	for range w.ResultChan() {
		// the pending event may or may not be passed on; the channel must close
	}
	if ended.Load() != 0 {
		t.Fatal("a stopped watch was reported as ended")
	}
}

func TestFailedWatchIsNotOpened(t *testing.T) {
	var c counts
	want := errors.New("refused")
	src := &source{err: want}
	var lw cache.ListerWatcherWithContext = Observe(src, c.observer())
	if _, err := lw.WatchWithContext(context.Background(), metav1.ListOptions{}); !errors.Is(err, want) {
		t.Fatalf("error %v, want %v", err, want)
	}
	if c.opened.Load() != 0 {
		t.Fatal("a watch that failed to open was reported as opened")
	}
}
