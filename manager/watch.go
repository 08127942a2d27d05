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

import "time"

// certificateWatch is what the board knows of the certificate in a volume, and the timers that
// fire when it becomes overdue and when it expires.
type certificateWatch struct {
	notAfter time.Time
	// expiryUnknown: the volume has a certificate from before a restart whose expiry could not
	// be learned (its request is gone); it counts as valid.
	expiryUnknown bool
	renewAt       time.Time // the renewal time the timers were armed for
	generation    uint64    // changes with every certificate written; stale timers do nothing
	stops         []func() bool
	// gatePendingSince is when the gate started saying "not yet"; zero when it is not.
	gatePendingSince time.Time
	gateEventSent    bool
}

// stopWatch stops a certificate watch's overdue and expiry timers; w may be nil.
func stopWatch(w *certificateWatch) {
	if w == nil {
		return
	}
	for _, stop := range w.stops {
		stop()
	}
	w.stops = nil
	w.renewAt = time.Time{}
}
