// Package storage keeps the state of every volume: its metadata and the certificate files that
// are bind-mounted into the pod.
//
// Two implementations of Interface are provided. Filesystem is the production store: one
// directory per volume on a tmpfs, so that private keys never reach a disk. MemoryFS keeps
// everything in memory and is meant for tests.
//
// Both stores guarantee:
//   - Every entry point validates the volume ID (ValidateVolumeID): nothing outside the store's
//     base directory can be named, and invalid input changes nothing.
//   - Metadata writes are atomic: a reader sees the old or the new metadata, never a torn file,
//     even across a crash (Filesystem: temporary file, fsync, rename).
//   - Data writes are atomic as a set: key, chain and CA of one issuance are swapped in together
//     (Filesystem: a kubelet-style "..data" symlink projection).
//   - Mounted never goes back to false: a WriteMetadata that carries a stale copy with
//     Mounted false keeps the stored true, and RegisterMetadata on an existing volume keeps the
//     stored NextIssuanceTime and Mounted.
//   - Writers of one volume are serialised; different volumes do not contend.
//   - ListVolumes and ReadMetadata never modify anything.
//
// At start-up, before the driver serves, Sweep removes what a crash or a missed
// NodeUnpublishVolume left behind: directories without metadata, and volumes whose publish
// never succeeded (Mounted false), unmounting their target path first if a bind mount survived.
// Metadata that cannot be decoded is logged and left alone. NewFilesystem sweeps once before it
// returns.
//
// They do not guarantee that a reader of the data files sees a consistent set unless it reads
// through the "..data" directory (or the visible names, which are symlinks through it).
package storage
