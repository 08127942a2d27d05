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
	"time"

	"k8s.io/utils/clock"

	"github.com/cert-manager/csi-lib/internal/clockutil"
)

// issueTimeout bounds one background issuance attempt, on the injected clock.
const issueTimeout = 60 * time.Second

// attemptDeadline is a background attempt's issueTimeout timer on the injected clock, which
// ends the attempt's context with errAttemptTimeout. It is paused while the attempt waits for
// admission, and restarted in full once the attempt is admitted. Only the attempt's goroutine
// uses it, so it has no lock.
type attemptDeadline struct {
	clock clock.Clock
	// end ends the attempt's context with a cause: the deadline's, or the volume's as it ends
	// or its pod terminates.
	end  context.CancelCauseFunc
	stop func() bool // nil while paused
}

// attemptContext makes a background attempt's context, which its deadline ends after
// issueTimeout unless the deadline is paused.
func attemptContext(clk clock.Clock) (context.Context, *attemptDeadline) {
	ctx, end := context.WithCancelCause(context.Background())
	d := &attemptDeadline{clock: clk, end: end}
	d.restart()
	return ctx, d
}

// pause stops the timer; it reports false if the deadline has already passed.
func (d *attemptDeadline) pause() bool {
	if d.stop == nil {
		return true
	}
	ok := d.stop()
	d.stop = nil
	return ok
}

// restart arms the timer for a full issueTimeout from now; the deadline must be paused.
func (d *attemptDeadline) restart() {
	d.stop = clockutil.AfterFunc(d.clock, issueTimeout, func() { d.end(errAttemptTimeout) })
}

// finish stops the timer synchronously, so a fake clock shows no stray waiter once the attempt
// is over, and ends the context.
func (d *attemptDeadline) finish() {
	d.pause()
	d.end(nil)
}
