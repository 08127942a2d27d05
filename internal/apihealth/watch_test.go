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
	"errors"
	"runtime"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	testclock "k8s.io/utils/clock/testing"
)

// bound is how long a test waits for the relay's goroutine; nothing here waits for time to pass.
const bound = 10 * time.Second

// newHealth is a Health without a probe, its watch suspect.
func newHealth() *Health {
	h := New(testclock.NewFakeClock(time.Now()), nil, nil, nil)
	h.suspectWatch(false)
	return h
}

// source is a ListerWatcher whose watches are fakes the test drives.
type source struct {
	watches chan *watch.FakeWatcher
	err     error
}

func (s *source) ListWithContext(context.Context, metav1.ListOptions) (k8sruntime.Object, error) {
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

// open opens a watch through h.Observe, and checks that its opening cleared the suspicion.
func open(t *testing.T, ctx context.Context, h *Health) (watch.Interface, *watch.FakeWatcher) {
	t.Helper()
	h.suspectWatch(false)
	src := &source{watches: make(chan *watch.FakeWatcher, 1)}
	w, err := h.Observe(src).WatchWithContext(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if suspect(h) {
		t.Fatal("an opened watch left the watch suspect")
	}
	return w, <-src.watches
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

// Events pass on in order, and each clears the suspicion before it is passed on.
func TestEventsPassInOrderAndEachClearsTheSuspicion(t *testing.T) {
	h := newHealth()
	w, inner := open(t, context.Background(), h)
	defer w.Stop()
	for _, name := range []string{"a", "b", "c"} {
		h.suspectWatch(false)
		inner.Add(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name}})
		ev := <-w.ResultChan()
		if got := ev.Object.(*metav1.PartialObjectMetadata).Name; got != name {
			t.Fatalf("event for %q, want %q", got, name)
		}
		if suspect(h) {
			t.Fatalf("the event for %q left the watch suspect", name)
		}
	}
}

// A stream that ends while nobody stopped the watch makes the watch suspect, and wakes those
// waiting for that, once; the relay closes its own channel.
func TestStreamEndingUnaskedMakesTheWatchSuspect(t *testing.T) {
	h := newHealth()
	w, inner := open(t, context.Background(), h)
	_, becomes := h.WatchSuspect()
	inner.Stop() // the stream ends: the relay's Stop was not called
	closed(t, w)
	select {
	case <-becomes:
	default:
		t.Fatal("the channel of WatchSuspect was not closed")
	}
	if !suspect(h) {
		t.Fatal("the stream's end left the watch live")
	}
	h.watchLive()
	w.Stop()
	if suspect(h) {
		t.Fatal("Stop after the stream's end was reported as another end")
	}
}

// Stop ends the watch without a report. The relay sees its stop and the inner stream's end at
// once, and picks either first: many watches cover both orders.
func TestStopIsNotAnEnd(t *testing.T) {
	h := newHealth()
	for i := range 200 {
		w, inner := open(t, context.Background(), h)
		w.Stop()
		closed(t, w)
		if !inner.IsStopped() {
			t.Fatal("Stop did not stop the inner watch")
		}
		if suspect(h) {
			t.Fatalf("stopped watch %d was reported as ended", i)
		}
	}
}

// A stream that ends because the context it was opened with ended is the owner's own stop.
func TestEndAfterTheContextIsNotReported(t *testing.T) {
	h := newHealth()
	ctx, cancel := context.WithCancel(context.Background())
	w, inner := open(t, ctx, h)
	cancel()
	inner.Stop()
	closed(t, w)
	if suspect(h) {
		t.Fatal("a stream ended by its context was reported as ended")
	}
}

// A relay blocked passing an event on ends when the watch is stopped.
func TestStopWhileAnEventIsPending(t *testing.T) {
	h := newHealth()
	w, inner := open(t, context.Background(), h)
	h.suspectWatch(false)
	inner.Add(&metav1.PartialObjectMetadata{})
	// The relay clears the suspicion as it takes the event, then holds it: nobody reads it.
	for deadline := time.Now().Add(bound); suspect(h); runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatal("the event never reached the relay")
		}
	}
	w.Stop()
	for range w.ResultChan() {
		// the pending event may or may not be passed on; the channel must close
	}
	if suspect(h) {
		t.Fatal("a stopped watch was reported as ended")
	}
}

func TestFailedWatchIsNotOpened(t *testing.T) {
	h := newHealth()
	want := errors.New("refused")
	var lw cache.ListerWatcherWithContext = h.Observe(&source{err: want})
	if _, err := lw.WatchWithContext(context.Background(), metav1.ListOptions{}); !errors.Is(err, want) {
		t.Fatalf("error %v, want %v", err, want)
	}
	if !suspect(h) {
		t.Fatal("a watch that failed to open was reported as opened")
	}
}

// The informer's watch error handler is told that a watch could not be opened: the watch is
// suspect.
func TestAWatchThatCannotBeOpenedIsSuspect(t *testing.T) {
	h := New(testclock.NewFakeClock(time.Now()), nil, nil, nil)
	refl := cache.NewReflector(h.Observe(&source{}), &metav1.PartialObjectMetadata{}, cache.NewStore(cache.MetaNamespaceKeyFunc), 0)
	h.WatchError(context.Background(), refl, errors.New("connection refused"))
	if !suspect(h) {
		t.Fatal("a watch that could not be opened left the watch live")
	}
}
