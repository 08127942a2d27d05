// Package driver is the CSI node plugin: a gRPC server with the identity, controller and node
// services, whose node service publishes inline ephemeral volumes through a storage.Interface
// and a manager.Manager.
//
// NodePublishVolume validates the request first (InvalidArgument, nothing written), serialises
// operations per volume ID (a later call waits for the earlier one, including its clean-up, and
// gets Aborted only if its own deadline passes first), registers the volume's metadata, obtains
// the first certificate (or hands the volume to the background loop when ContinueOnNotReady is
// set and the volume is not ready to request), bind-mounts the data directory read-only at the
// target path, and only then persists Mounted. A failure before that point unmanages the volume,
// unmounts the target and removes the volume's files, unless an earlier publish of the same
// volume had succeeded: a failed re-publish never tears down a live pod's volume.
//
// Errors become gRPC status codes here and nowhere else: InvalidArgument for bad requests,
// Aborted for a busy volume, Unknown with upstream's message for a volume not ready to request,
// DeadlineExceeded when issuance outlasts the call, Unavailable when issuance fails, Internal
// for local failures.
package driver
