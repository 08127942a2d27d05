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

import "errors"

// ErrNotReadyToRequest is the error an issuance attempt returns, wrapped with the reason, when
// the driver's ReadyToRequest says the volume may not request a certificate yet. It is an
// expected wait state, not a failure: match it with errors.Is.
var ErrNotReadyToRequest = errors.New("volume is not ready to request a certificate")

// NotReadyToRequestError carries the reason ReadyToRequest gave. errors.Is(err,
// ErrNotReadyToRequest) holds for it; errors.As recovers the reason.
type NotReadyToRequestError struct {
	Reason string
}

// Error is the refusal's text, which drivers match on: "driver is not ready to request a certificate for this
// volume: <reason>".
func (e *NotReadyToRequestError) Error() string {
	return "driver is not ready to request a certificate for this volume: " + e.Reason
}

// Is reports whether target is ErrNotReadyToRequest.
func (e *NotReadyToRequestError) Is(target error) bool { return target == ErrNotReadyToRequest }

// ErrPodTerminating is the error of an attempt that ended, or was refused, because the volume's
// pod is terminating or gone: told by PodTerminating, learned from the pod's own reads (with
// Options.PodCondition), or seen when the request being waited for is deleted (the garbage
// collector deletes it with its pod). Match it with errors.Is; the node server answers kubelet
// with Aborted, a code kubelet takes as "maybe mounted", so that it unpublishes the volume.
var ErrPodTerminating = errors.New("the volume's pod is terminating")

// errAttemptTimeout ends an issuance attempt that took longer than issueTimeout.
var errAttemptTimeout = errors.New("issuance attempt timed out")

// errStopped is returned once the manager has been stopped.
var errStopped = errors.New("manager is stopped")
