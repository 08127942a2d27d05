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
	"flag"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	"github.com/go-logr/logr/testr"
	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/cert-manager/csi-lib/approval"
	"github.com/cert-manager/csi-lib/examples/approver/controller"
)

// calls records the API calls of a client as "verb resource[/subresource]", and the refused ones.
type calls struct {
	next      http.RoundTripper
	mu        sync.Mutex
	made      map[string]bool
	forbidden []string
}

func (c *calls) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(r)
	call := apiCall(r)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.made[call] = true
	if r.URL.Query().Get("sendInitialEvents") == "true" {
		// An informer's list, streamed through its watch (client-go's WatchListClient): an
		// apiserver without streaming lists gets an ordinary list instead.
		c.made["list"+strings.TrimPrefix(call, "watch")] = true
	}
	if err == nil && resp.StatusCode == http.StatusForbidden {
		c.forbidden = append(c.forbidden, call)
	}
	return resp, err
}

// apiCall names a request to the API as RBAC does: its verb and resource (and subresource).
func apiCall(r *http.Request) string {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:] // api/v1
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:] // apis/group/version
	default:
		return r.Method + " " + r.URL.Path
	}
	if len(parts) >= 2 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	resource, named := parts[0], len(parts) >= 2
	if len(parts) >= 3 {
		resource += "/" + parts[2]
	}
	verb := map[string]string{http.MethodPost: "create", http.MethodPut: "update", http.MethodPatch: "patch", http.MethodDelete: "delete"}[r.Method]
	switch {
	case r.Method != http.MethodGet:
	case r.URL.Query().Get("watch") == "true":
		verb = "watch"
	case named:
		verb = "get"
	default:
		verb = "list"
	}
	return verb + " " + resource
}

// TestApproverRoleIsWhatItUses: the example approver, run as examples/deploy/approver.yaml runs
// it (its arguments, its account bound to its ClusterRole), makes exactly the API calls its role
// grants, each at least once, and none is refused; the role's signers rule is what cert-manager's
// webhook asks of an approver for its issuer.
func TestApproverRoleIsWhatItUses(t *testing.T) {
	ctx := context.Background()
	raw, err := os.ReadFile("../../examples/deploy/approver.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ns := newNamespace(t)
	var role *rbacv1.ClusterRole
	var args []string
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "ClusterRole":
			role = &rbacv1.ClusterRole{}
			err = yaml.UnmarshalStrict([]byte(doc), role)
		case "Deployment":
			var d appsv1.Deployment
			err = yaml.UnmarshalStrict([]byte(doc), &d)
			args = d.Spec.Template.Spec.Containers[0].Args
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if role == nil || args == nil {
		t.Fatal("approver.yaml has no ClusterRole or no Deployment")
	}
	// The role, bound to an account of this test's namespace.
	role.Name = ns + "-approver"
	if _, err := kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.RbacV1().ClusterRoles().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
	})
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "csi-approver"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: "csi-approver"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
	})
	tr, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "csi-approver", &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// The approver as the Deployment's arguments configure it, on the account's token.
	fs := flag.NewFlagSet("approver", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg := controller.DefaultConfig()
	controller.BindFlags(fs, &cfg)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	rules, err := cfg.PodRules()
	if err != nil {
		t.Fatal(err)
	}
	rec := &calls{made: map[string]bool{}}
	clientCfg := rest.AnonymousClientConfig(restConfig)
	clientCfg.BearerToken = tr.Status.Token
	clientCfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { rec.next = rt; return rec })
	c, err := controller.New(controller.Options{CertManager: cmclient.NewForConfigOrDie(clientCfg), Kube: kubernetes.NewForConfigOrDie(clientCfg),
		Issuers: cfg.Issuers, Rules: rules, PodCache: cfg.PodCache, Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	defer func() { cancel(); <-done }()

	// A pod of the example driver, and two requests for it: its own, and one naming another UID
	// (the cache holds the pod with its own: the approver reads it from the apiserver).
	ensureNode(t, "node-a")
	pod := podWithVolumes(t, ns, "web", "node-a", "web", corev1.PodRunning, map[string]map[string]string{"tls": nil})
	issuer := cfg.Issuers[0]
	honest := forge(t, forgery{pod: pod, volume: "tls"}, volumeOf(t, pod, "tls", t.TempDir()), cfg.DriverIssuer)
	otherUID := forge(t, forgery{pod: pod, volume: "tls", change: func(r *cmapi.CertificateRequest) {
		r.Annotations[approval.PodUIDAnnotationKey] = "another-uid"
		r.OwnerReferences = nil
	}}, volumeOf(t, pod, "tls", t.TempDir()), cfg.DriverIssuer)
	for _, req := range []*cmapi.CertificateRequest{honest, otherUID} {
		req.Spec.IssuerRef = issuer
		created, err := cm.CertmanagerV1().CertificateRequests(ns).Create(ctx, req, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		poll(t, "the approver to decide "+created.Name, func() bool {
			got, err := cm.CertmanagerV1().CertificateRequests(ns).Get(ctx, created.Name, metav1.GetOptions{})
			return err == nil && (decidedBy(got, cmapi.CertificateRequestConditionApproved) || decidedBy(got, cmapi.CertificateRequestConditionDenied))
		})
	}

	// What it did against what it may do.
	var granted []string
	for _, r := range role.Rules {
		for _, res := range r.Resources {
			if res == "signers" {
				continue // not a call of the approver's: cert-manager's webhook asks it (below)
			}
			for _, v := range r.Verbs {
				granted = append(granted, v+" "+res)
			}
		}
	}
	rec.mu.Lock()
	made := slices.Sorted(maps.Keys(rec.made))
	forbidden := rec.forbidden
	rec.mu.Unlock()
	if slices.Sort(granted); !slices.Equal(made, granted) || len(forbidden) > 0 {
		t.Errorf("the approver made %v, its role grants %v; refused: %v", made, granted, forbidden)
	}
	// cert-manager's webhook lets an account approve for an issuer that may approve its signer.
	signer := strings.ToLower(issuer.Kind) + "s." + issuer.Group + "/" + issuer.Name
	review, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: "system:serviceaccount:" + ns + ":csi-approver", Groups: []string{"system:serviceaccounts"},
		ResourceAttributes: &authzv1.ResourceAttributes{Group: "cert-manager.io", Resource: "signers", Verb: "approve", Name: signer},
	}}, metav1.CreateOptions{})
	if err != nil || !review.Status.Allowed {
		t.Errorf("the approver may not approve for %s: %v %+v", signer, err, review.Status)
	}
}
