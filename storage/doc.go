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

// Package storage keeps the state of every volume: its metadata and the certificate files that
// are bind-mounted into the pod.
//
// Two implementations of Interface are provided. Filesystem is the production store: one
// directory per volume on a tmpfs, so that private keys never reach a disk. MemoryFS keeps
// everything in memory and is meant for tests; it behaves as upstream csi-lib's fake (a map of
// files per volume with "metadata.json" among them, bare sentinel errors), because drivers'
// own tests compare what it returns.
//
// Both stores guarantee:
//   - Every entry point validates the volume ID (ValidateVolumeID): nothing outside the store
//     can be named, and invalid input changes nothing.
//   - Mounted never goes back to false: a WriteMetadata that carries a stale copy with
//     Mounted false keeps the stored true, and RegisterMetadata keeps it too. SetMounted
//     (MountRecorder) records a successful publish as one atomic read-modify-write, so it can
//     never overwrite a NextIssuanceTime written a moment before.
//   - ListVolumes and ReadMetadata never modify anything.
//
// Filesystem also guarantees:
//   - Metadata writes are atomic: a reader sees the old or the new metadata, never a torn file,
//     even across a crash (temporary file, fsync, rename, directory fsync).
//   - Data writes are atomic as a set: key, chain and CA of one issuance are swapped in together
//     through a kubelet-style "..data" symlink projection; names follow kubelet's rules and are
//     all checked before anything is written.
//   - On disk, metadata carries an explicit "mounted" key. A file without it was written by
//     upstream (before an upgrade, or after a rollback) and is read by upstream's rule: mounted
//     exactly when nextIssuanceTime is present.
//   - Writers of one volume are serialised; different volumes do not contend. No symlink put in
//     place of a volume directory, data directory or "..data" leads outside the base directory.
//
// At start-up, before the driver serves, Sweep removes what a crash or a missed
// NodeUnpublishVolume left behind: directories without metadata, and volumes whose publish
// never succeeded (Mounted false), unmounting their target path first if a bind mount survived.
// Metadata that cannot be decoded is logged and left alone. In the volumes it keeps, the
// Filesystem's sweep also removes what a crash left: temporary files of interrupted writes and
// data generations that no "..data" points to. NewFilesystem sweeps once before it returns.
//
// Both stores implement PendingKeyStore: the private key of a volume's pending
// CertificateRequest is kept beside its metadata (never in the bind-mounted data directory), so
// a restarted manager resumes the request instead of creating another. They implement
// SweptKeyStore too: the sweep keeps the pending key of a never-mounted volume it removes, so
// that kubelet's retry of that volume's publish resumes the request as well.
//
// They do not guarantee that a reader of the data files sees a consistent set unless it reads
// through the "..data" directory (or the visible names, which are symlinks through it).
package storage
