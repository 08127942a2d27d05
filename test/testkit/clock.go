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
	"testing"
	"time"

	"k8s.io/utils/clock"
	testclock "k8s.io/utils/clock/testing"
)

// RecordingClock is a fake clock that reports the duration of every timer created on it (by
// NewTimer or AfterFunc) on Timers, before the timer is registered with the fake clock, so a
// test can assert the exact wait the code under test chose.
type RecordingClock struct {
	*testclock.FakeClock
	Timers chan time.Duration
}

// NewRecordingClock returns a RecordingClock at now that can hold 1000 unread reports.
func NewRecordingClock(now time.Time) *RecordingClock {
	return &RecordingClock{FakeClock: testclock.NewFakeClock(now), Timers: make(chan time.Duration, 1000)}
}

func (c *RecordingClock) NewTimer(d time.Duration) clock.Timer {
	c.Timers <- d
	return c.FakeClock.NewTimer(d)
}

func (c *RecordingClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	c.Timers <- d
	return c.FakeClock.AfterFunc(d, f)
}

// NextTimer returns the duration of the next timer created, failing t if none is created
// within timeout.
func (c *RecordingClock) NextTimer(t testing.TB, timeout time.Duration) time.Duration {
	t.Helper()
	select {
	case d := <-c.Timers:
		return d
	case <-time.After(timeout):
		t.Fatal("timed out waiting for a timer to be created")
		return 0
	}
}
