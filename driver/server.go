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
	"net"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

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

// logCalls logs every call at V(3) with its request, its failure as an error, and its response
// at V(5). Requests and responses pass through redact first, whatever their type.
func (s *GRPCServer) logCalls(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	log := s.log.WithValues("method", info.FullMethod)
	log.V(3).Info("Call", "request", redact(req))
	start := time.Now()
	resp, err := handler(ctx, req)
	if err != nil {
		log.Error(err, "Call failed", "code", status.Code(err).String(), "duration", time.Since(start))
	} else {
		log.V(5).Info("Call succeeded", "response", redact(resp), "duration", time.Since(start))
	}
	return resp, err
}

// redact returns a copy of a CSI message that is safe to log: every field the CSI spec marks
// secret (the csi_secret option: the secrets maps of every Node*, Controller* and snapshot
// request), at any depth, has its values replaced by "[REDACTED]", and so has the
// service-account token in any volume_context map. Values that are not protobuf messages are
// returned as they are.
func redact(v any) any {
	msg, ok := v.(proto.Message)
	if !ok {
		return v
	}
	c := proto.Clone(msg)
	redactMessage(c.ProtoReflect())
	return c
}

// redactMessage redacts m in place. Range allows changing the field it visits, and every
// change below is to that field or to messages inside it. Every field the CSI spec marks secret
// is a map of strings, whose values are replaced; a secret field of any other type is cleared.
func redactMessage(m protoreflect.Message) {
	m.Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		// GetExtension gives false for a field without options or without the extension.
		secret, _ := proto.GetExtension(fd.Options(), csi.E_CsiSecret).(bool)
		switch {
		case secret && fd.IsMap() && fd.MapValue().Kind() == protoreflect.StringKind:
			// Range allows setting the entry it visits.
			secrets := m.Mutable(fd).Map()
			secrets.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
				secrets.Set(k, protoreflect.ValueOfString(metadata.Redacted))
				return true
			})
		case secret:
			m.Clear(fd)
		case fd.IsMap() && fd.Name() == "volume_context":
			vc := m.Mutable(fd).Map()
			key := protoreflect.ValueOfString(metadata.SATokenVolumeContextKey).MapKey()
			if vc.Has(key) {
				vc.Set(key, protoreflect.ValueOfString(metadata.Redacted))
			}
		case fd.IsMap() && fd.MapValue().Kind() == protoreflect.MessageKind:
			m.Get(fd).Map().Range(func(_ protoreflect.MapKey, v protoreflect.Value) bool {
				redactMessage(v.Message())
				return true
			})
		case fd.IsList() && fd.Kind() == protoreflect.MessageKind:
			list := m.Get(fd).List()
			for i := 0; i < list.Len(); i++ {
				redactMessage(list.Get(i).Message())
			}
		case !fd.IsList() && !fd.IsMap() && fd.Kind() == protoreflect.MessageKind:
			redactMessage(m.Get(fd).Message())
		}
		return true
	})
}
