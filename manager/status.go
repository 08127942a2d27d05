/*
Copyright 2026 The cert-manager Authors.

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

// shownVolume is what the board shows of a volume: its state, and what it watches of the
// volume's certificate.
type shownVolume struct {
	status volumeStatus
	// watch exists only when the board watches certificates.
	watch *certificateWatch
}

// outcome is the class of a volume's last attempt, for its state.
type outcome int

const (
	outcomeNone outcome = iota
	outcomeGatePending
	outcomeFailed
)

// volumeStatus is what a volume's state in certmanager_csi_volumes is derived from. It changes
// only through apply.
type volumeStatus struct {
	hasCertificate   bool
	last             outcome
	overdue, expired bool
}

// volumeEvent is what moves a volume's status (see the package documentation's diagram).
type volumeEvent int

const (
	// eventHasCertificate: the volume's metadata records a certificate.
	eventHasCertificate volumeEvent = iota
	// eventWritten: a key pair was written; what was wrong before is over.
	eventWritten
	// eventGatePending: the readiness gate said "not yet".
	eventGatePending
	// eventFailed: an attempt failed with an issuance error.
	eventFailed
	// eventOverdue: the certificate is past its renewal point by the margin, not renewed.
	eventOverdue
	// eventExpired: the certificate is past its NotAfter, not renewed.
	eventExpired
)

// apply moves the status by ev, and reports whether it changed: the one place where a volume's
// status changes.
func (s *volumeStatus) apply(ev volumeEvent) bool {
	before := *s
	switch ev {
	case eventHasCertificate:
		s.hasCertificate = true
	case eventWritten:
		*s = volumeStatus{hasCertificate: true}
	case eventGatePending:
		s.last = outcomeGatePending
	case eventFailed:
		s.last = outcomeFailed
	case eventOverdue:
		s.overdue = true
	case eventExpired:
		s.expired = true
	}
	return *s != before
}

// state names the volume's state (metrics.VolumeStates); the worst condition wins.
func (s volumeStatus) state() string {
	switch {
	case s.expired:
		return "expired"
	case s.overdue:
		return "overdue"
	case s.last == outcomeFailed:
		return "failing"
	case s.last == outcomeGatePending:
		return "gate_pending"
	case s.hasCertificate:
		return "issued"
	default:
		return "pending"
	}
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
