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

package plugin

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// registration answers kubelet's plugin watcher: the driver's name and CSI endpoint.
type registration struct {
	registerapi.UnimplementedRegistrationServer
	log      logr.Logger
	name     string
	endpoint string
}

func (r *registration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: r.name, Endpoint: r.endpoint, SupportedVersions: []string{"1.0.0"}}, nil
}

func (r *registration) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if !s.PluginRegistered {
		r.log.Error(fmt.Errorf("%s", s.Error), "kubelet refused the driver's registration")
	} else {
		r.log.Info("registered with kubelet")
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// serveRegistration serves the registration socket <registry>/<name>-reg.sock, which kubelet
// watches for, answering with endpoint: the CSI socket's path as kubelet sees it.
func serveRegistration(ctx context.Context, log logr.Logger, registry, name, endpoint string) (*grpc.Server, error) {
	path := filepath.Join(registry, name+"-reg.sock")
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	lis, err := (&net.ListenConfig{}).Listen(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, &registration{log: log.WithName("registration"), name: name, endpoint: endpoint})
	go func() { _ = srv.Serve(lis) }()
	return srv, nil
}
