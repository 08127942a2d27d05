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

package lifetime

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// running returns how many goroutines are registered and not outside.
func running(l *Lifetime) int {
	return int(l.state.Load() &^ closedBit)
}

// TestEndWaitsForTrackedGoroutinesButNotOutside: End waits for a tracked goroutine, not for one
// inside Outside, which learns on its return that the lifetime ended; Track after End is nil.
func TestEndWaitsForTrackedGoroutinesButNotOutside(t *testing.T) {
	l := New()
	inside, outside := l.Track(), l.Track()
	if inside == nil || outside == nil || running(l) != 2 {
		t.Fatalf("Track: %v %v, running %d", inside, outside, running(l))
	}
	enteredF, releaseF, outsideReturned := make(chan struct{}), make(chan struct{}), make(chan bool)
	go func() {
		outsideReturned <- outside.Outside(func() {
			close(enteredF)
			<-releaseF
		})
	}()
	<-enteredF
	if running(l) != 1 {
		t.Fatalf("running %d while one goroutine is outside, want 1", running(l))
	}
	ended := make(chan struct{})
	go func() {
		l.End()
		close(ended)
	}()
	<-l.Context().Done()
	select {
	case <-ended:
		t.Fatal("End returned while a tracked goroutine was still running")
	default:
	}
	inside.Done()
	<-ended // End no longer waits: the other goroutine is outside.
	close(releaseF)
	if <-outsideReturned {
		t.Error("Outside reported true after the lifetime ended")
	}
	outside.Done() // no longer registered: does nothing
	if running(l) != 0 {
		t.Errorf("running %d after End, want 0", running(l))
	}
	if l.Track() != nil {
		t.Error("Track after End registered a goroutine")
	}
}

// TestEndTwice: End with nothing registered returns, and so does a second End; nothing
// registers after either.
func TestEndTwice(t *testing.T) {
	l := New()
	l.End()
	l.End()
	if l.Track() != nil {
		t.Error("Track after End registered a goroutine")
	}
}

// TestEndNeverReturnsWhileAGoroutineIsInside: registered goroutines step outside and back and
// leave while End runs; once End has returned, none of them is between its registration (or a
// return from outside that found the lifetime live) and its next step outside or its end.
func TestEndNeverReturnsWhileAGoroutineIsInside(t *testing.T) {
	for round := 0; round < 50; round++ {
		l := New()
		var inside atomic.Int32
		var wg sync.WaitGroup
		for range 16 {
			tr := l.Track()
			inside.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 3 {
					inside.Add(-1)
					if !tr.Outside(runtime.Gosched) {
						return
					}
					inside.Add(1)
				}
				inside.Add(-1)
				tr.Done()
			}()
		}
		l.End()
		if n := inside.Load(); n != 0 {
			t.Fatalf("round %d: End returned with %d goroutines inside", round, n)
		}
		wg.Wait()
	}
}

// TestOutsideAfterTheLifetimeEnded: once Outside has reported the lifetime ended, a second
// Outside runs nothing and reports false, and the lifetime stays closed.
func TestOutsideAfterTheLifetimeEnded(t *testing.T) {
	l := New()
	tr := l.Track()
	ended := make(chan struct{})
	if tr.Outside(func() {
		go func() {
			l.End()
			close(ended)
		}()
		<-ended
	}) {
		t.Fatal("Outside reported the lifetime live after End")
	}
	ran := false
	if tr.Outside(func() { ran = true }) || ran {
		t.Fatalf("a second Outside after End: ran %v", ran)
	}
	if l.Track() != nil {
		t.Fatal("Track after End registered a goroutine")
	}
}
