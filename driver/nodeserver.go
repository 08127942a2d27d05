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

package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/mount-utils"

	"github.com/cert-manager/csi-lib/internal/keylock"
	"github.com/cert-manager/csi-lib/manager"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/storage"
)

// publishTimeout bounds how long NodePublishVolume waits for the first certificate.
const publishTimeout = 60 * time.Second

// nodeServer serves the node service with the driver's Options (Mounter set).
type nodeServer struct {
	csi.UnimplementedNodeServer
	Options

	log logr.Logger
	// volumes serialises operations per volume ID: the outermost of the per-volume locks, whose
	// order the manager's package doc gives.
	volumes keylock.Locks
}

// validatePublish checks a publish request before any lock or I/O. Bad input gets
// InvalidArgument and changes nothing. A request without a volume capability is a mount volume:
// kubelet always sends one, but drivers' own tests leave it out.
func (ns *nodeServer) validatePublish(req *csi.NodePublishVolumeRequest) error {
	if err := storage.ValidateVolumeID(req.GetVolumeId()); err != nil {
		return status.Errorf(codes.InvalidArgument, "volume_id: %v", err)
	}
	if req.GetTargetPath() == "" {
		return status.Error(codes.InvalidArgument, "target_path: must be set")
	}
	if req.GetVolumeContext()[metadata.EphemeralVolumeContextKey] != "true" {
		return status.Error(codes.InvalidArgument, "only ephemeral volume types are supported")
	}
	if !req.GetReadonly() {
		return status.Error(codes.InvalidArgument, "pod.spec.volumes[].csi.readOnly must be set to 'true'")
	}
	if req.GetVolumeCapability().GetBlock() != nil {
		return status.Error(codes.InvalidArgument, "volume_capability: block access is not supported")
	}
	if v, ok := ns.Store.(storage.MetadataValidator); ok {
		if err := v.ValidateMetadata(metadata.FromNodePublishVolumeRequest(req)); err != nil {
			return status.Errorf(codes.InvalidArgument, "volume_context: %v", err)
		}
	}
	return nil
}

// NodePublishVolume registers the metadata and reads it back (the publish's one read); unless
// the volume already has a certificate that is not due, it issues one now (ready to request) or
// hands the volume to the background loop (ContinueOnNotReady); it bind-mounts the data
// directory read-only at the target, then records the volume as mounted. Any failure of a
// first publish unmanages the volume, unmounts the target and removes the volume's files; a
// failed re-publish of a volume whose publish once succeeded leaves it alone.
func (ns *nodeServer) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	if err := ns.validatePublish(req); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	id := req.GetVolumeId()
	log := ns.log.WithValues("volume_id", id, "pod", req.GetVolumeContext()[metadata.PodNameVolumeContextKey], "namespace", req.GetVolumeContext()[metadata.PodNamespaceVolumeContextKey])

	unlock, err := ns.lockVolume(ctx, id)
	if err != nil {
		return nil, err
	}
	defer unlock()

	meta := metadata.FromNodePublishVolumeRequest(req)
	if ns.ContinueOnNotReady {
		// A zero time marks "managed, no certificate yet".
		meta.NextIssuanceTime = &time.Time{}
	}
	if _, err := ns.Store.RegisterMetadata(meta); err != nil {
		return nil, status.Errorf(codes.Internal, "registering volume %q: %v", id, err)
	}
	// The one read of the publish: registering keeps a stored volume's Mounted and
	// NextIssuanceTime, and the manager decides on what was read here.
	stored, err := ns.Store.ReadMetadata(id)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "reading metadata of volume %q: %v", id, err)
	}
	wasMounted := stored.Mounted
	succeeded, foreignMount := false, false
	defer func() {
		if !succeeded && !wasMounted {
			ns.tearDownFailedPublish(log, id, req.GetTargetPath(), !foreignMount)
		}
	}()

	if err := ns.obtainCertificate(ctx, id, stored); err != nil {
		return nil, err
	}
	if err := ns.ensureMounted(log, ns.Store.PathForVolume(id), req.GetTargetPath()); err != nil {
		foreignMount = errors.Is(err, errForeignMount)
		return nil, status.Errorf(codes.Internal, "mounting volume %q at %s: %v", id, req.GetTargetPath(), err)
	}
	if !wasMounted {
		if err := ns.recordMounted(id); err != nil {
			return nil, status.Errorf(codes.Internal, "recording volume %q as mounted: %v", id, err)
		}
	}
	succeeded = true
	log.Info("Volume published", "target_path", req.GetTargetPath())
	return &csi.NodePublishVolumeResponse{}, nil
}

// recordMounted persists Mounted true, atomically when the store can (storage.MountRecorder).
func (ns *nodeServer) recordMounted(id string) error {
	if r, ok := ns.Store.(storage.MountRecorder); ok {
		return r.SetMounted(id)
	}
	stored, err := ns.Store.ReadMetadata(id)
	if err != nil {
		return err
	}
	stored.Mounted = true
	return ns.Store.WriteMetadata(id, stored)
}

// lockVolume waits until no other operation holds the volume. It gives up with Aborted before
// the caller's deadline, so that the caller receives Aborted rather than its own
// DeadlineExceeded: a second before it, or half-way for a caller with less than two seconds
// left, since the answer still has to reach the caller through a scheduler that may be busy.
func (ns *nodeServer) lockVolume(ctx context.Context, id string) (func(), error) {
	if deadline, ok := ctx.Deadline(); ok {
		margin := min(time.Until(deadline)/2, time.Second)
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(-margin))
		defer cancel()
	}
	unlock, err := ns.volumes.Lock(ctx, id)
	if err != nil {
		return nil, status.Errorf(codes.Aborted, "an operation on volume %q is already in progress", id)
	}
	return unlock, nil
}

// obtainCertificate makes sure the volume has a certificate before it is mounted
// (Manager.ManageVolumeForPublish): a definite failure reaches kubelet as Unknown with the
// manager's text (PermissionDenied where the apiserver refused a call), a closed readiness gate as Unknown with the text drivers match on (unless
// ContinueOnNotReady hands the volume to the background loop), and a deadline that passes first
// as DeadlineExceeded: the request stays pending and kubelet's retry resumes it. A pod that is
// terminating (manager.ErrPodTerminating) gets Aborted at once, which makes kubelet unpublish.
func (ns *nodeServer) obtainCertificate(ctx context.Context, id string, stored metadata.Metadata) error {
	err := ns.Manager.ManageVolumeForPublish(ctx, stored, ns.ContinueOnNotReady)
	var notReady *manager.NotReadyToRequestError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &notReady) && !ns.ContinueOnNotReady:
		// The text drivers match on.
		return status.Errorf(codes.Unknown, "volume is not yet ready to be setup, will be retried: %s", notReady.Reason)
	case errors.Is(err, manager.ErrPodTerminating):
		// A code kubelet takes as "maybe mounted": it unpublishes the volume, and the pod goes.
		return status.Errorf(codes.Aborted, "not publishing volume %q: %v", id, err)
	case errors.Is(err, manager.ErrPermissionDenied):
		// Final for kubelet, as Unknown is; the text names the verb, resource and account.
		return status.Error(codes.PermissionDenied, err.Error())
	case ctx.Err() != nil:
		return status.Errorf(codes.DeadlineExceeded, "waiting for the certificate of volume %q: %v", id, err)
	default:
		return status.Error(codes.Unknown, err.Error())
	}
}

// targetPathMode is the mode of a target path the node server creates.
const targetPathMode = 0o440

// ensureMounted bind-mounts src read-only at target, or finds it already mounted.
func (ns *nodeServer) ensureMounted(log logr.Logger, src, target string) error {
	if err := os.MkdirAll(target, targetPathMode); err != nil {
		return err
	}
	notMnt, err := ns.Mounter.IsLikelyNotMountPoint(target)
	if err != nil {
		return err
	}
	if !notMnt {
		return ns.checkExistingMount(log, src, target)
	}
	return ns.Mounter.Mount(src, target, "", []string{"bind", "ro"})
}

// checkExistingMount vets a target path that is already mounted (kubelet retrying, or a crash
// between the bind mount and its read-only remount). A read-only bind of this volume's data
// directory is what a publish makes: nothing to do. A writable one of it is repaired (unmounted
// and bound again read-only). A mount of anything else is refused and left alone. The mount
// shows src when the mount table names src as its source, or when target resolves to the same
// directory as src, which is what a bind mount of src does.
func (ns *nodeServer) checkExistingMount(log logr.Logger, src, target string) error {
	mps, err := ns.Mounter.List()
	if err != nil {
		return fmt.Errorf("listing mounts: %w", err)
	}
	var mp *mount.MountPoint
	for i := range mps {
		if filepath.Clean(mps[i].Path) == filepath.Clean(target) {
			mp = &mps[i] // the last one is on top
		}
	}
	if mp == nil {
		return fmt.Errorf("target path %s is a mount point missing from the mount table", target)
	}
	if mp.Device != src && !sameDirectory(src, target) {
		return fmt.Errorf("%w: target path %s is mounted from something other than the volume's data directory %s", errForeignMount, target, src)
	}
	if slices.Contains(mp.Opts, "ro") {
		log.V(2).Info("Target path already mounted read-only; nothing to do", "target_path", target)
		return nil
	}
	log.Info("Target path is a writable bind mount of the volume (a crash before the read-only remount?); mounting it read-only again", "target_path", target)
	if err := ns.Mounter.Unmount(target); err != nil {
		return fmt.Errorf("unmounting the writable bind mount at %s: %w", target, err)
	}
	return ns.Mounter.Mount(src, target, "", []string{"bind", "ro"})
}

// sameDirectory reports whether two paths resolve to the same file.
func sameDirectory(a, b string) bool {
	sa, err := os.Stat(a)
	if err != nil {
		return false
	}
	sb, err := os.Stat(b)
	return err == nil && os.SameFile(sa, sb)
}

// errForeignMount: the target path is mounted, but not from the volume. The publish refuses it
// and its clean-up leaves the mount alone.
var errForeignMount = errors.New("refusing to publish over a mount that is not the volume's")

// tearDownFailedPublish undoes a first publish that failed: stop managing, unmount the target
// (unless unmount is false: the mount there is not ours), remove the files, retire the metric
// series. Pending keys stay, and so do the series for a retention: kubelet will retry the same
// volume, which keeps them.
func (ns *nodeServer) tearDownFailedPublish(log logr.Logger, id, target string, unmount bool) {
	ns.Manager.UnmanageVolume(id)
	ns.Manager.RetireVolumeMetricSeries(id)
	if !unmount {
		log.Info("Leaving the target path's mount alone: it is not the volume's", "target_path", target)
	} else if err := mount.CleanupMountPoint(target, ns.Mounter, true); err != nil {
		log.Error(err, "Cleaning up target path after a failed publish", "target_path", target)
	}
	if err := ns.Store.RemoveVolume(id); err != nil {
		log.Error(err, "Removing volume after a failed publish")
	}
}

// NodeUnpublishVolume removes a volume for good: unmanage, unmount, remove its files, retire its
// metric series (deleted after manager.MetricSeriesRetention). It is idempotent: an unknown volume or a missing target succeeds, since
// kubelet retries an unpublish until it succeeds.
func (ns *nodeServer) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := storage.ValidateVolumeID(id); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "volume_id: %v", err)
	}
	if req.GetTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "target_path: must be set")
	}
	log := ns.log.WithValues("volume_id", id)
	unlock, err := ns.lockVolume(ctx, id)
	if err != nil {
		return nil, err
	}
	defer unlock()

	ns.Manager.UnmanageVolume(id)
	if err := mount.CleanupMountPoint(req.GetTargetPath(), ns.Mounter, true); err != nil {
		return nil, status.Errorf(codes.Internal, "unmounting %s: %v", req.GetTargetPath(), err)
	}
	if err := ns.Store.RemoveVolume(id); err != nil {
		return nil, status.Errorf(codes.Internal, "removing volume %q: %v", id, err)
	}
	ns.Manager.RetireVolumeMetricSeries(id)
	log.Info("Volume unpublished", "target_path", req.GetTargetPath())
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

func (ns *nodeServer) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{Capabilities: []*csi.NodeServiceCapability{{
		Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: csi.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP}},
	}}}, nil
}

func (ns *nodeServer) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: ns.NodeID}, nil
}
