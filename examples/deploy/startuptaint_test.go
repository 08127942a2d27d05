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

package deploy

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/cert-manager/csi-lib/driver"
	"github.com/cert-manager/csi-lib/examples/csi-driver/plugin"
	"github.com/cert-manager/csi-lib/test/testkit/manifests"
)

// startupTaintDir is the component that turns the startup taint's removal on.
const startupTaintDir = "startup-taint"

// component is the part of a kustomize Component the startup taint's uses.
type component struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Patches    []struct {
		Target struct {
			Kind string `json:"kind"`
			Name string `json:"name"`
		} `json:"target"`
		Patch string `json:"patch"`
	} `json:"patches"`
}

// startupTaintObjects decodes the component's files.
func startupTaintObjects(t *testing.T) (*component, *rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding, *admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(startupTaintDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		t.Fatal(err)
	}
	c := &component{}
	if err := decodeStrictly(js, c); err != nil {
		t.Fatalf("%s/kustomization.yaml: %v", startupTaintDir, err)
	}
	files, err := filepath.Glob(filepath.Join(startupTaintDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, f := range files {
		if filepath.Base(f) != "kustomization.yaml" {
			listed = append(listed, filepath.Base(f))
		}
	}
	if got := slices.Sorted(slices.Values(c.Resources)); !slices.Equal(got, listed) {
		t.Errorf("%s/kustomization.yaml lists %v, the directory has %v", startupTaintDir, got, listed)
	}
	var role *rbacv1.ClusterRole
	var binding *rbacv1.ClusterRoleBinding
	var policy *admissionv1.ValidatingAdmissionPolicy
	var policyBinding *admissionv1.ValidatingAdmissionPolicyBinding
	for _, f := range listed {
		docs, err := manifests.Documents(filepath.Join(startupTaintDir, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range docs {
			obj, err := manifests.Decode(doc)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			switch o := obj.(type) {
			case *rbacv1.ClusterRole:
				role = o
			case *rbacv1.ClusterRoleBinding:
				binding = o
			case *admissionv1.ValidatingAdmissionPolicy:
				policy = o
			case *admissionv1.ValidatingAdmissionPolicyBinding:
				policyBinding = o
			default:
				t.Errorf("%s: an unexpected %T", f, obj)
			}
		}
	}
	if role == nil || binding == nil || policy == nil || policyBinding == nil {
		t.Fatalf("the component lacks the ClusterRole, its binding, the policy or its binding")
	}
	return c, role, binding, policy, policyBinding
}

// TestStartupTaintComponent: the component that turns the startup taint's removal on is off by
// default, agrees with the set, and grants the least the removal needs: the DaemonSet tolerates
// the taint whose key is the driver's name and the library's suffix, the component adds the
// driver's flag, binds the driver's account to get and watch on nodes and CSINodes and patch on
// nodes and nothing else, and its policy confines the patch to that key, for that account.
func TestStartupTaintComponent(t *testing.T) {
	s := decodeSet(t)
	pod := s.daemonSet.Spec.Template.Spec
	driverName, _ := flagValue(container(t, pod, "csi-driver").Args, "driver-name")
	key, err := driver.StartupTaintKey(driverName)
	if err != nil {
		t.Fatal(err)
	}
	c, role, binding, policy, policyBinding := startupTaintObjects(t)

	// Off by default: the set does not list the component, and the driver's flag is not set.
	raw, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Components []string `json:"components"`
	}
	if err := yaml.Unmarshal(raw, &k); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(k.Components, startupTaintDir) {
		t.Errorf("the set lists the component %s: the default is upstream's, no startup taint", startupTaintDir)
	}
	if !strings.Contains(string(raw), "# - "+startupTaintDir+"\n") {
		t.Errorf("kustomization.yaml does not show the switch (a commented component %s)", startupTaintDir)
	}
	if _, on := flagValue(container(t, pod, "csi-driver").Args, "remove-startup-taint"); on {
		t.Error("the DaemonSet removes the startup taint without the component")
	}

	// The DaemonSet tolerates the taint, whatever its effect and value.
	if !slices.ContainsFunc(pod.Tolerations, func(tol corev1.Toleration) bool {
		return tol.Key == key && tol.Operator == corev1.TolerationOpExists && tol.Effect == ""
	}) {
		t.Errorf("the DaemonSet's tolerations %v do not tolerate %s with every effect", pod.Tolerations, key)
	}

	// The component's patch adds --remove-startup-taint to the driver's arguments.
	if c.Kind != "Component" || len(c.Patches) != 1 || c.Patches[0].Target.Kind != "DaemonSet" || c.Patches[0].Target.Name != s.daemonSet.Name {
		t.Fatalf("the component is %+v, want a Component with one patch of the DaemonSet %s", c, s.daemonSet.Name)
	}
	var ops []struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value string `json:"value"`
	}
	if err := yaml.UnmarshalStrict([]byte(c.Patches[0].Patch), &ops); err != nil {
		t.Fatal(err)
	}
	args := append([]string(nil), container(t, pod, "csi-driver").Args...)
	argsPath := regexp.MustCompile(`^/spec/template/spec/containers/(\d+)/args/-$`)
	for _, op := range ops {
		m := argsPath.FindStringSubmatch(op.Path)
		if op.Op != "add" || m == nil {
			t.Fatalf("the component's patch %+v is not an argument added to a container", op)
		}
		if i, _ := strconv.Atoi(m[1]); i >= len(pod.Containers) || pod.Containers[i].Name != "csi-driver" {
			t.Fatalf("the component's patch adds %s to container %s, not to the driver's", op.Value, m[1])
		}
		args = append(args, op.Value)
	}
	fs := flag.NewFlagSet("csi-driver", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var cfg plugin.Config
	plugin.BindFlags(fs, &cfg)
	if err := fs.Parse(args); err != nil || fs.NArg() != 0 || !cfg.RemoveStartupTaint {
		t.Errorf("the driver's arguments with the component, %v, do not turn on RemoveStartupTaint: %v", args, err)
	}

	// RBAC: exactly what the removal calls, bound to the driver's account.
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "patch", "watch"}},
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"csinodes"}, Verbs: []string{"get", "watch"}},
	}
	var got []rbacv1.PolicyRule
	for _, r := range role.Rules {
		r.Verbs = slices.Sorted(slices.Values(r.Verbs))
		got = append(got, r)
	}
	if !slices.EqualFunc(got, want, func(a, b rbacv1.PolicyRule) bool {
		return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) && slices.Equal(a.Verbs, b.Verbs) &&
			len(a.ResourceNames) == 0 && len(a.NonResourceURLs) == 0
	}) {
		t.Errorf("ClusterRole %s grants\n%v\nwant exactly\n%v", role.Name, got, want)
	}
	if binding.RoleRef.Name != role.Name || !slices.ContainsFunc(binding.Subjects, func(sub rbacv1.Subject) bool {
		return sub.Kind == "ServiceAccount" && sub.Namespace == s.daemonSet.Namespace && sub.Name == pod.ServiceAccountName
	}) {
		t.Errorf("ClusterRoleBinding %s does not bind %s to the driver's account", binding.Name, role.Name)
	}

	// The policy: bound, denying, on node updates by the driver's account, for the driver's key.
	if policyBinding.Spec.PolicyName != policy.Name || !slices.Equal(policyBinding.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) {
		t.Errorf("the policy's binding %+v does not deny with %s", policyBinding.Spec, policy.Name)
	}
	account := "system:serviceaccount:" + s.daemonSet.Namespace + ":" + pod.ServiceAccountName
	if len(policy.Spec.MatchConditions) != 1 || !strings.Contains(policy.Spec.MatchConditions[0].Expression, `"`+account+`"`) {
		t.Errorf("the policy does not match the driver's account %s", account)
	}
	rules := policy.Spec.MatchConstraints.ResourceRules
	if len(rules) != 1 || !slices.Equal(rules[0].Resources, []string{"nodes"}) || !slices.Equal(rules[0].Operations, []admissionv1.OperationType{admissionv1.Update}) {
		t.Errorf("the policy matches %+v, want updates of nodes", rules)
	}
	if policy.Spec.FailurePolicy == nil || *policy.Spec.FailurePolicy != admissionv1.Fail {
		t.Error("the policy does not fail closed")
	}
	if !slices.ContainsFunc(policy.Spec.Variables, func(v admissionv1.Variable) bool { return v.Name == "key" && v.Expression == `"`+key+`"` }) {
		t.Errorf("the policy's key is not the driver's startup taint %q", key)
	}
}

// TestStartupTaintPolicyComparesEveryField: the policy compares every field of the node's spec
// but the taints, and every field of its metadata a client may change (labels, annotations,
// finalizers, owners), so a field Kubernetes adds to NodeSpec fails this test until the policy
// compares it too.
func TestStartupTaintPolicyComparesEveryField(t *testing.T) {
	_, _, _, policy, _ := startupTaintObjects(t)
	var text string
	for _, v := range policy.Spec.Validations {
		text += v.Expression
	}
	fields := []string{"metadata.labels", "metadata.annotations", "metadata.finalizers", "metadata.ownerReferences"}
	spec := reflect.TypeOf(corev1.NodeSpec{})
	for i := 0; i < spec.NumField(); i++ {
		name, _, _ := strings.Cut(spec.Field(i).Tag.Get("json"), ",")
		if name != "taints" {
			fields = append(fields, "spec."+name)
		}
	}
	for _, f := range fields {
		if !strings.Contains(text, "object."+f+" == oldObject."+f) {
			t.Errorf("the policy does not compare %s", f)
		}
	}
	if !strings.Contains(text, "variables.taints == variables.oldTaints.filter(t, t.key != variables.key)") {
		t.Error("the policy does not hold the taints to the old ones less the startup taint")
	}
}
