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

package manager

import (
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/cert-manager/csi-lib/internal/clockutil"
)

// issueTimeout bounds one background issuance attempt, on the injected clock.
const issueTimeout = 60 * time.Second

// attemptContext makes a background attempt's context: it ends after issueTimeout on the injected
// clock, or when end is called with a cause (by the volume, as it ends or its pod terminates). The returned cancel
// stops the timer synchronously, so a fake clock shows no stray waiter once the attempt is over.
func attemptContext(clk clock.Clock) (ctx context.Context, d *attemptDeadline, end context.CancelCauseFunc, cancel func()) {
	ctx, end = context.WithCancelCause(context.Background())
	// d is not shared yet: its first timer needs no lock.
	d = &attemptDeadline{clock: clk, cancel: end}
	d.stop = clockutil.AfterFunc(clk, issueTimeout, func() { end(errAttemptTimeout) })
	return ctx, d, end, func() {
		d.pause()
		end(nil)
	}
}

// attemptDeadline is a background attempt's issueTimeout timer. It is paused while the attempt
// waits for admission, and restarted in full once the attempt is admitted.
type attemptDeadline struct {
	clock  clock.Clock
	cancel context.CancelCauseFunc
	mu     sync.Mutex
	stop   func() bool
}

// pause stops the timer; it reports false if the deadline has already passed.
func (d *attemptDeadline) pause() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stop == nil {
		return true
	}
	ok := d.stop()
	d.stop = nil
	return ok
}

// restart arms the timer for a full issueTimeout from now.
func (d *attemptDeadline) restart() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stop != nil {
		d.stop()
	}
	d.stop = clockutil.AfterFunc(d.clock, issueTimeout, func() { d.cancel(errAttemptTimeout) })
}
