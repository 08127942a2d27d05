package driver

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

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
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("stale socket not left behind: %v", err)
	}
	lis, err := listen(ctx, "unix://"+sock)
	if err != nil {
		t.Fatalf("unix endpoint over a stale socket: %v", err)
	}
	lis.Close()

	lis, err = listen(ctx, "tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis.Close()

	for _, bad := range []string{"http://x", "unix://", "tcp://", "::nonsense"} {
		if _, err := listen(ctx, bad); err == nil {
			t.Errorf("listen(%q) succeeded", bad)
		}
	}
	// A regular file at the socket path is not removed.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := listen(ctx, "unix://"+file); err == nil {
		t.Error("listening over a regular file succeeded")
	}
	if b, _ := os.ReadFile(file); string(b) != "keep" {
		t.Error("a regular file at the socket path was removed")
	}
}

func TestIdentityServer(t *testing.T) {
	ids := NewIdentityServer("csi.example.com", "v1.2.3")
	info, err := ids.GetPluginInfo(context.Background(), &csi.GetPluginInfoRequest{})
	if err != nil || info.Name != "csi.example.com" || info.VendorVersion != "v1.2.3" {
		t.Fatalf("GetPluginInfo = %v, %v", info, err)
	}
	if _, err := NewIdentityServer("", "v").GetPluginInfo(context.Background(), &csi.GetPluginInfoRequest{}); err == nil {
		t.Fatal("an empty driver name was accepted")
	}
	probe, err := ids.Probe(context.Background(), &csi.ProbeRequest{})
	if err != nil || !probe.GetReady().GetValue() {
		t.Fatalf("Probe = %v, %v", probe, err)
	}
}

func TestRedactRequest(t *testing.T) {
	req := &csi.NodePublishVolumeRequest{
		VolumeId:      "v",
		VolumeContext: map[string]string{metadata.SATokenVolumeContextKey: "secret-token", "other": "x"},
		Secrets:       map[string]string{"password": "hunter2"},
	}
	out := redactRequest(req).(*csi.NodePublishVolumeRequest)
	if out.VolumeContext[metadata.SATokenVolumeContextKey] != metadata.Redacted || out.Secrets["password"] != metadata.Redacted || out.VolumeContext["other"] != "x" {
		t.Fatalf("not redacted: %v", out)
	}
	if req.VolumeContext[metadata.SATokenVolumeContextKey] != "secret-token" || req.Secrets["password"] != "hunter2" {
		t.Fatal("the original request was modified")
	}
	if s := out.String(); strings.Contains(s, "secret-token") || strings.Contains(s, "hunter2") {
		t.Fatalf("secret in %s", s)
	}
}
