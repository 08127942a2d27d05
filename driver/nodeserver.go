package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
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

const (
	// publishTimeout bounds how long NodePublishVolume waits for the first certificate.
	publishTimeout = 60 * time.Second

	ephemeralKey    = "csi.storage.k8s.io/ephemeral"
	podNameKey      = "csi.storage.k8s.io/pod.name"
	podNamespaceKey = "csi.storage.k8s.io/pod.namespace"
)

type nodeServer struct {
	csi.UnimplementedNodeServer

	log                logr.Logger
	nodeID             string
	store              storage.Interface
	manager            *manager.Manager
	mounter            mount.Interface
	continueOnNotReady bool

	// volumes serialises operations per volume ID.
	volumes keylock.Locks
}

func newNodeServer(log logr.Logger, opts Options) *nodeServer {
	return &nodeServer{
		log:                log.WithName("node"),
		nodeID:             opts.NodeID,
		store:              opts.Store,
		manager:            opts.Manager,
		mounter:            opts.Mounter,
		continueOnNotReady: opts.ContinueOnNotReady,
	}
}

// validatePublish checks a publish request before any lock or I/O.
func (ns *nodeServer) validatePublish(req *csi.NodePublishVolumeRequest) error {
	if err := storage.ValidateVolumeID(req.GetVolumeId()); err != nil {
		return status.Errorf(codes.InvalidArgument, "volume_id: %v", err)
	}
	if req.GetTargetPath() == "" {
		return status.Error(codes.InvalidArgument, "target_path: must be set")
	}
	if req.GetVolumeContext()[ephemeralKey] != "true" {
		return status.Errorf(codes.InvalidArgument, "volume_context: only inline ephemeral volumes are supported (%s must be \"true\")", ephemeralKey)
	}
	if !req.GetReadonly() {
		return status.Error(codes.InvalidArgument, "readonly: volumes must be requested read-only")
	}
	if req.GetVolumeCapability().GetBlock() != nil {
		return status.Error(codes.InvalidArgument, "volume_capability: block access is not supported")
	}
	if v, ok := ns.store.(storage.MetadataValidator); ok {
		if err := v.ValidateMetadata(metadata.FromNodePublishVolumeRequest(req)); err != nil {
			return status.Errorf(codes.InvalidArgument, "volume_context: %v", err)
		}
	}
	return nil
}

func (ns *nodeServer) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	if err := ns.validatePublish(req); err != nil {
		return nil, err
	}
	id := req.GetVolumeId()
	log := ns.log.WithValues("volume_id", id, "pod", req.GetVolumeContext()[podNameKey], "namespace", req.GetVolumeContext()[podNamespaceKey])

	unlock, err := ns.lockVolume(ctx, id)
	if err != nil {
		return nil, err
	}
	defer unlock()

	// A volume whose earlier publish succeeded is live: a failing re-publish must not tear it
	// down.
	existing, err := ns.store.ReadMetadata(id)
	switch {
	case err == nil:
	case errors.Is(err, storage.ErrNotFound):
	default:
		return nil, status.Errorf(codes.Internal, "reading metadata of volume %q: %v", id, err)
	}
	wasMounted := err == nil && existing.Mounted

	meta := metadata.FromNodePublishVolumeRequest(req)
	if _, err := ns.store.RegisterMetadata(meta); err != nil {
		return nil, status.Errorf(codes.Internal, "registering volume %q: %v", id, err)
	}
	succeeded := false
	defer func() {
		if !succeeded && !wasMounted {
			ns.tearDown(log, id, req.GetTargetPath())
		}
	}()

	if wasMounted && existing.NextIssuanceTime != nil {
		// Already published with a certificate (kubelet retrying, or after a restart): make sure
		// it is managed and mounted, nothing more.
		if !ns.manager.ManageVolume(id) {
			return nil, status.Error(codes.Unavailable, "certificate manager is stopped")
		}
	} else if err := ns.obtainCertificate(ctx, log, id); err != nil {
		return nil, err
	}
	if err := ns.ensureMounted(log, ns.store.PathForVolume(id), req.GetTargetPath()); err != nil {
		return nil, status.Errorf(codes.Internal, "mounting volume %q at %s: %v", id, req.GetTargetPath(), err)
	}
	if !wasMounted {
		stored, err := ns.store.ReadMetadata(id)
		if err == nil {
			stored.Mounted = true
			err = ns.store.WriteMetadata(id, stored)
		}
		if err != nil {
			return nil, status.Errorf(codes.Internal, "recording volume %q as mounted: %v", id, err)
		}
	}
	succeeded = true
	log.Info("Volume published", "target_path", req.GetTargetPath())
	return &csi.NodePublishVolumeResponse{}, nil
}

// lockVolume waits until no other operation holds the volume. It gives up with Aborted a little
// before the caller's deadline (a tenth of the remaining time, at most a second), so that the
// caller receives Aborted rather than its own DeadlineExceeded.
func (ns *nodeServer) lockVolume(ctx context.Context, id string) (func(), error) {
	if deadline, ok := ctx.Deadline(); ok {
		margin := min(time.Until(deadline)/10, time.Second)
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

// obtainCertificate gets the volume managed and, unless ContinueOnNotReady allows otherwise,
// makes sure it has a certificate.
func (ns *nodeServer) obtainCertificate(ctx context.Context, log logr.Logger, id string) error {
	ready, reason := ns.manager.IsVolumeReadyToRequest(id)
	if !ready {
		if !ns.continueOnNotReady {
			return notReadyError(reason)
		}
		log.Info("Volume not ready to request a certificate; the background loop will issue it", "reason", reason)
		if !ns.manager.ManageVolume(id) {
			return status.Error(codes.Unavailable, "certificate manager is stopped")
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	managed, err := ns.manager.ManageVolumeImmediate(ctx, id)
	var nr *manager.NotReadyToRequestError
	switch {
	case errors.As(err, &nr):
		if ns.continueOnNotReady {
			log.Info("Volume became not ready to request; the background loop will issue it", "reason", nr.Reason)
			return nil
		}
		return notReadyError(nr.Reason)
	case err != nil && ctx.Err() != nil:
		return status.Errorf(codes.DeadlineExceeded, "waiting for the certificate of volume %q: %v", id, err)
	case err != nil:
		return status.Errorf(codes.Unavailable, "issuing the certificate of volume %q: %v", id, err)
	case !managed:
		return status.Error(codes.Unavailable, "certificate manager is stopped")
	}
	if !ns.continueOnNotReady {
		stored, err := ns.store.ReadMetadata(id)
		if err != nil {
			return status.Errorf(codes.Internal, "reading metadata of volume %q: %v", id, err)
		}
		if stored.NextIssuanceTime == nil {
			return status.Errorf(codes.Unavailable, "volume %q has no certificate yet", id)
		}
	}
	return nil
}

// notReadyError is the error upstream returned, which drivers match on.
func notReadyError(reason string) error {
	return status.Error(codes.Unknown, fmt.Sprintf("volume is not yet ready to be setup, will be retried: %s", reason))
}

// ensureMounted bind-mounts src read-only at target, or finds it already mounted.
func (ns *nodeServer) ensureMounted(log logr.Logger, src, target string) error {
	if err := os.MkdirAll(target, 0o750); err != nil {
		return err
	}
	notMnt, err := ns.mounter.IsLikelyNotMountPoint(target)
	if err != nil {
		return err
	}
	if !notMnt {
		log.V(2).Info("Target path already mounted; nothing to do", "target_path", target)
		return nil
	}
	return ns.mounter.Mount(src, target, "", []string{"bind", "ro"})
}

// tearDown undoes a failed first publish: stop managing, unmount, remove the files.
func (ns *nodeServer) tearDown(log logr.Logger, id, target string) {
	ns.manager.UnmanageVolume(id)
	if err := mount.CleanupMountPoint(target, ns.mounter, true); err != nil {
		log.Error(err, "Cleaning up target path after a failed publish", "target_path", target)
	}
	if err := ns.store.RemoveVolume(id); err != nil {
		log.Error(err, "Removing volume after a failed publish")
	}
}

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

	ns.manager.UnmanageVolume(id)
	if err := mount.CleanupMountPoint(req.GetTargetPath(), ns.mounter, true); err != nil {
		return nil, status.Errorf(codes.Internal, "unmounting %s: %v", req.GetTargetPath(), err)
	}
	if err := ns.store.RemoveVolume(id); err != nil {
		return nil, status.Errorf(codes.Internal, "removing volume %q: %v", id, err)
	}
	log.Info("Volume unpublished", "target_path", req.GetTargetPath())
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

func (ns *nodeServer) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{Capabilities: []*csi.NodeServiceCapability{{
		Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: csi.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP}},
	}}}, nil
}

func (ns *nodeServer) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: ns.nodeID}, nil
}
