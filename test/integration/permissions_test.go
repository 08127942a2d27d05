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
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"github.com/cert-manager/csi-lib/manager"
	tokenutil "github.com/cert-manager/csi-lib/manager/util"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/test/testkit"
	"github.com/cert-manager/csi-lib/test/testkit/faults"
)

// The csi-driver chart's rule on CertificateRequests, as csi-driver-spiffe's: no get.
func chartRule(verbs ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: []string{"cert-manager.io"}, Resources: []string{"certificaterequests"}, Verbs: verbs}
}

var chartVerbs = []string{"watch", "create", "delete", "list"}

// answers counts what the apiserver answers one client: calls by verb, and 403 Forbidden
// answers.
type answers struct {
	next http.RoundTripper
	mu   sync.Mutex
	verb map[string]int
	// forbidden lists the refused calls, "VERB path".
	forbidden []string
	// namedLists counts lists that select one name (a read by name).
	namedLists int
}

func (a *answers) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := a.next.RoundTrip(r)
	verb := r.Method
	if r.Method == http.MethodGet && r.URL.Query().Get("watch") == "true" {
		verb = "WATCH"
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.verb[verb]++
	if strings.Contains(r.URL.Query().Get("fieldSelector"), "metadata.name=") {
		a.namedLists++
	}
	if err == nil && resp.StatusCode == http.StatusForbidden {
		a.forbidden = append(a.forbidden, r.Method+" "+r.URL.Path)
	}
	return resp, err
}

func (a *answers) snapshot() (forbidden []string, namedLists int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.forbidden...), a.namedLists
}

// accountClient is a cert-manager client authenticated as the service account ns/sa with a token
// of it, its answers counted, and its create faults injected through the returned transport.
func accountClient(t *testing.T, ns, sa string) (cmclient.Interface, *answers, **faults.Transport) {
	t.Helper()
	cfg := rest.AnonymousClientConfig(restConfig)
	cfg.BearerToken = serviceAccountToken(t, ns, sa)
	return clientWithFaults(cfg)
}

func clientWithFaults(cfg *rest.Config) (cmclient.Interface, *answers, **faults.Transport) {
	a := &answers{verb: map[string]int{}}
	ft := new(*faults.Transport)
	wrap := faults.Wrap(26, ft)
	cfg.WrapTransport = func(base http.RoundTripper) http.RoundTripper {
		a.next = base
		return wrap(a)
	}
	return cmclient.NewForConfigOrDie(cfg), a, ft
}

// waitAllowed waits until the apiserver's authorizer lets user use verb on CertificateRequests
// in ns (RBAC changes reach it asynchronously).
func waitAllowed(t *testing.T, user, ns string, verbs ...string) {
	t.Helper()
	for _, verb := range verbs {
		poll(t, fmt.Sprintf("the authorizer to let %s %s", user, verb), func() bool {
			sar, err := kube.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
				User: user, ResourceAttributes: &authzv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: "cert-manager.io", Resource: "certificaterequests"},
			}}, metav1.CreateOptions{})
			return err == nil && sar.Status.Allowed
		})
	}
}

func serviceAccountUser(ns, sa string) string { return "system:serviceaccount:" + ns + ":" + sa }

// TestChartRBACSettlesLostCreates: the driver runs as a service account bound to a ClusterRole
// with exactly the csi-driver chart's rule (watch, create, delete, list; no get), cert-manager's
// controllers sign, and the first create of every request loses its response after the
// apiserver created it. With the informer in step, and with its watches down (so that settling
// and the wait read past the cache, by a list selecting the name), every publish succeeds with a
// verified chain, one request per volume, and the apiserver refuses nothing.
func TestChartRBACSettlesLostCreates(t *testing.T) {
	ns := newNamespace(t)
	startCertManager(t)
	ca := readyCAIssuer(t, ns)
	allow(t, ns, "csi-driver", false, chartRule(chartVerbs...))
	waitAllowed(t, serviceAccountUser(ns, "csi-driver"), ns, chartVerbs...)
	client, seen, ft := accountClient(t, ns, "csi-driver")
	n := startNode(t, nodeConfig{baseDir: t.TempDir(), namespace: ns, managerOpts: func(o *manager.Options) { o.Client = client }})
	(*ft).Set(faults.Settings{FirstCreateLost: true, Resource: "certificaterequests"})

	for i, watchesDown := range []bool{false, false, true, true} {
		(*ft).WatchesDown(watchesDown)
		pod := newPod(t, ns, fmt.Sprintf("app-%d", i))
		id := fmt.Sprintf("csi-chart-%d", i)
		if _, err := n.client.NodePublishVolume(ctxTimeout(t, pollTimeout), publishRequest(t, pod, id)); err != nil {
			t.Fatalf("publish %s (watches down: %v): %v", id, watchesDown, err)
		}
		verifyVolume(t, n, id, ca, time.Now())
		requestOfVolume(t, ns, id) // exactly one
	}
	(*ft).WatchesDown(false)
	forbidden, named := seen.snapshot()
	if len(forbidden) != 0 {
		t.Errorf("the apiserver refused the driver's calls: %v", forbidden)
	}
	if lost := (*ft).Counts().LostAfter; lost < 4 {
		t.Errorf("%d create responses lost, want one per volume", lost)
	}
	if named == 0 {
		t.Error("no read by name: the watches-down publishes did not read past the cache")
	}
	t.Logf("4 volumes, %d lost create responses, %d reads by name (a list selecting the name), calls %v, 0 refused",
		(*ft).Counts().LostAfter, named, seen.verb)
}

// TestPodTokenModeUnderTheChartsRBAC: in token mode each pod's account may only create
// CertificateRequests (its Role), and the driver's may watch, delete and list them: the create,
// with its response lost, is settled by the driver's list, cert-manager signs, and nothing is
// refused. A pod whose account may not create gets PermissionDenied naming that account.
func TestPodTokenModeUnderTheChartsRBAC(t *testing.T) {
	ns := newNamespace(t)
	startCertManager(t)
	ca := readyCAIssuer(t, ns)
	allow(t, ns, "csi-driver", false, chartRule("watch", "delete", "list"))
	allow(t, ns, "app", true, chartRule("create"))
	waitAllowed(t, serviceAccountUser(ns, "csi-driver"), ns, "watch", "delete", "list")
	waitAllowed(t, serviceAccountUser(ns, "app"), ns, "create")
	driverClient, driverSeen, _ := accountClient(t, ns, "csi-driver")
	// One client per token, each losing the response of its first create of every name.
	type podClient struct {
		client cmclient.Interface
		seen   *answers
		ft     **faults.Transport
	}
	var mu sync.Mutex
	podClients := map[string]*podClient{}
	n := startNode(t, nodeConfig{baseDir: t.TempDir(), namespace: ns, managerOpts: func(o *manager.Options) {
		o.Client = driverClient
		o.ClientForMetadata = func(meta metadata.Metadata) (cmclient.Interface, error) {
			token, err := tokenutil.EmptyAudienceTokenFromMetadata(meta)
			if err != nil {
				return nil, err
			}
			mu.Lock()
			defer mu.Unlock()
			if c := podClients[token]; c != nil {
				return c.client, nil
			}
			cfg := rest.AnonymousClientConfig(restConfig)
			cfg.BearerToken = token
			c := &podClient{}
			c.client, c.seen, c.ft = clientWithFaults(cfg)
			(*c.ft).Set(faults.Settings{FirstCreateLost: true, Resource: "certificaterequests"})
			podClients[token] = c
			return c.client, nil
		}
	}})

	pod := newPod(t, ns, "app")
	req := publishRequest(t, pod, "csi-token-chart")
	appToken := serviceAccountToken(t, ns, "app")
	withPodToken(t, req, appToken)
	if _, err := n.client.NodePublishVolume(ctxTimeout(t, pollTimeout), req); err != nil {
		t.Fatalf("publish in token mode: %v", err)
	}
	verifyVolume(t, n, "csi-token-chart", ca, time.Now())
	requestOfVolume(t, ns, "csi-token-chart")
	mu.Lock()
	app := podClients[appToken]
	mu.Unlock()
	lost := (*app.ft).Counts().LostAfter
	podForbidden, _ := app.seen.snapshot()
	driverForbidden, named := driverSeen.snapshot()
	if lost == 0 {
		t.Error("the pod's create lost no response")
	}
	if len(driverForbidden)+len(podForbidden) != 0 {
		t.Errorf("refused calls: driver %v, pod %v", driverForbidden, podForbidden)
	}
	t.Logf("token mode: %d lost create responses settled with %d reads by name, 0 refused", lost, named)

	// An account without create: PermissionDenied naming it, and nothing left behind.
	other := newPod(t, ns, "other")
	refused := publishRequest(t, other, "csi-token-refused")
	withPodToken(t, refused, serviceAccountToken(t, ns, "no-rights"))
	_, err := n.client.NodePublishVolume(ctxTimeout(t, pollTimeout), refused)
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), serviceAccountUser(ns, "no-rights")) ||
		!strings.Contains(err.Error(), "create certificaterequests.cert-manager.io") {
		t.Fatalf("publish with an account that may not create: %v", err)
	}
	if _, err := n.store.ReadMetadata("csi-token-refused"); err == nil {
		t.Fatal("a refused first publish left its volume behind")
	}
}

// TestListRemovedSaysWhatToFix: with list removed from the driver's rule, the manager still
// starts and logs the rule to add in ClusterRole form. Every create is lost before it reaches the
// apiserver, so that settling it must read past the cache: the publish answers PermissionDenied
// naming list, the resource and the account, records a PermissionDenied Event on the pod, and
// leaves nothing behind. (client-go's informer may sync without list, through a watch that
// streams the initial list, which the apiserver authorises as watch; where it lists, the
// attempt fails on its refused sync instead, with the same answer.)
func TestListRemovedSaysWhatToFix(t *testing.T) {
	ns := newNamespace(t)
	allow(t, ns, "csi-driver", false, chartRule("watch", "create", "delete"))
	waitAllowed(t, serviceAccountUser(ns, "csi-driver"), ns, "watch", "create", "delete")
	client, _, ft := accountClient(t, ns, "csi-driver")
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	t.Cleanup(broadcaster.Shutdown)
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "csi-lib-integration"})
	lines := &testkit.LogLines{}
	log := lines.Logger()
	n := startNode(t, nodeConfig{baseDir: t.TempDir(), namespace: ns, managerOpts: func(o *manager.Options) {
		o.Client = client
		o.Log = &log
		o.EventRecorder = recorder
	}})

	rule := lines.Matching("add this rule to its ClusterRole")
	if len(rule) != 2 || !strings.Contains(rule[0], `"rule"="- {apiGroups: ['cert-manager.io'], resources: ['certificaterequests'], verbs: ['list']}"`) ||
		!strings.Contains(rule[1], `"rule"="- {apiGroups: [''], resources: ['events'], verbs: ['create', 'patch']}"`) {
		t.Errorf("start-up lines naming a missing rule:\n%s", strings.Join(rule, "\n"))
	}
	(*ft).Set(faults.Settings{LostBefore: 1, Resource: "certificaterequests"})
	pod := newPod(t, ns, "app")
	_, err := n.client.NodePublishVolume(ctxTimeout(t, pollTimeout), publishRequest(t, pod, "csi-no-list"))
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "list certificaterequests.cert-manager.io") ||
		!strings.Contains(err.Error(), serviceAccountUser(ns, "csi-driver")) {
		t.Fatalf("publish without list: %v", err)
	}
	if _, err := n.store.ReadMetadata("csi-no-list"); err == nil {
		t.Fatal("a refused first publish left its volume behind")
	}
	if reqs := requestsIn(t, cm, ns); len(reqs) != 0 {
		t.Fatalf("%d requests created while the driver cannot list", len(reqs))
	}
	poll(t, "a PermissionDenied event on the pod", func() bool {
		return hasEvent(podEvents(t, pod), corev1.EventTypeWarning, manager.EventReasonPermissionDenied, "list certificaterequests.cert-manager.io")
	})
}
