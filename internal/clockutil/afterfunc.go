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

// Package clockutil calls a function once a delay has passed on an injected clock
// (k8s.io/utils/clock), the same way whether or not the clock offers AfterFunc.
package clockutil

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// AfterFunc calls f, on a goroutine of its own, once d has passed on clk, unless the returned
// stop is called first (stop reports whether it prevented the call). With a clock that offers
// AfterFunc no goroutine waits; otherwise one does, and stop ends it.
func AfterFunc(clk clock.Clock, d time.Duration, f func()) (stop func() bool) {
	if d <= 0 {
		// Already due: a fake clock that is never stepped would not fire it.
		go f()
		return func() bool { return false }
	}
	if dc, ok := clk.(clock.WithDelayedExecution); ok {
		// f runs on its own goroutine: a fake clock calls AfterFunc functions from Step with
		// its lock held, and f may take a lock whose holder reads the clock.
		return dc.AfterFunc(d, func() { go f() }).Stop
	}
	t := clk.NewTimer(d)
	done := make(chan struct{})
	var once sync.Once
	go func() {
		select {
		case <-t.C():
			f()
		case <-done:
		}
	}()
	return func() bool {
		stopped := t.Stop()
		once.Do(func() { close(done) })
		return stopped
	}
}
