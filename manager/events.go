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
	"time"
)

// Reasons of the Kubernetes Events the manager records on a volume's Pod when
// Options.EventRecorder is set. They are stable: alerts and dashboards may match on them.
const (
	// EventReasonCertificateIssued (Normal): a volume's first certificate was written, with the
	// request's name and the time from publish to certificate.
	EventReasonCertificateIssued = "CertificateIssued"
	// EventReasonCertificateRenewed (Normal): a renewal was written, with the new expiry.
	EventReasonCertificateRenewed = "CertificateRenewed"
	// EventReasonCertificateRequestFailed (Warning): an attempt failed with an issuance error
	// (denied, failed, invalid, timed out), with the reason and when the next attempt is due.
	// One per failed attempt, so one per backoff step in a long outage.
	EventReasonCertificateRequestFailed = "CertificateRequestFailed"
	// EventReasonPermissionDenied (Warning): an attempt failed because the apiserver refused a
	// call the library needs (ErrPermissionDenied), naming the verb, the resource and the
	// account, and when the next attempt is due; otherwise as CertificateRequestFailed.
	EventReasonPermissionDenied = "PermissionDenied"
	// EventReasonReadinessGatePending (Normal): the readiness gate has said "not yet" for longer
	// than GatePendingEventAfter, with the gate's reason; once per wait.
	EventReasonReadinessGatePending = "ReadinessGatePending"
	// EventReasonCertificateRenewalOverdue (Warning): the volume is past its renewal time by
	// more than a quarter of the time from the renewal time to expiry, not yet renewed.
	EventReasonCertificateRenewalOverdue = "CertificateRenewalOverdue"
	// EventReasonCertificateExpired (Warning): the certificate in the volume is past NotAfter.
	EventReasonCertificateExpired = "CertificateExpired"
)

// GatePendingEventAfter is how long the readiness gate must have said "not yet" before a
// ReadinessGatePending event is recorded (at the first gate check after that).
const GatePendingEventAfter = 10 * time.Second
