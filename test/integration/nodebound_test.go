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
	"maps"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	"github.com/go-logr/logr/testr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/cert-manager/csi-lib/approval"
	"github.com/cert-manager/csi-lib/examples/approver/controller"
	"github.com/cert-manager/csi-lib/internal/api"
	"github.com/cert-manager/csi-lib/internal/api/util"
	"github.com/cert-manager/csi-lib/manager"
	tokenutil "github.com/cert-manager/csi-lib/manager/util"
)

// policyIssuers is the issuers variable of examples/deploy/node-bound-policy.yaml, which a test
// replaces with its own issuers.
const policyIssuers = `'["ClusterIssuer/csi-ca"]'`

// runApprover runs the example approver (examples/approver) with the administrator's clients
// until the test ends.
func runApprover(t *testing.T) {
	t.Helper()
	runApproverWithOptions(t, controller.Options{CertManager: cm, Kube: kube, Log: testr.New(t)})
}

// runApproverWithOptions runs the example approver with opts until the test ends.
func runApproverWithOptions(t *testing.T, opts controller.Options) {
	t.Helper()
	c, err := controller.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("approver: %v", err)
		}
	})
}

// boundToken is a token of the service account ns/sa bound to pod, as kubelet projects it into
// the pod: the apiserver adds the pod's name and UID and its node's name to the token's user.
func boundToken(t *testing.T, ns, sa string, pod *corev1.Pod) string {
	t.Helper()
	exp := int64(3600)
	tr, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), sa, &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{
		ExpirationSeconds: &exp,
		BoundObjectRef:    &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest bound to pod %s: %v", pod.Name, err)
	}
	return tr.Status.Token
}

// withToken is a cert-manager client authenticated with token alone.
func withToken(token string) cmclient.Interface {
	cfg := rest.AnonymousClientConfig(restConfig)
	cfg.BearerToken = token
	return cmclient.NewForConfigOrDie(cfg)
}

// allow grants the service account ns/sa rules, cluster-wide or (namespaced) in ns.
func allow(t *testing.T, ns, sa string, namespaced bool, rules ...rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	name := ns + "-" + sa
	subjects := []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: sa}}
	var err error
	if namespaced {
		if _, err = kube.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err == nil {
			_, err = kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
				RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name}, Subjects: subjects}, metav1.CreateOptions{})
		}
	} else {
		if _, err = kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err == nil {
			_, err = kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
				RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name}, Subjects: subjects}, metav1.CreateOptions{})
		}
		t.Cleanup(func() {
			_ = kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
			_ = kube.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// withPodToken adds token to the publish's volume context as kubelet does for a CSIDriver with
// an empty-audience tokenRequest.
func withPodToken(t *testing.T, req interface{ GetVolumeContext() map[string]string }, token string) {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"": map[string]any{"token": token, "expirationTimestamp": time.Now().Add(time.Hour)}})
	if err != nil {
		t.Fatal(err)
	}
	req.GetVolumeContext()["csi.storage.k8s.io/serviceAccount.tokens"] = string(raw)
}

// requestOfVolume is the volume's only request in ns.
func requestOfVolume(t *testing.T, ns, volumeID string) *cmapi.CertificateRequest {
	t.Helper()
	var found []cmapi.CertificateRequest
	for _, r := range requestsIn(t, cm, ns) {
		if r.Labels[api.VolumeIDHashLabelKey] == util.HashIdentifier(volumeID) {
			found = append(found, r)
		}
	}
	if len(found) != 1 {
		t.Fatalf("volume %s has %d requests, want 1", volumeID, len(found))
	}
	return &found[0]
}

// decidedBy reports whether req has the condition typ set True by the example approver.
func decidedBy(req *cmapi.CertificateRequest, typ cmapi.CertificateRequestConditionType) bool {
	for _, c := range req.Status.Conditions {
		if c.Type == typ && c.Status == cmmeta.ConditionTrue && c.Reason == controller.Reason {
			return true
		}
	}
	return false
}

// TestNodeBoundIssuance: with real tokens bound to pods on two nodes, the admission policy
// (examples/deploy/node-bound-policy.yaml) and the example approver's check (package approval),
// each node's driver obtains certificates, signed by cert-manager's own controllers, for the pods
// bound to its node, and for no other: node B's driver naming node A is refused by the apiserver;
// node B's driver naming itself for a pod of node A is denied by the approver; a pod's own token
// used for another pod is refused by the apiserver.
func TestNodeBoundIssuance(t *testing.T) {
	ctx := context.Background()
	ensureNode(t, "node-a")
	ensureNode(t, "node-b")
	driverNS, appNS := newNamespace(t), newNamespace(t)
	// The driver's permissions, as examples/deploy/rbac.yaml and the consumers' charts give them.
	allow(t, driverNS, "csi-driver", false, chartRule(chartVerbs...))
	// The application's own account may only create requests in its namespace (a driver that
	// creates requests with the pod's token, as csi-driver-spiffe does).
	allow(t, appNS, "app", true, chartRule("create"))

	asDriverA := withToken(boundToken(t, driverNS, "csi-driver", podOnNode(t, driverNS, "csi-driver-a", "node-a", "csi-driver")))
	asDriverB := withToken(boundToken(t, driverNS, "csi-driver", podOnNode(t, driverNS, "csi-driver-b", "node-b", "csi-driver")))
	appA := podOnNode(t, appNS, "app-a", "node-a", "app")
	appA2 := podOnNode(t, appNS, "app-a2", "node-a", "app")
	appB := podOnNode(t, appNS, "app-b", "node-b", "app")

	startCertManager(t, caController, issuersController) // no approver of its own
	ca := readyCAIssuer(t, appNS)
	runApprover(t)
	applyPolicy(t, "node-bound-policy.yaml", "system:serviceaccount:"+driverNS+":csi-driver", policyIssuers, `'["Issuer/test-ca"]'`)

	// The policy is in force once it refuses node B's driver a request that names node A.
	forged := &cmapi.CertificateRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "forged-", Namespace: appNS, Annotations: map[string]string{
			approval.NodeNameAnnotationKey: "node-a", approval.PodNamespaceAnnotationKey: appNS,
			approval.PodNameAnnotationKey: appA.Name, approval.PodUIDAnnotationKey: string(appA.UID),
		}},
		Spec: cmapi.CertificateRequestSpec{Request: []byte("not a CSR"), IssuerRef: cmmeta.IssuerReference{Name: "test-ca"}},
	}
	// Its answer, not a policy of an earlier test's that the apiserver has not yet dropped: the
	// deletion comes before the creation in the stream the apiserver reads them from.
	var refused error
	want := `the driver's token is bound to node node-b, but the request names node "node-a"`
	poll(t, "the policy to refuse node B's driver a request naming node A", func() bool {
		_, refused = asDriverB.CertmanagerV1().CertificateRequests(appNS).Create(ctx, forged, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return refused != nil && strings.Contains(refused.Error(), want)
	})
	delete(forged.Annotations, approval.NodeNameAnnotationKey)
	if _, err := asDriverB.CertmanagerV1().CertificateRequests(appNS).Create(ctx, forged, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), `names node ""`) {
		t.Errorf("a request of the driver naming no node: %v, want the policy's refusal", err)
	}

	// Fields the policy reads that a request or its user may lack get its answer, not a CEL
	// error (dry runs: admission runs, nothing is stored).
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	bare := &cmapi.CertificateRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "bare-", Namespace: appNS},
		Spec:       cmapi.CertificateRequestSpec{Request: []byte("not a CSR"), IssuerRef: cmmeta.IssuerReference{Name: "test-ca"}},
	}
	// The driver's request with no annotations and no labels: it names no node.
	if _, err := asDriverB.CertmanagerV1().CertificateRequests(appNS).Create(ctx, bare, dryRun); err == nil || !strings.Contains(err.Error(), `names node ""`) || celError(err) {
		t.Errorf("a request of the driver with no annotations or labels: %v, want the policy's refusal", err)
	}
	// Anyone else's request with no annotations and no labels is not the policy's business.
	if _, err := cm.CertmanagerV1().CertificateRequests(appNS).Create(ctx, bare, dryRun); err != nil {
		t.Errorf("an administrator's request with no annotations or labels: %v, want it admitted", err)
	}
	// The driver's account impersonated: a user without extra, so no token bound to a pod.
	impersonated := cmclient.NewForConfigOrDie(impersonating("system:serviceaccount:" + driverNS + ":csi-driver"))
	if _, err := impersonated.CertmanagerV1().CertificateRequests(appNS).Create(ctx, forged, dryRun); err == nil ||
		!strings.Contains(err.Error(), "must create requests with a token bound to its pod on a node") || celError(err) {
		t.Errorf("the driver's account without extra: %v, want the policy's refusal", err)
	}

	startAs := func(name string, client cmclient.Interface, more func(*manager.Options)) *node {
		return startNode(t, nodeConfig{baseDir: t.TempDir(), namespace: appNS, managerOpts: func(o *manager.Options) {
			o.NodeID, o.Client = name, client
			if more != nil {
				more(o)
			}
		}})
	}
	nodeA, nodeB := startAs("node-a", asDriverA, nil), startAs("node-b", asDriverB, nil)
	publish := func(n *node, pod *corev1.Pod, volumeID string, token string) error {
		req := publishRequest(t, pod, volumeID)
		if token != "" {
			withPodToken(t, req, token)
		}
		_, err := n.client.NodePublishVolume(ctxTimeout(t, time.Minute), req)
		return err
	}

	// The legitimate requests of both nodes: approved by the example approver, signed by
	// cert-manager.
	for _, c := range []struct {
		n   *node
		pod *corev1.Pod
	}{{nodeA, appA}, {nodeB, appB}} {
		volumeID := c.pod.Name + "-volume"
		if err := publish(c.n, c.pod, volumeID, ""); err != nil {
			t.Fatalf("%s's publish on its own node: %v", c.pod.Name, err)
		}
		verifyVolume(t, c.n, volumeID, ca, time.Now())
		if req := requestOfVolume(t, appNS, volumeID); !decidedBy(req, cmapi.CertificateRequestConditionApproved) {
			t.Errorf("%s's request was not approved by the example approver: %+v", c.pod.Name, req.Status.Conditions)
		}
	}

	// Node B's driver, naming itself, for a pod bound to node A: created, then denied.
	err := publish(nodeB, appA, "b-for-a", "")
	if status.Code(err) != codes.Unknown || !strings.Contains(err.Error(), "denied: pod "+appNS+"/app-a is bound to node node-a, not to node-b") {
		t.Errorf("node B's publish for a pod of node A: %v, want the approver's denial", err)
	}
	if req := requestOfVolume(t, appNS, "b-for-a"); !decidedBy(req, cmapi.CertificateRequestConditionDenied) || len(req.Status.Certificate) != 0 {
		t.Errorf("the request was not denied by the example approver, or has a certificate: %+v", req.Status.Conditions)
	}

	// Node B's driver claiming to be node A (root on node B sets --node-id): refused, nothing created.
	liar := startAs("node-a", asDriverB, nil)
	err = publish(liar, appA, "b-as-a", "")
	if status.Code(err) != codes.Unknown || !strings.Contains(err.Error(), `the driver's token is bound to node node-b, but the request names node "node-a"`) {
		t.Errorf("node B's driver naming node A: %v, want the policy's refusal", err)
	}

	// A pod's own token, with requests created as the pod (manager/util): for its own pod the
	// request is approved and signed; for another pod it is refused.
	asPods := func(o *manager.Options) {
		o.ClientForMetadata = tokenutil.ClientForMetadataTokenRequestEmptyAud(rest.AnonymousClientConfig(restConfig))
	}
	podTokens := startAs("node-a", asDriverA, asPods)
	tokenA := boundToken(t, appNS, "app", appA)
	if err := publish(podTokens, appA, "a-own-token", tokenA); err != nil {
		t.Fatalf("app-a's publish with its own token: %v", err)
	}
	verifyVolume(t, podTokens, "a-own-token", ca, time.Now())
	// The request names the pod's service account and its UID, read from the pod's token.
	sa, err := kube.CoreV1().ServiceAccounts(appNS).Get(ctx, "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	own := requestOfVolume(t, appNS, "a-own-token")
	if claim, err := approval.ClaimOf(own); err != nil || claim.ServiceAccountName != "app" || claim.ServiceAccountUID != sa.UID {
		t.Errorf("the request made with the pod's token claims %+v (%v), want service account app, uid %s", claim, err, sa.UID)
	}
	// With the pod's token, a request naming another service account, or another UID, is refused
	// (dry runs: admission runs, nothing is stored).
	asAppA := withToken(tokenA)
	for key, value := range map[string]string{
		approval.PodServiceAccountAnnotationKey:    "admin",
		approval.PodServiceAccountUIDAnnotationKey: "another-uid",
	} {
		forgedSA := own.DeepCopy()
		forgedSA.ObjectMeta = metav1.ObjectMeta{GenerateName: "forged-sa-", Namespace: appNS, Labels: own.Labels, Annotations: maps.Clone(own.Annotations), OwnerReferences: own.OwnerReferences}
		forgedSA.Annotations[key] = value
		forgedSA.Status = cmapi.CertificateRequestStatus{}
		want := map[string]string{
			approval.PodServiceAccountAnnotationKey:    "must name that pod's service account: the token is system:serviceaccount:" + appNS + ":app, the request names system:serviceaccount:" + appNS + ":admin",
			approval.PodServiceAccountUIDAnnotationKey: "must name that service account's UID: the token's is " + string(sa.UID),
		}[key]
		if _, err := asAppA.CertmanagerV1().CertificateRequests(appNS).Create(ctx, forgedSA, dryRun); err == nil || !strings.Contains(err.Error(), want) || celError(err) {
			t.Errorf("app-a's token, %s=%s: %v, want the policy's refusal %q", key, value, err, want)
		}
	}
	err = publish(podTokens, appA2, "a2-with-a-token", tokenA)
	if status.Code(err) != codes.Unknown || !strings.Contains(err.Error(), "a request created with a pod's token must name that pod: the token is bound to pod uid "+string(appA.UID)) {
		t.Errorf("app-a's token used for app-a2: %v, want the policy's refusal", err)
	}

	for _, volumeID := range []string{"b-as-a", "a2-with-a-token"} {
		for _, r := range requestsIn(t, cm, appNS) {
			if r.Labels[api.VolumeIDHashLabelKey] == util.HashIdentifier(volumeID) {
				t.Errorf("a request exists for the refused volume %s: %s", volumeID, r.Name)
			}
		}
	}
}
