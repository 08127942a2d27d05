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

package clockutil

import (
	"testing"
	"time"

	"k8s.io/utils/clock"
	testclock "k8s.io/utils/clock/testing"
)

// TestAfterFuncOnEitherClock: f runs once d has passed on the clock, not before, whether or not
// the clock offers AfterFunc; a stop before then prevents it and leaves no timer on the clock;
// a d already passed runs f at once.
func TestAfterFuncOnEitherClock(t *testing.T) {
	type plainClock struct{ clock.Clock } // hides AfterFunc
	for name, wrap := range map[string]func(*testclock.FakeClock) clock.Clock{
		"with AfterFunc":    func(f *testclock.FakeClock) clock.Clock { return f },
		"without AfterFunc": func(f *testclock.FakeClock) clock.Clock { return plainClock{f} },
	} {
		t.Run(name, func(t *testing.T) {
			fc := testclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			clk := wrap(fc)
			fired := make(chan struct{}, 1)
			f := func() { fired <- struct{}{} }

			AfterFunc(clk, time.Second, f)
			fc.Step(time.Second - time.Nanosecond)
			select {
			case <-fired:
				t.Fatal("f ran before d had passed")
			case <-time.After(10 * time.Millisecond):
			}
			fc.Step(time.Nanosecond)
			select {
			case <-fired:
			case <-time.After(10 * time.Second):
				t.Fatal("f did not run once d had passed")
			}

			stop := AfterFunc(clk, time.Second, f)
			if !stop() {
				t.Fatal("stop before d reported it did not prevent the call")
			}
			fc.Step(time.Second)
			select {
			case <-fired:
				t.Fatal("f ran after stop")
			case <-time.After(10 * time.Millisecond):
			}
			if w := fc.Waiters(); w != 0 {
				t.Fatalf("%d timers left on the clock after stop", w)
			}

			AfterFunc(clk, 0, f)
			select {
			case <-fired:
			case <-time.After(10 * time.Second):
				t.Fatal("f with d already passed did not run without a step")
			}
		})
	}
}
