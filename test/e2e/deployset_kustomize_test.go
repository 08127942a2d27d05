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

// The set's kustomize build, tested here because this module already renders it (kustomize's
// API is in its build list, not in the examples module's): examples/deploy's own tests read its
// files, which TestRenderedSetIsTheFiles holds to what kustomize renders.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/cert-manager/csi-lib/test/testkit/manifests"
)

// setDir is examples/deploy from this module's directory.
const setDir = "../../examples/deploy"

// defaultKubeletRoot is kubelet's default --root-dir, the set's value (kubelet-root-dir.yaml).
const defaultKubeletRoot = "/var/lib/kubelet"

func render(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := renderSet(dir)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// renderedDaemonSet is the driver's DaemonSet of a rendering.
func renderedDaemonSet(t *testing.T, objs []*unstructured.Unstructured) *appsv1.DaemonSet {
	t.Helper()
	u := objectOf(objs, "DaemonSet", "csi-driver")
	if u == nil {
		t.Fatal("the rendering has no DaemonSet csi-driver")
	}
	ds := &appsv1.DaemonSet{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, ds, true); err != nil {
		t.Fatal(err)
	}
	return ds
}

func podContainer(t *testing.T, pod corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range pod.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %s", name)
	return corev1.Container{}
}

// kubeletPaths are the DaemonSet's fields that derive from kubelet's root directory, by where
// they are, with their values: every hostPath but the data directory's, the driver's mount of
// the pods directory, node-driver-registrar's KUBELET_ROOT_DIR and the
// --kubelet-registration-path it expands it in.
func kubeletPaths(t *testing.T, ds *appsv1.DaemonSet) map[string]string {
	t.Helper()
	pod := ds.Spec.Template.Spec
	paths := map[string]string{}
	for _, v := range pod.Volumes {
		if v.HostPath != nil && v.Name != "csi-data-dir" {
			paths["hostPath "+v.Name] = v.HostPath.Path
		}
	}
	for _, m := range podContainer(t, pod, "csi-driver").VolumeMounts {
		if m.Name == "pods-mount-dir" {
			paths["the driver's mount of "+m.Name] = m.MountPath
		}
	}
	registrar := podContainer(t, pod, "node-driver-registrar")
	for _, e := range registrar.Env {
		if e.Name == "KUBELET_ROOT_DIR" {
			paths["the registrar's KUBELET_ROOT_DIR"] = e.Value
		}
	}
	for _, a := range registrar.Args {
		if path, ok := strings.CutPrefix(a, "--kubelet-registration-path="); ok {
			paths["the registrar's --kubelet-registration-path"] = strings.Replace(path, "$(KUBELET_ROOT_DIR)", paths["the registrar's KUBELET_ROOT_DIR"], 1)
		}
	}
	return paths
}

// wantKubeletPaths are kubeletPaths with kubelet's root directory at root.
func wantKubeletPaths(root string) map[string]string {
	return map[string]string{
		"hostPath plugin-dir":                         root + "/plugins/csi.example.com",
		"hostPath pods-mount-dir":                     root + "/pods",
		"hostPath registration-dir":                   root + "/plugins_registry",
		"the driver's mount of pods-mount-dir":        root + "/pods",
		"the registrar's KUBELET_ROOT_DIR":            root,
		"the registrar's --kubelet-registration-path": root + "/plugins/csi.example.com/csi.sock",
	}
}

func samePaths(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %s is %q, want %q", what, k, got[k], w)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: %s (%q) is not known to derive from kubelet's root directory", what, k, got[k])
		}
	}
}

// docsOverlay writes as dir's kustomization the overlay of docs/deploying.md's yaml block that
// contains marker, its path to the set rewritten to reach examples/deploy from dir, and returns
// it.
func docsOverlay(t *testing.T, marker, dir string) string {
	t.Helper()
	raw, err := os.ReadFile("../../docs/deploying.md")
	if err != nil {
		t.Fatal(err)
	}
	base, err := filepath.Abs(setDir)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(dir, base)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile("(?s)```yaml\n(.*?)```\n").FindAllStringSubmatch(string(raw), -1) {
		if !strings.Contains(m[1], "kind: Kustomization") || !strings.Contains(m[1], marker) {
			continue
		}
		overlay := strings.ReplaceAll(m[1], "../examples/deploy", filepath.ToSlash(rel))
		if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(overlay), 0o644); err != nil {
			t.Fatal(err)
		}
		return overlay
	}
	t.Fatalf("docs/deploying.md has no kustomization with %q", marker)
	return ""
}

// TestKubeletRootIsOneValue: kubelet's root directory is one value of the set
// (kubelet-root-dir.yaml, kubelet's default /var/lib/kubelet), which kustomize puts into every
// field of the DaemonSet that derives from it and does not apply itself; the overlay of
// docs/deploying.md that sets another root leaves no /var/lib/kubelet anywhere in what it renders.
func TestKubeletRootIsOneValue(t *testing.T) {
	set := render(t, setDir)
	if objectOf(set, "ConfigMap", "kubelet-root-dir") != nil {
		t.Error("the set applies the ConfigMap kubelet-root-dir, which is kustomize's alone (local-config)")
	}
	samePaths(t, "the set", kubeletPaths(t, renderedDaemonSet(t, set)), wantKubeletPaths(defaultKubeletRoot))

	dir := t.TempDir()
	overlay := docsOverlay(t, "kubeletRootDir=", dir)
	root := regexp.MustCompile(`kubeletRootDir=(\S+)`).FindStringSubmatch(overlay)[1]
	if strings.Contains(root, defaultKubeletRoot) {
		t.Fatalf("the docs' overlay sets kubelet's root directory to %s, which proves nothing", root)
	}
	moved := render(t, dir)
	samePaths(t, "the docs' overlay", kubeletPaths(t, renderedDaemonSet(t, moved)), wantKubeletPaths(root))
	for _, u := range moved {
		raw, err := json.Marshal(u.Object)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(raw), defaultKubeletRoot) {
			t.Errorf("the docs' overlay leaves %s in %s %s: %s", defaultKubeletRoot, u.GetKind(), u.GetName(), raw)
		}
	}
}

// TestReleaseLabelOverlay: the overlay of docs/deploying.md for a kube-prometheus-stack
// installed under another release name relabels both monitoring objects, and nothing else.
func TestReleaseLabelOverlay(t *testing.T) {
	dir := t.TempDir()
	overlay := docsOverlay(t, "/metadata/labels/release", dir)
	release := regexp.MustCompile(`value: (\S+)`).FindStringSubmatch(overlay)[1]
	relabelled := 0
	for _, u := range render(t, dir) {
		got := u.GetLabels()["release"]
		switch {
		case u.GroupVersionKind().Group == "monitoring.coreos.com":
			relabelled++
			if got != release {
				t.Errorf("%s %s: release=%q, want %q", u.GetKind(), u.GetName(), got, release)
			}
		case got != "":
			t.Errorf("%s %s gained release=%q", u.GetKind(), u.GetName(), got)
		}
	}
	if relabelled != 2 {
		t.Errorf("%d monitoring objects, want the PodMonitor and the PrometheusRule", relabelled)
	}
}

// TestRenderedSetIsTheFiles: kustomize renders the objects of examples/deploy's files, less the
// kubelet root's ConfigMap (kustomize's own), and, with the set's value, the DaemonSet as
// daemonset.yaml has it but for the images' tags: examples/deploy's tests, which read the files,
// read what `kubectl apply -k` applies.
func TestRenderedSetIsTheFiles(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(setDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var inFiles []string
	var fileDaemonSet *appsv1.DaemonSet
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		docs, err := manifests.Documents(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range docs {
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal(doc, &u.Object); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if u.GetAnnotations()["config.kubernetes.io/local-config"] == "true" {
				continue
			}
			inFiles = append(inFiles, u.GetKind()+"/"+u.GetName())
			if u.GetKind() == "DaemonSet" {
				fileDaemonSet = renderedDaemonSet(t, []*unstructured.Unstructured{u})
			}
		}
	}
	set := render(t, setDir)
	var rendered []string
	for _, u := range set {
		rendered = append(rendered, u.GetKind()+"/"+u.GetName())
	}
	slices.Sort(inFiles)
	slices.Sort(rendered)
	if !slices.Equal(inFiles, rendered) {
		t.Errorf("kustomize renders %v, the files hold %v", rendered, inFiles)
	}
	ds := renderedDaemonSet(t, set)
	for i := range ds.Spec.Template.Spec.Containers {
		ds.Spec.Template.Spec.Containers[i].Image = fileDaemonSet.Spec.Template.Spec.Containers[i].Image
	}
	got, _ := json.Marshal(ds.Spec)
	want, _ := json.Marshal(fileDaemonSet.Spec)
	if string(got) != string(want) {
		t.Errorf("the rendered DaemonSet is not daemonset.yaml's:\n%s\nwant\n%s", got, want)
	}
}

// TestStartupTaintOverlay: the overlay of docs/deploying.md that turns the startup taint's
// removal on renders the set with the driver's --remove-startup-taint, the component's RBAC and
// admission policy, and the DaemonSet's toleration of the taint; the set alone has the
// toleration but neither the flag nor the component's objects.
func TestStartupTaintOverlay(t *testing.T) {
	const key = driverName + "/agent-not-ready"
	component := []string{"ClusterRole/csi-driver-startup-taint", "ClusterRoleBinding/csi-driver-startup-taint",
		"ValidatingAdmissionPolicy/csi-driver-startup-taint", "ValidatingAdmissionPolicyBinding/csi-driver-startup-taint"}
	check := func(what string, objs []*unstructured.Unstructured, on bool) {
		t.Helper()
		ds := renderedDaemonSet(t, objs)
		if !slices.ContainsFunc(ds.Spec.Template.Spec.Tolerations, func(tol corev1.Toleration) bool {
			return tol.Key == key && tol.Operator == corev1.TolerationOpExists
		}) {
			t.Errorf("%s: the DaemonSet does not tolerate %s", what, key)
		}
		if got := slices.Contains(podContainer(t, ds.Spec.Template.Spec, "csi-driver").Args, "--remove-startup-taint"); got != on {
			t.Errorf("%s: the driver's --remove-startup-taint is %t, want %t", what, got, on)
		}
		for _, o := range component {
			kind, name, _ := strings.Cut(o, "/")
			if got := objectOf(objs, kind, name) != nil; got != on {
				t.Errorf("%s: %s rendered %t, want %t", what, o, got, on)
			}
		}
	}
	check("the set", render(t, setDir), false)
	dir := t.TempDir()
	docsOverlay(t, "examples/deploy/startup-taint", dir)
	check("the docs' overlay", render(t, dir), true)
}
