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
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/go-logr/logr/testr"

	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/storage"
)

// The store and its wrappers keep every optional interface the library looks for.
var (
	_ Store = (*storage.Filesystem)(nil)
	_ Store = (*publishHook)(nil)
)

// TestRunRejectsBadConfig: a Config without a driver name, node ID or CSI socket is refused with
// an error naming each, before anything starts (the data root is not even created).
func TestRunRejectsBadConfig(t *testing.T) {
	root := filepath.Join(t.TempDir(), "data")
	for _, tc := range []struct {
		cfg  Config
		want []string
	}{
		{Config{DataRoot: root}, []string{"driver name", "node ID", "CSI socket"}},
		{Config{DataRoot: root, DriverName: "csi.example.com", CSISocket: "/csi.sock"}, []string{"node ID"}},
		{Config{DataRoot: root, NodeID: "node-a", CSISocket: "/csi.sock"}, []string{"driver name"}},
		{Config{DataRoot: root, DriverName: "csi.example.com", NodeID: "node-a"}, []string{"CSI socket"}},
		{Config{DataRoot: root, DriverName: "Example_Driver", NodeID: "node-a", CSISocket: "/csi.sock", RemoveStartupTaint: true}, []string{"valid taint key"}},
	} {
		err := Run(context.Background(), testr.New(t), tc.cfg)
		if err == nil {
			t.Fatalf("Run(%+v) = nil, want an error", tc.cfg)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Run(%+v) = %q, want it to name the %s", tc.cfg, err, w)
			}
		}
		if _, serr := os.Stat(root); !os.IsNotExist(serr) {
			t.Fatalf("Run(%+v) created the data root before refusing: %v", tc.cfg, serr)
		}
	}
}

// TestRequestFor: the volume's attributes choose the issuer, the duration and the names;
// without them, the Config's issuer, DefaultDuration and the pod's name as common name; without
// either issuer name, an error.
func TestRequestFor(t *testing.T) {
	def := cmmeta.IssuerReference{Kind: "ClusterIssuer", Name: "csi-ca", Group: "cert-manager.io"}
	pod := map[string]string{metadata.PodNameVolumeContextKey: "app-0", metadata.PodNamespaceVolumeContextKey: "apps"}
	with := func(kv ...string) metadata.Metadata {
		ctx := map[string]string{}
		for k, v := range pod {
			ctx[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			ctx[kv[i]] = kv[i+1]
		}
		return metadata.Metadata{VolumeID: "csi-1", VolumeContext: ctx}
	}

	b, err := RequestFor(def)(with())
	if err != nil {
		t.Fatal(err)
	}
	if b.IssuerRef != def || b.Duration != DefaultDuration || b.Namespace != "apps" || b.Request.Subject.CommonName != "app-0" {
		t.Errorf("without attributes: issuer %+v, duration %v, namespace %q, CN %q", b.IssuerRef, b.Duration, b.Namespace, b.Request.Subject.CommonName)
	}

	b, err = RequestFor(def)(with(IssuerKindAttribute, "Issuer", IssuerNameAttribute, "team-ca", DurationAttribute, "15m"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (cmmeta.IssuerReference{Kind: "Issuer", Name: "team-ca", Group: "cert-manager.io"}); b.IssuerRef != want || b.Duration != 15*time.Minute {
		t.Errorf("with attributes: issuer %+v, duration %v; want %+v, 15m", b.IssuerRef, b.Duration, want)
	}

	if _, err := RequestFor(cmmeta.IssuerReference{})(with()); err == nil || !strings.Contains(err.Error(), IssuerNameAttribute) {
		t.Errorf("no issuer anywhere: %v, want an error naming %s", err, IssuerNameAttribute)
	}

	// The names, with the pod's variables expanded; a common name set empty.
	b, err = RequestFor(def)(with(metadata.ServiceAccountNameVolumeContextKey, "web", metadata.PodUIDVolumeContextKey, "u1",
		CommonNameAttribute, "", DNSNamesAttribute, "${POD_NAME}.${POD_NAMESPACE}.svc, ${POD_UID}.example",
		URISANsAttribute, "spiffe://td/ns/${POD_NAMESPACE}/sa/${SERVICE_ACCOUNT_NAME}"))
	if err != nil {
		t.Fatal(err)
	}
	if b.Request.Subject.CommonName != "" || strings.Join(b.Request.DNSNames, " ") != "app-0.apps.svc u1.example" ||
		len(b.Request.URIs) != 1 || b.Request.URIs[0].String() != "spiffe://td/ns/apps/sa/web" {
		t.Errorf("with names: CN %q, DNS %q, URIs %v", b.Request.Subject.CommonName, b.Request.DNSNames, b.Request.URIs)
	}
	if b, err = RequestFor(def)(with(CommonNameAttribute, "${POD_NAMESPACE}")); err != nil || b.Request.Subject.CommonName != "apps" {
		t.Errorf("a common name: %v", err)
	}
	if _, err := RequestFor(def)(with(DNSNamesAttribute, "${NODE_NAME}.example")); err == nil || !strings.Contains(err.Error(), "unknown variable NODE_NAME") {
		t.Errorf("an unknown variable: %v", err)
	}
}
