/*
Copyright 2026 The cert-manager Authors.

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
	if err := fs.Parse([]string{"--node-id=node-a", "--pod-condition=csi.example.com/certificate-ready", "--issuer-name=other", "--gate-on-pod-ip", "--kubelet-registration-path=/host/csi.sock"}); err != nil {
		t.Fatal(err)
	}
	want := Config{DriverName: "csi.example.com", NodeID: "node-a", PodCondition: "csi.example.com/certificate-ready", GateOnPodIP: true,
		KubeletRegistrationPath: "/host/csi.sock", Issuer: cmmeta.IssuerReference{Kind: "ClusterIssuer", Name: "other", Group: "cert-manager.io"}}
	if cfg.DriverName != want.DriverName || cfg.NodeID != want.NodeID || cfg.PodCondition != want.PodCondition || cfg.GateOnPodIP != want.GateOnPodIP ||
		cfg.KubeletRegistrationPath != want.KubeletRegistrationPath || cfg.Issuer != want.Issuer {
		t.Errorf("flags gave %+v, want %+v", cfg, want)
	}
}
