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

// Package driver is the CSI node plugin: a gRPC server with the identity, controller and node
// services, whose node service publishes inline ephemeral volumes through a storage.Interface
// and a manager.Manager.
//
// NodePublishVolume validates the request first (InvalidArgument, nothing written), serialises
// operations per volume ID (a later call waits for the earlier one, including its clean-up, and
// gets Aborted if the earlier one still runs a second before its own deadline, or half-way for a
// caller with less than two seconds), registers the volume's metadata, obtains
// the first certificate (or hands the volume to the background loop when ContinueOnNotReady is
// set and the volume is not ready to request), bind-mounts the data directory read-only at the
// target path, and only then persists Mounted. A failure before that point unmanages the volume,
// unmounts the target and removes the volume's files, unless an earlier publish of the same
// volume had succeeded: a failed re-publish never tears down a live pod's volume.
//
// Errors become gRPC status codes here and nowhere else: InvalidArgument for bad requests,
// Aborted for a busy volume and for a pod that is terminating (kubelet then unpublishes),
// Unknown with upstream's message for a volume not ready to request, DeadlineExceeded when the
// first certificate does not arrive before the call's deadline (the request stays pending and
// kubelet's retry resumes it), PermissionDenied when the apiserver refused a call the library
// needs with 403 Forbidden (manager.ErrPermissionDenied; the text names the verb, the resource
// and the account), Unknown with the manager's error when issuance fails for certain otherwise
// (denied, failed, invalid), as upstream answers, and Internal for local failures (storage,
// mounts).
package driver
