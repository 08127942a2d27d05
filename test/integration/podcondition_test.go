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
	"os"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/cert-manager/csi-lib/manager"
)

const certificateReady = corev1.PodConditionType("csi.example.com/certificate-ready")

// applyPolicy creates a documented admission policy and its binding (file, in examples/deploy)
// for the given service account in place of the example's, each pair of replace (old, new) put
// in too, and removes them when the test ends.
func applyPolicy(t *testing.T, file, username string, replace ...string) {
	t.Helper()
	raw, err := os.ReadFile("../../examples/deploy/" + file)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(raw), "system:serviceaccount:csi-driver:csi-driver", username)
	for i := 0; i+1 < len(replace); i += 2 {
		if !strings.Contains(text, replace[i]) {
			t.Fatalf("%s has no %q to replace", file, replace[i])
		}
		text = strings.ReplaceAll(text, replace[i], replace[i+1])
	}
	docs := strings.Split(text, "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("%s has %d documents, want the policy and its binding", file, len(docs))
	}
	var policy admissionv1.ValidatingAdmissionPolicy
	var binding admissionv1.ValidatingAdmissionPolicyBinding
	if err := yaml.UnmarshalStrict([]byte(docs[0]), &policy); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict([]byte(docs[1]), &binding); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, &policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(context.Background(), policy.Name, metav1.DeleteOptions{})
	})
	if _, err := kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, &binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})
}

// podOnNode creates a pod bound to node (no kubelet runs it) that lists the certificate
// condition as a readiness gate, and gives it the conditions a kubelet would.
func podOnNode(t *testing.T, ns, name, node, serviceAccount string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	pod, err := kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName:           node,
			ServiceAccountName: serviceAccount,
			Containers:         []corev1.Container{{Name: "app", Image: "app"}},
			ReadinessGates:     []corev1.PodReadinessGate{{ConditionType: certificateReady}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	pod.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ReadinessGatesNotReady", LastTransitionTime: now},
	}
	pod.Status.PodIP = "10.0.0.1"
	pod, err = kube.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

func ensureNode(t *testing.T, name string) {
	t.Helper()
	_, err := kube.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// patchCondition patches one pod condition as client does: a strategic merge of
// status.conditions, keyed by type.
func patchStatus(client kubernetes.Interface, pod *corev1.Pod, status map[string]any) error {
	body, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	_, err = client.CoreV1().Pods(pod.Namespace).Patch(context.Background(), pod.Name, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "status")
	return err
}

func condition(typ corev1.PodConditionType, status corev1.ConditionStatus) map[string]any {
	return map[string]any{"conditions": []corev1.PodCondition{{Type: typ, Status: status, Reason: "Test", LastTransitionTime: metav1.Now()}}}
}

// TestPodConditionAndItsAdmissionPolicy: the manager keeps the certificate condition on a
// pod through the real apiserver as the driver's own pod-bound token, leaving kubelet's
// conditions alone; the documented admission policy lets that token change only this condition,
// only on pods of its own node.
func TestPodConditionAndItsAdmissionPolicy(t *testing.T) {
	ctx := context.Background()
	ensureNode(t, "node-a")
	ensureNode(t, "node-b")
	driverNS, appNS := newNamespace(t), newNamespace(t)
	const sa = "csi-driver"
	if _, err := kube.CoreV1().ServiceAccounts(driverNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	username := "system:serviceaccount:" + driverNS + ":" + sa
	// What docs/events-and-readiness.md asks for: get and patch on pods/status, cluster-wide.
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: driverNS}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{"pods", "pods/status"}, Verbs: []string{"get", "patch"},
	}}}
	if _, err := kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: driverNS},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: driverNS},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: driverNS, Name: sa}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The driver's pod runs on node A; its projected token is bound to it, so it names node A.
	driverPod := podOnNode(t, driverNS, "csi-driver-a", "node-a", sa)
	exp := int64(3600)
	tr, err := kube.CoreV1().ServiceAccounts(driverNS).CreateToken(ctx, sa, &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{
		ExpirationSeconds: &exp,
		BoundObjectRef:    &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: driverPod.Name, UID: driverPod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest bound to the driver's pod: %v", err)
	}
	asDriverConfig := rest.AnonymousClientConfig(restConfig)
	asDriverConfig.BearerToken = tr.Status.Token
	asDriver := kubernetes.NewForConfigOrDie(asDriverConfig)

	appA := podOnNode(t, appNS, "app-a", "node-a", "default")
	appB := podOnNode(t, appNS, "app-b", "node-b", "default")
	applyPolicy(t, "pod-condition-policy.yaml", username)

	// The policy is in force once it refuses the driver's change to a pod of node B.
	var refused error
	poll(t, "the policy to refuse a pod of another node", func() bool {
		refused = patchStatus(asDriver, appB, condition(certificateReady, corev1.ConditionTrue))
		return apierrors.IsInvalid(refused) || apierrors.IsForbidden(refused)
	})
	if !strings.Contains(refused.Error(), "only change pods on the node its token is bound to") {
		t.Fatalf("pod of node B: refused with %v", refused)
	}
	for name, change := range map[string]map[string]any{
		"kubelet's Ready condition":         condition(corev1.PodReady, corev1.ConditionTrue),
		"a condition of another type":       condition("example.com/other", corev1.ConditionTrue),
		"the pod's IP":                      {"podIP": "10.9.9.9"},
		"the phase":                         {"phase": "Failed"},
		"a status field the pod lacks":      {"message": "set by the driver"},
		"its condition and kubelet's Ready": {"conditions": []corev1.PodCondition{{Type: certificateReady, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	} {
		err := patchStatus(asDriver, appA, change)
		if err == nil || !strings.Contains(err.Error(), "may only change its own pod condition") {
			t.Errorf("%s on its own node: %v, want the policy's refusal", name, err)
		}
	}
	// Fields the policy reads that a request or a pod may lack get its answer, not a CEL error:
	// the driver's account impersonated (a user without extra, so no node) is refused as not
	// bound to the pod's node; a pod with no conditions, labels or annotations yet gets the
	// driver's condition.
	impersonated := kubernetes.NewForConfigOrDie(impersonating(username))
	err = patchStatus(impersonated, appA, condition(certificateReady, corev1.ConditionTrue))
	if err == nil || !strings.Contains(err.Error(), "only change pods on the node its token is bound to") || celError(err) {
		t.Errorf("the driver's account without extra: %v, want the policy's refusal", err)
	}
	bare, err := kube.CoreV1().Pods(appNS).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "bare"},
		Spec:       corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(bare.Status.Conditions) != 0 || len(bare.Labels) != 0 || len(bare.Annotations) != 0 {
		t.Fatalf("the bare pod has conditions, labels or annotations: %+v", bare)
	}
	if err := patchStatus(asDriver, bare, condition(certificateReady, corev1.ConditionTrue)); err != nil {
		t.Errorf("the driver's condition on a pod without conditions, labels or annotations: %v", err)
	}

	// Without the policy's binding to its account, an administrator is not limited.
	if err := patchStatus(kube, appB, condition("example.com/other", corev1.ConditionTrue)); err != nil {
		t.Fatalf("an administrator's change: %v", err)
	}

	// The manager, as the driver, keeps the condition of its own node's pod.
	stopSigner := runSigner(t, appNS, newCA(t))
	defer stopSigner()
	n := startNode(t, nodeConfig{baseDir: t.TempDir(), namespace: appNS, managerOpts: func(o *manager.Options) {
		o.PodCondition = &manager.PodCondition{Type: certificateReady, Client: asDriver.CoreV1()}
	}})
	if _, err := n.client.NodePublishVolume(ctxTimeout(t, time.Minute), publishRequest(t, appA, "app-a-volume")); err != nil {
		t.Fatal(err)
	}
	var got *corev1.Pod
	poll(t, "app-a's certificate condition", func() bool {
		got, err = kube.CoreV1().Pods(appNS).Get(ctx, appA.Name, metav1.GetOptions{})
		c := findCondition(got, certificateReady)
		return err == nil && c != nil && c.Status == corev1.ConditionTrue
	})
	if c := findCondition(got, certificateReady); c.Reason != manager.PodConditionReasonValid {
		t.Errorf("reason %q, want %q", c.Reason, manager.PodConditionReasonValid)
	}
	for _, typ := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodReady} {
		before, after := findCondition(appA, typ), findCondition(got, typ)
		if after == nil || after.Status != before.Status || after.Reason != before.Reason {
			t.Errorf("kubelet's %s condition changed: %+v -> %+v", typ, before, after)
		}
	}
	if got.Status.PodIP != appA.Status.PodIP {
		t.Errorf("pod IP changed: %q -> %q", appA.Status.PodIP, got.Status.PodIP)
	}
}

// impersonating is the administrator's configuration acting as user, with no groups beyond
// those the apiserver adds and no extra.
func impersonating(user string) *rest.Config {
	cfg := rest.CopyConfig(restConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	return cfg
}

// celError reports whether an admission policy's refusal is an expression that failed to
// evaluate rather than its answer.
func celError(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "resulted in error") || strings.Contains(err.Error(), "no such key"))
}

func findCondition(pod *corev1.Pod, typ corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == typ {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// TestDocsShowThePolicy: the policy docs/events-and-readiness.md shows is the file the test
// above applies, less its license header (the comment block before the first blank line).
func TestDocsShowThePolicy(t *testing.T) {
	raw, err := os.ReadFile("../../examples/deploy/pod-condition-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	header, policy, found := strings.Cut(string(raw), "\n\n")
	if !found || !strings.HasPrefix(header, "# Copyright ") {
		t.Fatalf("examples/deploy/pod-condition-policy.yaml does not open with its license header: %q", header)
	}
	readme, err := os.ReadFile("../../docs/events-and-readiness.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```yaml\n"+string(policy)+"```\n") {
		t.Fatal("docs/events-and-readiness.md does not show examples/deploy/pod-condition-policy.yaml verbatim in a yaml block")
	}
}
