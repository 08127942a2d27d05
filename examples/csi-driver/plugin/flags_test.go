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
	"flag"
	"io"
	"testing"

	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
)

// TestBindFlags: a flag sets its field; a field without its flag keeps the default it had.
func TestBindFlags(t *testing.T) {
	cfg := Config{DriverName: "csi.example.com", NodeID: "from-env", Issuer: cmmeta.IssuerReference{Kind: "ClusterIssuer", Name: "csi-ca", Group: "cert-manager.io"}}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	BindFlags(fs, &cfg)
	if err := fs.Parse([]string{"--node-id=node-a", "--pod-condition=csi.example.com/certificate-ready", "--issuer-name=other", "--gate-on-pod-ip",
		"--kubelet-registration-path=/host/csi.sock", "--endpoint=unix:///plugin/csi.sock", "--metrics-bind-address=0.0.0.0:9402", "--remove-startup-taint"}); err != nil {
		t.Fatal(err)
	}
	want := Config{DriverName: "csi.example.com", NodeID: "node-a", PodCondition: "csi.example.com/certificate-ready", GateOnPodIP: true,
		KubeletRegistrationPath: "/host/csi.sock", CSISocket: "/plugin/csi.sock", MetricsAddress: "0.0.0.0:9402", RemoveStartupTaint: true,
		Issuer: cmmeta.IssuerReference{Kind: "ClusterIssuer", Name: "other", Group: "cert-manager.io"}}
	if cfg.DriverName != want.DriverName || cfg.NodeID != want.NodeID || cfg.PodCondition != want.PodCondition || cfg.GateOnPodIP != want.GateOnPodIP ||
		cfg.KubeletRegistrationPath != want.KubeletRegistrationPath || cfg.CSISocket != want.CSISocket || cfg.MetricsAddress != want.MetricsAddress ||
		cfg.Issuer != want.Issuer || cfg.RemoveStartupTaint != want.RemoveStartupTaint {
		t.Errorf("flags gave %+v, want %+v", cfg, want)
	}
}

// TestCSIDriverFlagNames: the flags the example shares with cert-manager csi-driver have its
// names (its cmd/app/options), and the old names of the example's are gone.
func TestCSIDriverFlagNames(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	BindFlags(fs, &Config{})
	for _, name := range []string{"driver-name", "node-id", "endpoint", "data-root", "kubeconfig", "metrics-bind-address"} {
		if fs.Lookup(name) == nil {
			t.Errorf("no --%s, csi-driver's name", name)
		}
	}
	for _, old := range []string{"csi-socket", "metrics-address"} {
		if fs.Lookup(old) != nil {
			t.Errorf("--%s is still defined", old)
		}
	}
}

// TestEndpoint: --endpoint takes a unix:// endpoint (the scheme in any case) and binds the
// socket's path, read as the library reads it: "/" and what follows the scheme. Anything else is
// refused, the path kept.
func TestEndpoint(t *testing.T) {
	for in, want := range map[string]string{
		"unix:///plugin/csi.sock": "/plugin/csi.sock",
		"unix://plugin/csi.sock":  "/plugin/csi.sock", // csi-driver's chart's form
		"UNIX:///run/csi.sock":    "/run/csi.sock",
	} {
		var path string
		if err := (endpointValue{&path}).Set(in); err != nil || path != want {
			t.Errorf("--endpoint=%s: path %q, %v; want %q", in, path, err, want)
		}
		if got := (endpointValue{&path}).String(); got != "unix://"+want {
			t.Errorf("--endpoint=%s shows as %q", in, got)
		}
	}
	for _, bad := range []string{"", "/plugin/csi.sock", "unix://", "unix:///", "tcp://127.0.0.1:10000"} {
		path := "/kept"
		if err := (endpointValue{&path}).Set(bad); err == nil || path != "/kept" {
			t.Errorf("--endpoint=%q: accepted, path %q", bad, path)
		}
	}
}
