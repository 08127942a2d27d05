package driver

import (
	"context"
	"net"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cert-manager/csi-lib/metadata"
)

// GRPCServer serves the three CSI services on one listener.
type GRPCServer struct {
	lis    net.Listener
	server *grpc.Server
	log    logr.Logger
}

// NewGRPCServer listens on endpoint (see New) and returns a server for the given services.
func NewGRPCServer(ctx context.Context, endpoint string, log logr.Logger, ids csi.IdentityServer, cs csi.ControllerServer, ns csi.NodeServer) (*GRPCServer, error) {
	lis, err := listen(ctx, endpoint)
	if err != nil {
		return nil, err
	}
	return NewGRPCServerWithListener(lis, log, ids, cs, ns), nil
}

// NewGRPCServerWithListener returns a server for the given services on lis. Nil services are
// not registered.
func NewGRPCServerWithListener(lis net.Listener, log logr.Logger, ids csi.IdentityServer, cs csi.ControllerServer, ns csi.NodeServer) *GRPCServer {
	s := &GRPCServer{lis: lis, log: log.WithName("grpc")}
	s.server = grpc.NewServer(grpc.UnaryInterceptor(s.logCalls))
	if ids != nil {
		csi.RegisterIdentityServer(s.server, ids)
	}
	if cs != nil {
		csi.RegisterControllerServer(s.server, cs)
	}
	if ns != nil {
		csi.RegisterNodeServer(s.server, ns)
	}
	return s
}

// Run serves until Stop or ForceStop.
func (s *GRPCServer) Run() error {
	s.log.Info("Serving CSI", "address", s.lis.Addr().String())
	return s.server.Serve(s.lis)
}

// Stop stops accepting calls and waits for calls in flight to finish.
func (s *GRPCServer) Stop() { s.server.GracefulStop() }

// ForceStop closes every connection at once.
func (s *GRPCServer) ForceStop() { s.server.Stop() }

// logCalls logs every call with its request, secrets redacted, and its outcome.
func (s *GRPCServer) logCalls(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	log := s.log.WithValues("method", info.FullMethod)
	log.V(4).Info("Call", "request", redactRequest(req))
	start := time.Now()
	resp, err := handler(ctx, req)
	if err != nil {
		log.Error(err, "Call failed", "code", status.Code(err).String(), "duration", time.Since(start))
	} else {
		log.V(4).Info("Call succeeded", "duration", time.Since(start))
	}
	return resp, err
}

// redactRequest returns a copy of a request that is safe to log: the service-account token in
// the volume context and any CSI secrets are replaced by "[REDACTED]".
func redactRequest(req any) any {
	switch r := req.(type) {
	case *csi.NodePublishVolumeRequest:
		c := proto.Clone(r).(*csi.NodePublishVolumeRequest)
		c.VolumeContext = metadata.RedactVolumeContext(c.VolumeContext)
		c.Secrets = redactAll(c.Secrets)
		return c
	case *csi.NodeStageVolumeRequest:
		c := proto.Clone(r).(*csi.NodeStageVolumeRequest)
		c.VolumeContext = metadata.RedactVolumeContext(c.VolumeContext)
		c.Secrets = redactAll(c.Secrets)
		return c
	}
	return req
}

func redactAll(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k := range m {
		out[k] = metadata.Redacted
	}
	return out
}
