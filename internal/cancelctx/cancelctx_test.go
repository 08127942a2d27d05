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

package cancelctx

import (
	"context"
	"errors"
	"testing"
	"time"
)

// pollTimeout bounds the waits for goroutines the context starts.
const pollTimeout = 10 * time.Second

// TestContext: a Context ends only with Cancel; contexts derived from it end with it, and leave
// nothing registered on it once they are done.
func TestContext(t *testing.T) {
	v := struct{ ctx *Context }{New()}
	if v.ctx.Err() != nil {
		t.Fatal("a new context has ended")
	}
	if _, ok := v.ctx.Deadline(); ok || v.ctx.Value("k") != nil {
		t.Fatal("the context has a deadline or values")
	}

	// A derived context that is done before the volume leaves nothing behind.
	done, cancelDone := context.WithCancel(v.ctx)
	cancelDone()
	if done.Err() == nil {
		t.Fatal("derived context not cancelled")
	}
	stopped := context.AfterFunc(v.ctx, func() { t.Error("a stopped AfterFunc ran") })
	if !stopped() || stopped() {
		t.Fatal("stop must report true once, then false")
	}
	v.ctx.mu.Lock()
	left := len(v.ctx.funcs)
	v.ctx.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d functions left registered on the context", left)
	}

	// A live derived context and an AfterFunc end with it.
	live, cancelLive := context.WithCancelCause(v.ctx)
	defer cancelLive(nil)
	ran := make(chan struct{})
	context.AfterFunc(v.ctx, func() { close(ran) })
	v.ctx.Cancel()
	v.ctx.Cancel() // a second cancel does nothing
	if !errors.Is(v.ctx.Err(), context.Canceled) {
		t.Fatalf("Err = %v after cancel", v.ctx.Err())
	}
	select {
	case <-live.Done():
	case <-time.After(pollTimeout):
		t.Fatal("a derived context did not end with it")
	}
	select {
	case <-ran:
	case <-time.After(pollTimeout):
		t.Fatal("an AfterFunc did not run when the volume ended")
	}
	// Registered after the end: runs at once.
	late := make(chan struct{})
	context.AfterFunc(v.ctx, func() { close(late) })
	select {
	case <-late:
	case <-time.After(pollTimeout):
		t.Fatal("an AfterFunc registered after the end did not run")
	}
}
