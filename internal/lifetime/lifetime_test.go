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
	"testing"
)

// running returns how many goroutines are registered and not outside.
func running(l *Lifetime) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
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
