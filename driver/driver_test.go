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
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cert-manager/csi-lib/metadata"
)

func TestListenEndpoints(t *testing.T) {
	ctx := context.Background()
	sock := filepath.Join(t.TempDir(), "csi.sock")
	// A stale socket file from a previous run is replaced.
	stale, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	lis, err := listen(ctx, "unix://"+sock)
	if err != nil {
		t.Fatalf("unix endpoint over a stale socket: %v", err)
	}
	lis.Close()

	// As upstream, any file at the path is removed, and a relative-looking endpoint is rooted:
	// unix://<rel> listens at /<rel> whatever the working directory.
	dir := t.TempDir()
	t.Chdir(dir)
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	lis, err = listen(ctx, "UNIX://"+strings.TrimPrefix(file, "/"))
	if err != nil {
		t.Fatalf("unix://<path without leading slash>: %v", err)
	}
	if got := lis.Addr().String(); got != file {
		t.Errorf("listening at %q, want %q", got, file)
	}
	lis.Close()

	lis, err = listen(ctx, "tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis.Close()

	for _, bad := range []string{"http://x", "unix://", "tcp://", "::nonsense", "/plain/path"} {
		if _, err := listen(ctx, bad); err == nil || err.Error() != "invalid endpoint: "+bad {
			t.Errorf("listen(%q) = %v, want \"invalid endpoint: %s\"", bad, err, bad)
		}
	}
}

func TestNewAcceptsNilStoreAndManager(t *testing.T) {
	d, err := New(context.Background(), "tcp://127.0.0.1:0", logr.Discard(), Options{DriverName: "d", DriverVersion: "v"})
	if err != nil || d == nil {
		t.Fatalf("New with nil Store and Manager = %v, %v", d, err)
	}
	d.server.ForceStop()
}

func TestIdentityServer(t *testing.T) {
	var ids *identityServer = NewIdentityServer("csi.example.com", "v1.2.3") // the concrete type, as upstream
	info, err := ids.GetPluginInfo(context.Background(), &csi.GetPluginInfoRequest{})
	if err != nil || info.Name != "csi.example.com" || info.VendorVersion != "v1.2.3" {
		t.Fatalf("GetPluginInfo = %v, %v", info, err)
	}
	for _, tc := range []struct{ name, version, want string }{
		{"", "v", "driver name not configured"},
		{"n", "", "driver is missing version"},
	} {
		_, err := NewIdentityServer(tc.name, tc.version).GetPluginInfo(context.Background(), &csi.GetPluginInfoRequest{})
		if status.Code(err) != codes.Unavailable || status.Convert(err).Message() != tc.want {
			t.Errorf("GetPluginInfo(%q, %q) = %v, want Unavailable %q", tc.name, tc.version, err, tc.want)
		}
	}
	probe, err := ids.Probe(context.Background(), &csi.ProbeRequest{})
	if err != nil || probe.GetReady() != nil {
		t.Fatalf("Probe = %v, %v; want an empty response", probe, err)
	}
	caps, err := ids.GetPluginCapabilities(context.Background(), &csi.GetPluginCapabilitiesRequest{})
	if err != nil || len(caps.GetCapabilities()) != 1 || caps.GetCapabilities()[0].GetService().GetType() != csi.PluginCapability_Service_CONTROLLER_SERVICE {
		t.Fatalf("GetPluginCapabilities = %v, %v; want CONTROLLER_SERVICE", caps, err)
	}
	cs := &controllerServer{}
	if c, err := cs.ControllerGetCapabilities(context.Background(), &csi.ControllerGetCapabilitiesRequest{}); err != nil || len(c.GetCapabilities()) != 0 {
		t.Fatalf("ControllerGetCapabilities = %v, %v", c, err)
	}
	if _, err := cs.CreateVolume(context.Background(), &csi.CreateVolumeRequest{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("CreateVolume = %v, want Unimplemented", err)
	}
}

// TestRedactEveryRequest: every field the CSI spec marks secret, in every message, and the
// service-account token, never reach a log line.
func TestRedactEveryRequest(t *testing.T) {
	const secret = "hunter2-secret-value"
	secrets := map[string]string{"password": secret}
	msgs := []proto.Message{
		&csi.NodePublishVolumeRequest{VolumeId: "v", Secrets: secrets,
			VolumeContext: map[string]string{metadata.SATokenVolumeContextKey: secret, "other": "x"}},
		&csi.NodeStageVolumeRequest{VolumeId: "v", Secrets: secrets},
		&csi.NodeExpandVolumeRequest{VolumeId: "v", Secrets: secrets},
		&csi.CreateVolumeRequest{Name: "v", Secrets: secrets},
		&csi.DeleteVolumeRequest{VolumeId: "v", Secrets: secrets},
		&csi.ControllerPublishVolumeRequest{VolumeId: "v", Secrets: secrets},
		&csi.ControllerUnpublishVolumeRequest{VolumeId: "v", Secrets: secrets},
		&csi.ValidateVolumeCapabilitiesRequest{VolumeId: "v", Secrets: secrets},
		&csi.CreateSnapshotRequest{Name: "s", Secrets: secrets},
		&csi.DeleteSnapshotRequest{SnapshotId: "s", Secrets: secrets},
		&csi.ListSnapshotsRequest{Secrets: secrets},
		&csi.ControllerExpandVolumeRequest{VolumeId: "v", Secrets: secrets},
		&csi.ControllerModifyVolumeRequest{VolumeId: "v", Secrets: secrets},
		&csi.GetCapacityRequest{},
	}
	for _, msg := range msgs {
		var out strings.Builder
		log := funcr.New(func(prefix, args string) { out.WriteString(args) }, funcr.Options{Verbosity: 9})
		log.Info("call", "request", redact(msg))
		if strings.Contains(out.String(), secret) {
			t.Errorf("%T: secret in the log line %s", msg, out.String())
		}
		if s := fmt.Sprint(msg); len(secrets) > 0 && strings.Contains(s, "password") && !strings.Contains(s, secret) {
			t.Errorf("%T: the original message was modified", msg)
		}
	}
	out := redact(msgs[0]).(*csi.NodePublishVolumeRequest)
	if out.VolumeContext["other"] != "x" || out.VolumeId != "v" || out.Secrets["password"] != metadata.Redacted {
		t.Errorf("redaction changed more than the secrets: %v", out)
	}
	if redact("not a message") != "not a message" {
		t.Error("a non-message value was changed")
	}
}
