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
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// The deployment story applies examples/deploy whole, as `kubectl apply -k` does: kustomize
// renders the set through an overlay, and every object is server-side applied. The overlay
// changes only what cannot run on this node as the set stands, each patch saying why (see
// overlayPatches).

// setOverlay is what the overlay needs to know of this node.
type setOverlay struct {
	// kubeletDir is kubelet's --root-dir here: the overlay sets the set's one value of it
	// (kubelet-root-dir.yaml, /var/lib/kubelet) and runs the set's component kubelet-root again.
	kubeletDir string
	// dataDir replaces the driver's data hostPath (the set's is under /tmp).
	dataDir string
	// apiHost and apiPort are the apiserver's loopback address.
	apiHost, apiPort string
	// metricsAddress is where the driver serves /metrics: a loopback port of the host.
	metricsAddress string
	// appImage and appCommand run the application's container (the set's busybox image cannot
	// be pulled here).
	appImage   string
	appCommand []string
}

// kubeletRootConfigMap and kubeletRootKey hold the set's kubelet root directory
// (examples/deploy/kubelet-root-dir.yaml).
const (
	kubeletRootConfigMap = "kubelet-root-dir"
	kubeletRootKey       = "kubeletRootDir"
)

// jsonPatch is one RFC 6902 operation.
type jsonPatch struct {
	Op    string `json:"op"`
	From  string `json:"from,omitempty"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// overlayPatch is one patch of the overlay, with the reason it exists.
type overlayPatch struct {
	why    string
	kind   string
	name   string
	ops    []jsonPatch
	source string // the target's file in examples/deploy, for the overlay's comment
}

// overlayPatches are the overlay's patches. Each starts with test operations on what it
// expects of the set, so that a change of the set that the overlay does not know fails the
// render instead of being patched blindly.
func (o setOverlay) overlayPatches() []overlayPatch {
	apiEnv := []jsonPatch{
		{Op: "add", Path: "/spec/template/spec/hostNetwork", Value: true},
		{Op: "add", Path: "/spec/template/spec/dnsPolicy", Value: "ClusterFirstWithHostNet"},
	}
	apiVars := []map[string]string{{"name": "KUBERNETES_SERVICE_HOST", "value": o.apiHost}, {"name": "KUBERNETES_SERVICE_PORT", "value": o.apiPort}}
	hostPath := func(volume int, name, path string) []jsonPatch {
		return []jsonPatch{
			{Op: "test", Path: fmt.Sprintf("/spec/template/spec/volumes/%d/name", volume), Value: name},
			{Op: "replace", Path: fmt.Sprintf("/spec/template/spec/volumes/%d/hostPath/path", volume), Value: path},
		}
	}
	// The driver takes over node-driver-registrar's --kubelet-registration-path and the kubelet
	// root it reads (both set from the overlay's kubelet root by the component), then the
	// registrar goes.
	driver := []jsonPatch{
		{Op: "test", Path: "/spec/template/spec/containers/0/name", Value: "node-driver-registrar"},
		{Op: "test", Path: "/spec/template/spec/containers/0/args/1", Value: "--kubelet-registration-path=$(KUBELET_ROOT_DIR)/plugins/" + driverName + "/csi.sock"},
		{Op: "test", Path: "/spec/template/spec/containers/0/env/0/name", Value: "KUBELET_ROOT_DIR"},
		{Op: "test", Path: "/spec/template/spec/containers/1/name", Value: "csi-driver"},
		{Op: "copy", From: "/spec/template/spec/containers/0/args/1", Path: "/spec/template/spec/containers/1/args/-"},
		{Op: "copy", From: "/spec/template/spec/containers/0/env/0", Path: "/spec/template/spec/containers/1/env/-"},
		{Op: "remove", Path: "/spec/template/spec/containers/0"},
		{Op: "test", Path: "/spec/template/spec/containers/0/name", Value: "csi-driver"},
		{Op: "add", Path: "/spec/template/spec/containers/0/args/-", Value: "--plugins-registry=/registration"},
		{Op: "add", Path: "/spec/template/spec/containers/0/args/-", Value: "--metrics-bind-address=" + o.metricsAddress},
		{Op: "add", Path: "/spec/template/spec/containers/0/volumeMounts/-", Value: map[string]string{"name": "registration-dir", "mountPath": "/registration"}},
	}
	for _, v := range apiVars {
		driver = append(driver, jsonPatch{Op: "add", Path: "/spec/template/spec/containers/0/env/-", Value: v})
	}
	driver = append(driver, hostPath(3, "csi-data-dir", o.dataDir)...)
	driver = append(driver, apiEnv...)
	approver := append([]jsonPatch{
		{Op: "test", Path: "/spec/template/spec/containers/0/name", Value: "approver"},
		{Op: "add", Path: "/spec/template/spec/containers/0/env", Value: apiVars},
	}, apiEnv...)
	return []overlayPatch{{
		why: "node-driver-registrar's image cannot be pulled here: the driver registers itself (--plugins-registry), " +
			"with the registrar's --kubelet-registration-path. The set's data directory is under /tmp. The apiserver listens on loopback only and " +
			"no kube-proxy runs, so the driver uses the host's network and the apiserver's loopback address, and serves " +
			"/metrics on a loopback port (nothing here is sent to a pod address).",
		kind: "DaemonSet", name: "csi-driver", source: "daemonset.yaml", ops: driver,
	}, {
		why:  "The apiserver listens on loopback only and no kube-proxy runs: the approver uses the host's network.",
		kind: "Deployment", name: "csi-approver", source: "approver.yaml", ops: approver,
	}, {
		why:  "busybox cannot be pulled here: the application is the node's checker, which verifies the volume's key and chain.",
		kind: "Deployment", name: "example-app", source: "app.yaml",
		ops: []jsonPatch{
			{Op: "test", Path: "/spec/template/spec/containers/0/name", Value: "app"},
			{Op: "replace", Path: "/spec/template/spec/containers/0/image", Value: o.appImage},
			{Op: "add", Path: "/spec/template/spec/containers/0/imagePullPolicy", Value: "Never"},
			{Op: "replace", Path: "/spec/template/spec/containers/0/command", Value: o.appCommand},
		},
	}}
}

// writeOverlay writes the overlay's kustomization.yaml into dir, over the set in base.
func (o setOverlay) writeOverlay(dir, base string) error {
	var b strings.Builder
	b.WriteString("# The e2e node's overlay of examples/deploy (written by the e2e program).\n")
	b.WriteString("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n")
	rel, err := filepath.Rel(dir, base) // kustomize takes a base by relative path only
	if err != nil {
		return err
	}
	fmt.Fprintf(&b, "resources:\n- %s\n", rel)
	// kubelet's root directory is this run's: the set's one value of it, then the set's component
	// that puts it into the DaemonSet's paths, run again (the set's build ran it with its own).
	b.WriteString("# kubelet's root directory is this run's, not /var/lib/kubelet (examples/deploy/kubelet-root-dir.yaml).\n")
	fmt.Fprintf(&b, "configMapGenerator:\n- name: %s\n  behavior: merge\n  literals:\n  - %s=%s\n  options:\n    disableNameSuffixHash: true\n",
		kubeletRootConfigMap, kubeletRootKey, o.kubeletDir)
	fmt.Fprintf(&b, "components:\n- %s\n", filepath.Join(rel, "kubelet-root"))
	b.WriteString("patches:\n")
	for _, p := range o.overlayPatches() {
		ops, err := json.Marshal(p.ops)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "# %s %s (%s): %s\n", p.kind, p.name, p.source, p.why)
		fmt.Fprintf(&b, "- target: {kind: %s, name: %s}\n  patch: '%s'\n", p.kind, p.name, strings.ReplaceAll(string(ops), "'", "''"))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(b.String()), 0o644)
}

// renderSet renders the kustomization in dir, as `kubectl kustomize` does.
func renderSet(dir string) ([]*unstructured.Unstructured, error) {
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	out, err := res.AsYaml()
	if err != nil {
		return nil, err
	}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, err
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	return objs, nil
}

// applySet server-side applies every object, in the order kustomize gives (namespaces and
// cluster-wide objects first), as `kubectl apply --server-side --force-conflicts` does.
func applySet(ctx context.Context, cfg *rest.Config, objs []*unstructured.Unstructured) error {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	groups, err := restmapper.GetAPIGroupResources(dc)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDiscoveryRESTMapper(groups)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for _, u := range objs {
		gvk := u.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("%s %s: %w", gvk.Kind, u.GetName(), err)
		}
		var client dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			client = dyn.Resource(m.Resource).Namespace(u.GetNamespace())
		}
		if _, err := client.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: "e2e-apply-k", Force: true}); err != nil {
			return fmt.Errorf("applying %s %s/%s: %w", gvk.Kind, u.GetNamespace(), u.GetName(), err)
		}
	}
	return nil
}

// objectOf returns the object of the set of that kind and name, or nil.
func objectOf(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, u := range objs {
		if u.GetKind() == kind && u.GetName() == name {
			return u
		}
	}
	return nil
}
