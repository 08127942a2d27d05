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
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	testclock "k8s.io/utils/clock/testing"

	"github.com/cert-manager/csi-lib/manager"
	managerutil "github.com/cert-manager/csi-lib/manager/util"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/metrics"
)

// grantCertificateRequests lets subject use CertificateRequests in ns with the given verbs.
func grantCertificateRequests(t *testing.T, ns, name string, subject rbacv1.Subject, verbs ...string) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{"cert-manager.io"}, Resources: []string{"certificaterequests"}, Verbs: verbs,
	}}}
	if _, err := kube.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{subject}}
	if _, err := kube.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestIssuanceBacksOffWhileTheAPIRefuses: the driver's identity may not create requests for a
// while (RBAC); attempts fail with Forbidden, back off on the issuance backoff (30 s, 60 s on the
// manager's fake clock), count as errors, and succeed once the permission is granted.
func TestIssuanceBacksOffWhileTheAPIRefuses(t *testing.T) {
	ns := newNamespace(t)
	pod := newPod(t, ns, "app-0")
	runSigner(t, ns, newCA(t))
	const user = "csi-driver-restricted"
	userSubject := rbacv1.Subject{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}
	grantClusterWide(t, "it-watch-delete-"+ns, userSubject, "list", "watch", "delete")
	impersonating := rest.CopyConfig(restConfig)
	impersonating.Impersonate = rest.ImpersonationConfig{UserName: user}
	restricted := cmclient.NewForConfigOrDie(impersonating)

	clk := testclock.NewFakeClock(time.Now())
	reg := prometheus.NewRegistry()
	renewal := wait.Backoff{Duration: 30 * time.Second, Factor: 2, Cap: 5 * time.Minute, Steps: math.MaxInt32}
	var n *node
	n = startNode(t, nodeConfig{baseDir: t.TempDir(), continueOnNotReady: true, managerOpts: func(o *manager.Options) {
		o.Client = restricted
		o.Clock = clk
		o.RenewalBackoffConfig = &renewal
		o.Metrics = metrics.New("it-node", o.Log, reg, o.MetadataReader, nil)
	}})
	// A publish while the API refuses fails with PermissionDenied (final for kubelet, as
	// upstream's Unknown), naming the verb and the account, and leaves nothing behind.
	_, err := n.client.NodePublishVolume(ctxTimeout(t, pollTimeout), publishRequest(t, pod, "csi-refused"))
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `let `+user+` (the driver's account) create certificaterequests.cert-manager.io`) {
		t.Fatalf("publish while forbidden: %v", err)
	}
	if _, err := n.store.ReadMetadata("csi-refused"); err == nil {
		t.Fatal("a failed first publish left its volume behind")
	}
	// A managed volume's loop keeps trying on the issuance backoff.
	if _, err := n.store.RegisterMetadata(metadata.Metadata{VolumeID: "csi-trouble", TargetPath: "/t", VolumeContext: publishRequest(t, pod, "x").VolumeContext}); err != nil {
		t.Fatal(err)
	}
	if !n.m.ManageVolume("csi-trouble") {
		t.Fatal("not managed")
	}
	errorsTotal := func() float64 {
		return counterValue(t, reg, "certmanager_csi_issue_errors_total", "csi-trouble")
	}
	base := errorsTotal()
	poll(t, "the first refused attempt", func() bool { return errorsTotal() == base+1 && clk.HasWaiters() })
	clk.Step(30*time.Second - time.Millisecond)
	if errorsTotal() != base+1 {
		t.Fatal("retried before the 30 s issuance backoff")
	}
	clk.Step(time.Millisecond)
	poll(t, "the second refused attempt", func() bool { return errorsTotal() == base+2 && clk.HasWaiters() })
	// The API recovers: the next attempt, 60 s later, succeeds.
	grantCertificateRequests(t, ns, "create", userSubject, "create")
	waitAllowedToCreate(t, user, ns)
	clk.Step(60 * time.Second)
	poll(t, "issuance after the API recovered", func() bool {
		meta, _ := n.store.ReadMetadata("csi-trouble")
		return meta.NextIssuanceTime != nil
	})
	if errorsTotal() != base+2 {
		t.Fatalf("errors = %v, want %v", errorsTotal(), base+2)
	}
}

// counterValue reads one volume's series of a counter family.
func counterValue(t *testing.T, reg *prometheus.Registry, name, volume string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "volume" && l.GetValue() == volume {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func serviceAccountToken(t *testing.T, ns, name string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	tr, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest: %v", err)
	}
	return tr.Status.Token
}

func tokenContext(t *testing.T, token string) string {
	b, err := json.Marshal(map[string]map[string]string{"": {"token": token}})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// waitAllowedToCreate waits until the apiserver's authorizer lets user create
// CertificateRequests in ns: RBAC changes reach it asynchronously.
func waitAllowedToCreate(t *testing.T, user, ns string) {
	t.Helper()
	poll(t, "the authorizer to allow "+user+" to create", func() bool {
		sar, err := kube.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User:               user,
			ResourceAttributes: &authzv1.ResourceAttributes{Namespace: ns, Verb: "create", Group: "cert-manager.io", Resource: "certificaterequests"},
		}}, metav1.CreateOptions{})
		return err == nil && sar.Status.Allowed
	})
}

// grantClusterWide lets subject use CertificateRequests in every namespace with the given verbs.
func grantClusterWide(t *testing.T, name string, subject rbacv1.Subject, verbs ...string) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{"cert-manager.io"}, Resources: []string{"certificaterequests"}, Verbs: verbs,
	}}}
	if _, err := kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{subject}}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestTokenRequestClient: requests are created as the pod's service account, with its own
// token from the TokenRequest API; another account's token is refused.
func TestTokenRequestClient(t *testing.T) {
	ns := newNamespace(t)
	pod := newPod(t, ns, "app-0")
	runSigner(t, ns, newCA(t))
	allowed := serviceAccountToken(t, ns, "pod-sa")
	refused := serviceAccountToken(t, ns, "other-sa")
	grantCertificateRequests(t, ns, "pod-sa-create", rbacv1.Subject{Kind: "ServiceAccount", Name: "pod-sa", Namespace: ns}, "create")
	waitAllowedToCreate(t, "system:serviceaccount:"+ns+":pod-sa", ns)

	// An in-cluster driver's configuration: the server and its CA, no client certificate. (As
	// upstream, the pod's client keeps a client certificate of the configuration, and the
	// apiserver authenticates a client certificate before a bearer token.)
	inCluster := &rest.Config{Host: restConfig.Host, TLSClientConfig: rest.TLSClientConfig{CAData: restConfig.CAData}}
	n := startNode(t, nodeConfig{baseDir: t.TempDir(), managerOpts: func(o *manager.Options) {
		o.ClientForMetadata = managerutil.ClientForMetadataTokenRequestEmptyAud(inCluster)
	}})
	for _, tc := range []struct {
		name, volume, tokens, want string
	}{
		{"pod's own account", "csi-token-ok", tokenContext(t, allowed), ""},
		{"another account", "csi-token-other", tokenContext(t, refused), "permission denied: the apiserver refused to let system:serviceaccount:" + ns + ":other-sa (the pod's account (ClientForMetadata)) create"},
		{"malformed token context", "csi-token-bad", `{"": {"token": `, managerutil.ErrMalformedTokens.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := publishRequest(t, pod, tc.volume)
			req.VolumeContext[metadata.SATokenVolumeContextKey] = tc.tokens
			_, err := n.client.NodePublishVolume(ctxTimeout(t, pollTimeout), req)
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error = %v, want one containing %q", err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), allowed) || err != nil && strings.Contains(err.Error(), refused) {
				t.Fatal("the error leaks a token")
			}
		})
	}
}

// countingTransport counts the requests a client sends, by verb.
type countingTransport struct {
	next http.RoundTripper
	mu   sync.Mutex
	n    map[string]int
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	verb := r.Method
	switch {
	case r.Method == http.MethodGet && r.URL.Query().Get("watch") == "true":
		verb = "WATCH"
	case r.Method == http.MethodGet && strings.HasSuffix(strings.TrimSuffix(r.URL.Path, "/"), "certificaterequests"):
		verb = "LIST"
	}
	c.mu.Lock()
	c.n[verb]++
	c.mu.Unlock()
	return c.next.RoundTrip(r)
}

func (c *countingTransport) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

// TestLoadPerIssuance counts what the manager sends to the apiserver per issuance: reads come
// from the informer (one LIST and one WATCH in all), never per-volume GETs or LISTs.
func TestLoadPerIssuance(t *testing.T) {
	ns := newNamespace(t)
	runSigner(t, ns, newCA(t))
	counter := &countingTransport{n: map[string]int{}}
	cfg := rest.CopyConfig(restConfig)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { counter.next = rt; return counter })
	counted := cmclient.NewForConfigOrDie(cfg)
	n := startNode(t, nodeConfig{baseDir: t.TempDir(), managerOpts: func(o *manager.Options) { o.Client = counted }})
	const volumes = 20
	atStart := counter.snapshot()
	for i := 0; i < volumes; i++ {
		pod := newPod(t, ns, "app-"+string(rune('a'+i)))
		if _, err := n.client.NodePublishVolume(ctxTimeout(t, pollTimeout), publishRequest(t, pod, "csi-load-"+string(rune('a'+i)))); err != nil {
			t.Fatal(err)
		}
	}
	end := counter.snapshot()
	t.Logf("requests to the apiserver at start-up: %v; for %d issuances: POST %d, GET %d, LIST %d, DELETE %d, other %d",
		atStart, volumes, end["POST"]-atStart["POST"], end["GET"]-atStart["GET"], end["LIST"]-atStart["LIST"], end["DELETE"]-atStart["DELETE"],
		end["PUT"]+end["PATCH"]-atStart["PUT"]-atStart["PATCH"])
	// The informer's initial list is one LIST, or one streaming WATCH (WatchList), plus its WATCH.
	if atStart["LIST"]+atStart["WATCH"] > 2 || atStart["GET"] != 0 {
		t.Errorf("start-up: %v, want at most one LIST and one WATCH", atStart)
	}
	if got := end["POST"] - atStart["POST"]; got != volumes {
		t.Errorf("%d creates for %d issuances", got, volumes)
	}
	if got := end["GET"] + end["LIST"] - atStart["GET"] - atStart["LIST"]; got != 0 {
		t.Errorf("%d GET/LIST calls during issuance; reads must come from the informer", got)
	}
}
