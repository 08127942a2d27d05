//go:build integration

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

package integration

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cert-manager/csi-lib/driver"
	"github.com/cert-manager/csi-lib/test/testkit/manifests"
)

// The example's driver name, which examples/deploy/startup-taint/policy.yaml names.
const (
	taintDriver = "csi.example.com"
	startupKey  = taintDriver + driver.StartupTaintSuffix
)

var (
	startupTaint = corev1.Taint{Key: startupKey, Effect: corev1.TaintEffectNoSchedule}
	otherTaint   = corev1.Taint{Key: "example.org/other", Value: "x", Effect: corev1.TaintEffectNoSchedule}
)

// startupTaintRules are the rules of examples/deploy/startup-taint/rbac.yaml's ClusterRole.
func startupTaintRules(t *testing.T) []rbacv1.PolicyRule {
	t.Helper()
	docs, err := manifests.Documents("../../examples/deploy/startup-taint/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range docs {
		obj, err := manifests.Decode(doc)
		if err != nil {
			t.Fatal(err)
		}
		if role, ok := obj.(*rbacv1.ClusterRole); ok {
			return role.Rules
		}
	}
	t.Fatal("examples/deploy/startup-taint/rbac.yaml has no ClusterRole")
	return nil
}

// taintedNode creates (or resets) node name with taints and a label, as a provisioner would.
func taintedNode(t *testing.T, name string, taints ...corev1.Taint) {
	t.Helper()
	ctx := context.Background()
	ensureNode(t, name)
	n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Spec.Taints = taints
	n.Labels = map[string]string{"example.org/pool": "default"}
	if _, err := kube.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func nodeTaints(t *testing.T, name string) []corev1.Taint {
	t.Helper()
	n, err := kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.Spec.Taints
}

func sameTaintList(got []corev1.Taint, want ...corev1.Taint) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i].Key != want[i].Key || got[i].Value != want[i].Value || got[i].Effect != want[i].Effect {
			return false
		}
	}
	return true
}

// kubeWithToken is a Kubernetes clientset authenticated with token alone.
func kubeWithToken(token string) kubernetes.Interface {
	cfg := rest.AnonymousClientConfig(restConfig)
	cfg.BearerToken = token
	return kubernetes.NewForConfigOrDie(cfg)
}

// jsonPatchNode sends a JSON patch of node name as client.
func jsonPatchNode(client kubernetes.Interface, name string, ops ...map[string]any) error {
	body, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	_, err = client.CoreV1().Nodes().Patch(context.Background(), name, types.JSONPatchType, body, metav1.PatchOptions{})
	return err
}

// TestStartupTaintPolicy: with examples/deploy/startup-taint's ClusterRole and admission policy,
// a driver whose token is bound to a pod on node-a removes node-a's startup taint through the
// library's option once node-a's CSINode lists it, and the apiserver refuses it everything else:
// another node's startup taint, any other taint added, removed or changed, the startup taint
// changed instead of removed, a label, the spec; and the same account without a token bound to
// a node.
func TestStartupTaintPolicy(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	taintedNode(t, "taint-a", startupTaint, otherTaint)
	taintedNode(t, "taint-b", startupTaint, otherTaint)
	allow(t, ns, "csi-driver", false, startupTaintRules(t)...)
	username := "system:serviceaccount:" + ns + ":csi-driver"
	applyPolicy(t, "startup-taint/policy.yaml", username)
	asDriverA := kubeWithToken(boundToken(t, ns, "csi-driver", podOnNode(t, ns, "csi-driver-a", "taint-a", "csi-driver")))

	removeStartup := []byte(`[{"op":"replace","path":"/spec/taints","value":[{"key":"example.org/other","value":"x","effect":"NoSchedule"}]}]`)
	dry := metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
	// The policy is in force once it refuses driver A node B's startup taint (dry runs until
	// then: admission runs, nothing is stored).
	poll(t, "the policy to refuse driver A the taint of node B", func() bool {
		_, err := asDriverA.CoreV1().Nodes().Patch(ctx, "taint-b", types.JSONPatchType, removeStartup, dry)
		return err != nil && !apierrors.IsForbidden(err)
	})
	_, refused := asDriverA.CoreV1().Nodes().Patch(ctx, "taint-b", types.JSONPatchType, removeStartup, metav1.PatchOptions{})
	if want := "may only change the node its token is bound to (taint-a), not taint-b"; !strings.Contains(refused.Error(), want) || celError(refused) {
		t.Fatalf("node B's taint: %v, want %q", refused, want)
	}
	if !sameTaintList(nodeTaints(t, "taint-b"), startupTaint, otherTaint) {
		t.Fatalf("node B's taints changed: %v", nodeTaints(t, "taint-b"))
	}

	// What else driver A may not do to its own node (dry runs).
	for _, c := range []struct {
		name, want string
		patch      string
		typ        types.PatchType
	}{
		{"remove the other taint", "may only remove the taint", `[{"op":"replace","path":"/spec/taints","value":[{"key":"` + startupKey + `","effect":"NoSchedule"}]}]`, types.JSONPatchType},
		{"remove every taint", "may only remove the taint", `[{"op":"remove","path":"/spec/taints"}]`, types.JSONPatchType},
		{"add a taint", "may only remove the taint", `[{"op":"add","path":"/spec/taints/-","value":{"key":"example.org/added","effect":"NoSchedule"}}]`, types.JSONPatchType},
		{"change the other taint", "may only remove the taint", `[{"op":"replace","path":"/spec/taints/1/value","value":"y"}]`, types.JSONPatchType},
		{"change the startup taint's effect", "may only remove the taint", `[{"op":"replace","path":"/spec/taints/0/effect","value":"NoExecute"}]`, types.JSONPatchType},
		{"keep the startup taint and change nothing", "may only remove the taint", `[{"op":"test","path":"/spec/taints/0/key","value":"` + startupKey + `"}]`, types.JSONPatchType},
		{"remove it and add a label", "change nothing else", `{"metadata":{"labels":{"example.org/added":"x"}},"spec":{"taints":[{"key":"example.org/other","value":"x","effect":"NoSchedule"}]}}`, types.MergePatchType},
		{"remove it and drop the labels", "change nothing else", `[{"op":"replace","path":"/spec/taints","value":[{"key":"example.org/other","value":"x","effect":"NoSchedule"}]},{"op":"remove","path":"/metadata/labels"}]`, types.JSONPatchType},
		{"remove it and annotate", "change nothing else", `{"metadata":{"annotations":{"a":"b"}},"spec":{"taints":[{"key":"example.org/other","value":"x","effect":"NoSchedule"}]}}`, types.MergePatchType},
		{"remove it and cordon", "change nothing else", `{"spec":{"unschedulable":true,"taints":[{"key":"example.org/other","value":"x","effect":"NoSchedule"}]}}`, types.MergePatchType},
		{"remove it and set the provider", "change nothing else", `{"spec":{"providerID":"fake://x","taints":[{"key":"example.org/other","value":"x","effect":"NoSchedule"}]}}`, types.MergePatchType},
		{"remove it and add a finalizer", "change nothing else", `{"metadata":{"finalizers":["example.org/f"]},"spec":{"taints":[{"key":"example.org/other","value":"x","effect":"NoSchedule"}]}}`, types.MergePatchType},
	} {
		_, err := asDriverA.CoreV1().Nodes().Patch(ctx, "taint-a", c.typ, []byte(c.patch), dry)
		if err == nil || !strings.Contains(err.Error(), c.want) || celError(err) {
			t.Errorf("%s: %v, want the policy's refusal %q", c.name, err, c.want)
		}
	}
	// A taint-less node, and a node without labels, get the policy's answer, not a CEL error.
	if err := jsonPatchNode(kube, "taint-b", map[string]any{"op": "remove", "path": "/metadata/labels"}); err != nil {
		t.Fatal(err)
	}
	if _, err := asDriverA.CoreV1().Nodes().Patch(ctx, "taint-b", types.JSONPatchType, []byte(`[{"op":"remove","path":"/spec/taints"}]`), dry); err == nil || celError(err) || !strings.Contains(err.Error(), "not taint-b") {
		t.Errorf("node B without labels: %v, want the policy's refusal", err)
	}
	// The status cannot change through nodes, and nodes/status is not granted.
	if _, err := asDriverA.CoreV1().Nodes().Patch(ctx, "taint-a", types.MergePatchType, []byte(`{"status":{"phase":"Terminated"}}`), dry, "status"); !apierrors.IsForbidden(err) {
		t.Errorf("nodes/status: %v, want Forbidden", err)
	}
	// Neither delete nor list is granted: a read is by name, a get or a watch of that name.
	if err := asDriverA.CoreV1().Nodes().Delete(ctx, "taint-a", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); !apierrors.IsForbidden(err) {
		t.Errorf("delete: %v, want Forbidden", err)
	}
	if _, err := asDriverA.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list: %v, want Forbidden", err)
	}
	// The account without a token bound to a node may change no node.
	impersonated := kubernetes.NewForConfigOrDie(impersonating(username))
	if _, err := impersonated.CoreV1().Nodes().Patch(ctx, "taint-a", types.JSONPatchType, []byte(`[{"op":"replace","path":"/spec/taints","value":[{"key":"example.org/other","value":"x","effect":"NoSchedule"}]}]`), dry); err == nil || celError(err) || !strings.Contains(err.Error(), "may only change the node its token is bound to") {
		t.Errorf("the account without a bound token: %v, want the policy's refusal", err)
	}

	// A patch whose test of the taints is stale (another writer added a taint since the read)
	// fails on the real apiserver, and the other writer's taint stays.
	late := corev1.Taint{Key: "example.org/late", Effect: corev1.TaintEffectNoSchedule}
	taintedNode(t, "taint-a", startupTaint, otherTaint, late)
	stale := []map[string]any{
		{"op": "test", "path": "/spec/taints", "value": []corev1.Taint{startupTaint, otherTaint}},
		{"op": "replace", "path": "/spec/taints", "value": []corev1.Taint{otherTaint}},
	}
	// The apiserver answers a failed test 422 Invalid with a generic message, as it answers a
	// policy's refusal: the driver tells the two apart by reading the node again.
	if err := jsonPatchNode(asDriverA, "taint-a", stale...); !apierrors.IsInvalid(err) || strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
		t.Errorf("a stale patch: %v, want its test to fail (422)", err)
	}
	if !sameTaintList(nodeTaints(t, "taint-a"), startupTaint, otherTaint, late) {
		t.Fatalf("node A's taints after a stale patch: %v", nodeTaints(t, "taint-a"))
	}

	// The driver, through the library's option with the account's bound token, waits for the
	// CSINode to list it, then removes its startup taint alone.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := driver.NewWithListener(lis, testr.New(t), driver.Options{DriverName: taintDriver, DriverVersion: "v1", NodeID: "taint-a",
		RemoveStartupTaint: &driver.StartupTaintOptions{Nodes: asDriverA.CoreV1(), CSINodes: asDriverA.StorageV1()}})
	served := make(chan error, 1)
	go func() { served <- d.Run() }()
	t.Cleanup(func() {
		d.Stop()
		if err := <-served; err != nil {
			t.Errorf("driver: %v", err)
		}
	})
	time.Sleep(2 * time.Second)
	if !sameTaintList(nodeTaints(t, "taint-a"), startupTaint, otherTaint, late) {
		t.Fatalf("the taint went before the CSINode listed the driver: %v", nodeTaints(t, "taint-a"))
	}
	csiNode := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "taint-a"}, Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: taintDriver, NodeID: "taint-a"}}}}
	if _, err := kube.StorageV1().CSINodes().Create(ctx, csiNode, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.StorageV1().CSINodes().Delete(context.Background(), "taint-a", metav1.DeleteOptions{})
	})
	poll(t, "the driver to remove node A's startup taint", func() bool { return sameTaintList(nodeTaints(t, "taint-a"), otherTaint, late) })
	if !sameTaintList(nodeTaints(t, "taint-b"), startupTaint, otherTaint) {
		t.Errorf("node B's taints changed: %v", nodeTaints(t, "taint-b"))
	}
	// A startup taint added later, within the window, goes too.
	taintedNode(t, "taint-a", otherTaint, startupTaint)
	poll(t, "the driver to remove the startup taint added later", func() bool { return sameTaintList(nodeTaints(t, "taint-a"), otherTaint) })
}
