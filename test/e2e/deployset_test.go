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

package main

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestOverlayFitsTheSet: the e2e overlay renders over examples/deploy as it stands (its test
// operations hold), and changes only what it says: the driver keeps every argument of the set.
func TestOverlayFitsTheSet(t *testing.T) {
	base, err := filepath.Abs("../../examples/deploy")
	if err != nil {
		t.Fatal(err)
	}
	setObjs, err := renderSet(base)
	if err != nil {
		t.Fatal(err)
	}
	o := setOverlay{kubeletDir: "/run/e2e/kubelet", dataDir: "/run/e2e/data", apiHost: "127.0.0.1", apiPort: "6443",
		metricsAddress: "127.0.0.1:9999", appImage: imageName, appCommand: []string{"/checker", "/tls"}}
	dir := t.TempDir()
	if err := o.writeOverlay(dir, base); err != nil {
		t.Fatal(err)
	}
	objs, err := renderSet(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != len(setObjs) {
		t.Fatalf("the overlay renders %d objects, the set %d", len(objs), len(setObjs))
	}
	setArgs := containerArgs(t, objectOf(setObjs, "DaemonSet", "csi-driver"), "csi-driver")
	args := containerArgs(t, objectOf(objs, "DaemonSet", "csi-driver"), "csi-driver")
	for _, a := range setArgs {
		if !slices.Contains(args, a) {
			t.Errorf("the overlay dropped the driver's %s", a)
		}
	}
	for _, want := range []string{"--plugins-registry=/registration", "--kubelet-registration-path=$(KUBELET_ROOT_DIR)/plugins/csi.example.com/csi.sock", "--metrics-bind-address=127.0.0.1:9999"} {
		if !slices.Contains(args, want) {
			t.Errorf("the overlay's driver has no %s: %v", want, args)
		}
	}
	ds := objectOf(objs, "DaemonSet", "csi-driver")
	containers, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
	if len(containers) != 1 {
		t.Fatalf("the overlay's DaemonSet has %d containers, want the driver alone", len(containers))
	}

	// kubelet's root directory comes from the overlay's one value: the driver's environment,
	// its mount of the pods directory and the hostPaths, and nothing is left under the set's.
	env, _, _ := unstructured.NestedSlice(containers[0].(map[string]any), "env")
	if !slices.ContainsFunc(env, func(e any) bool {
		m := e.(map[string]any)
		return m["name"] == "KUBELET_ROOT_DIR" && m["value"] == o.kubeletDir
	}) {
		t.Errorf("the overlay's driver has no KUBELET_ROOT_DIR=%s: %v", o.kubeletDir, env)
	}
	want := map[string]string{
		"plugin-dir": "/run/e2e/kubelet/plugins/csi.example.com", "pods-mount-dir": "/run/e2e/kubelet/pods",
		"registration-dir": "/run/e2e/kubelet/plugins_registry", "csi-data-dir": "/run/e2e/data",
	}
	volumes, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "volumes")
	for _, v := range volumes {
		name, _, _ := unstructured.NestedString(v.(map[string]any), "name")
		path, _, _ := unstructured.NestedString(v.(map[string]any), "hostPath", "path")
		if path != want[name] {
			t.Errorf("the overlay's volume %s is at %q, want %q", name, path, want[name])
		}
		delete(want, name)
	}
	if len(want) != 0 {
		t.Errorf("the overlay's DaemonSet has no volumes %v", want)
	}
	mounts, _, _ := unstructured.NestedSlice(containers[0].(map[string]any), "volumeMounts")
	if !slices.ContainsFunc(mounts, func(m any) bool {
		return m.(map[string]any)["name"] == "pods-mount-dir" && m.(map[string]any)["mountPath"] == "/run/e2e/kubelet/pods"
	}) {
		t.Errorf("the overlay's driver does not mount the pods directory at /run/e2e/kubelet/pods: %v", mounts)
	}
	for _, u := range objs {
		raw, err := json.Marshal(u.Object)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(raw), "/var/lib/kubelet") {
			t.Errorf("the overlay's %s %s still names /var/lib/kubelet", u.GetKind(), u.GetName())
		}
	}
}

func containerArgs(t *testing.T, u *unstructured.Unstructured, name string) []string {
	t.Helper()
	if u == nil {
		t.Fatal("no such object")
	}
	containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	for _, c := range containers {
		m := c.(map[string]any)
		if m["name"] == name {
			args, _, _ := unstructured.NestedStringSlice(m, "args")
			return args
		}
	}
	t.Fatalf("no container %s in %s", name, u.GetName())
	return nil
}
