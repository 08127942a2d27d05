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

package manager

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/test/testkit"
)

// chartEnv is a manager whose own client holds the given verbs on certificaterequests (the
// charts' by default) and whose refusals the test expects.
func chartEnv(t *testing.T, verbs []string, configure func(*Options)) (*env, *testkit.RBACClient) {
	e := newEnv(t, configure)
	e.allowRefusals = true
	rbac := testkit.WithRBAC(e.client, testkit.DriverAccount, verbs...)
	e.opts.Client = rbac
	return e, rbac
}

// TestRefusedCreateIsPermissionDenied: a create the apiserver refuses fails the attempt with
// an error matching ErrPermissionDenied that names the verb, the resource, the namespace and the
// account; it counts as an issuance error, records a PermissionDenied event, and creates nothing.
func TestRefusedCreateIsPermissionDenied(t *testing.T) {
	rec := &refRecorder{FakeRecorder: record.NewFakeRecorder(1000)}
	e, rbac := chartEnv(t, []string{"watch", "list", "delete"}, func(o *Options) { o.EventRecorder = rec })
	e.register("v1", false)
	m := e.start()
	_, err := m.ManageVolumeImmediate(context.Background(), "v1")
	if !errors.Is(err, ErrPermissionDenied) {
		t.Fatalf("error %v does not match ErrPermissionDenied", err)
	}
	for _, want := range []string{"create", "certificaterequests.cert-manager.io", `namespace "ns"`, testkit.DriverAccount} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if n := len(e.requests()); n != 0 {
		t.Errorf("%d requests exist after a refused create", n)
	}
	if n := e.counter("certmanager_csi_issue_errors_total", "v1"); n != 1 {
		t.Errorf("issue errors %v, want 1", n)
	}
	if ev := nextEvent(t, rec, EventReasonPermissionDenied); !strings.Contains(ev, "create certificaterequests.cert-manager.io") {
		t.Errorf("event %q does not say what was refused", ev)
	}
	if got := rbac.Refused(); got["create"] != 1 || len(got) != 1 {
		t.Errorf("refused calls %v, want one create", got)
	}
}

// TestPodTokenModeCreatesOnlyWithThePodsClient: in token mode the pod's account may only create
// and the driver's may not create at all; a create whose response is lost is still settled
// (read with the driver's list), one request for the issuance, nothing refused. A pod's
// refused create names the pod's account.
func TestPodTokenModeCreatesOnlyWithThePodsClient(t *testing.T) {
	var pod *testkit.RBACClient
	e, driverRBAC := chartEnv(t, []string{"watch", "list", "delete"}, func(o *Options) {
		o.ClientForMetadata = func(metadata.Metadata) (cmclient.Interface, error) { return pod, nil }
	})
	pod = testkit.WithRBAC(e.client, testkit.PodAccount, "create")
	sentName := loseCreates(e, 1, true)
	e.register("v1", false)
	e.start()
	done := e.manageInBackground("v1")
	e.issuePending()
	if err := <-done; err != nil {
		t.Fatalf("publish after a lost create response in token mode: %v", err)
	}
	if reqs := e.requests(); len(reqs) != 1 || reqs[0].Name != sentName() {
		t.Fatalf("%d requests, want only %s", len(reqs), sentName())
	}
	if driverRBAC.RefusedTotal()+pod.RefusedTotal() != 0 {
		t.Fatalf("calls beyond the charts' verbs: %v; %v", driverRBAC, pod)
	}

	pod.Revoke("create")
	e.register("v2", false)
	_, err := e.m.ManageVolumeImmediate(context.Background(), "v2")
	if !errors.Is(err, ErrPermissionDenied) || !strings.Contains(err.Error(), testkit.PodAccount) || !strings.Contains(err.Error(), "ClientForMetadata") {
		t.Fatalf("a pod's refused create: %v", err)
	}
}

// TestRefusedListStartsAndSaysSo: when the apiserver refuses the informer's list, NewManager
// still returns (it never refuses to start), each attempt fails at once with the refusal
// (matching ErrPermissionDenied, naming list), and once list is granted the informer syncs on
// its own retry and issuance works.
func TestRefusedListStartsAndSaysSo(t *testing.T) {
	e, rbac := chartEnv(t, []string{"watch", "create", "delete"}, nil)
	e.register("v1", false)
	started := make(chan *Manager, 1)
	go func() {
		m, err := NewManager(e.opts)
		if err != nil {
			t.Error(err)
		}
		started <- m
	}()
	var m *Manager
	select {
	case m = <-started:
	case <-time.After(pollTimeout):
		t.Fatal("NewManager did not return while the informer's list is refused")
	}
	if m == nil {
		t.FailNow()
	}
	e.m = m
	t.Cleanup(m.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), pollTimeout)
	defer cancel()
	_, err := m.ManageVolumeImmediate(ctx, "v1")
	if !errors.Is(err, ErrPermissionDenied) || !strings.Contains(err.Error(), "list certificaterequests.cert-manager.io in all namespaces") {
		t.Fatalf("attempt while list is refused: %v", err)
	}
	m.UnmanageVolume("v1")
	if n := len(e.requests()); n != 0 {
		t.Fatalf("%d requests created while the cache cannot sync", n)
	}
	refusedBefore := rbac.Refused()["list"]

	// The informer retries on client-go's reflector backoff (wall clock, from 800 ms): a bounded
	// poll for its sync.
	rbac.Grant("list")
	if refusedBefore > 3 {
		t.Errorf("the informer's list was refused %d times before it was granted: a tight loop", refusedBefore)
	}
	// The informer lists (a refused call never reaches the fake), then watches; the attempt
	// waits for its cache to sync.
	e.started++
	e.waitInformerLive()
	e.manageAndIssue("v1")
}

// accessServer answers SelfSubjectAccessReviews (and /version) on a loopback server, allowing
// exactly the given "resource verb" pairs.
func accessServer(t *testing.T, allowed ...string) *rest.Config {
	cfg, _ := newReviewServer(t, nil, allowed...)
	return cfg
}

// reviewServer counts the reviews it answers; with hold set, each review is answered only once
// hold is closed, or never when the caller gives up first (counted in abandoned).
type reviewServer struct {
	reviews   atomic.Int32
	abandoned atomic.Int32
	hold      chan struct{}
	received  chan struct{} // one value per review received, when hold is set
}

func newReviewServer(t *testing.T, hold chan struct{}, allowed ...string) (*rest.Config, *reviewServer) {
	allow := map[string]bool{}
	for _, a := range allowed {
		allow[a] = true
	}
	rs := &reviewServer{hold: hold, received: make(chan struct{}, 100)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/version" {
			_, _ = w.Write([]byte(`{"major":"1","minor":"36"}`))
			return
		}
		if r.Method != http.MethodPost || r.URL.Path != "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews" {
			http.NotFound(w, r)
			return
		}
		var review authorizationv1.SelfSubjectAccessReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Spec.ResourceAttributes == nil {
			http.Error(w, "bad review", http.StatusBadRequest)
			return
		}
		rs.reviews.Add(1)
		if rs.hold != nil {
			rs.received <- struct{}{}
			select {
			case <-rs.hold:
			case <-r.Context().Done():
				rs.abandoned.Add(1)
				return
			}
		}
		ra := review.Spec.ResourceAttributes
		resource := ra.Resource
		if ra.Subresource != "" {
			resource += "/" + ra.Subresource
		}
		review.Status.Allowed = ra.Namespace == "" && allow[resource+" "+ra.Verb]
		_ = json.NewEncoder(w).Encode(&review)
	}))
	t.Cleanup(srv.Close)
	return &rest.Config{Host: srv.URL}, rs
}

// waitClosed fails the test unless ch is closed within pollTimeout.
func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(pollTimeout):
		t.Fatalf("%s did not happen within %v", what, pollTimeout)
	}
}

// TestStartUpCheckNeverHoldsNewManager: NewManager returns, and volumes are managed, while the
// apiserver has not answered the access check; Stop ends the check's request.
func TestStartUpCheckNeverHoldsNewManager(t *testing.T) {
	hold := make(chan struct{})
	defer close(hold)
	cfg, rs := newReviewServer(t, hold)
	e, rbac := chartEnv(t, testkit.ChartVerbs, nil)
	e.opts.Client = accessClient{RBACClient: rbac, discovery: discovery.NewDiscoveryClientForConfigOrDie(cfg)}
	e.register("v1", false)
	m := e.start()
	select {
	case <-rs.received:
	case <-time.After(pollTimeout):
		t.Fatal("the access check never asked")
	}
	if ended := append(e.logged("Checked the driver's permissions at start"), e.logged("Cannot check the driver's permissions at start (SelfSubjectAccessReview); they are not checked")...); len(ended) != 0 {
		t.Fatalf("the access check ended without an answer: %v", ended)
	}
	e.manageAndIssue("v1") // served while the check waits
	stopped := make(chan struct{})
	go func() { m.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(pollTimeout / 2): // the check's own bound is 10 s
		t.Fatal("Stop waited for the apiserver's answer to the access check")
	}
	e.poll("the apiserver to see the check's request given up at Stop", func() bool { return rs.abandoned.Load() == 1 })
	if n := rs.reviews.Load(); n != 1 {
		t.Fatalf("%d reviews sent, want 1: the check went on after its first question was not answered", n)
	}
}

// accessClient is a cert-manager client whose discovery (and so the start-up access check) goes
// to cfg's server, and everything else to client.
type accessClient struct {
	*testkit.RBACClient
	discovery discovery.DiscoveryInterface
}

func (c accessClient) Discovery() discovery.DiscoveryInterface { return c.discovery }

// TestStartUpNamesEachMissingRule: at start the manager asks the apiserver whether its account
// holds each permission its options need, and logs one error line per rule with a verb missing,
// in the form pasted into a ClusterRole; it starts all the same.
func TestStartUpNamesEachMissingRule(t *testing.T) {
	cfg := accessServer(t,
		"certificaterequests watch", "certificaterequests create", "certificaterequests delete",
		"events create", "pods get")
	lines := &testkit.LogLines{}
	log := lines.LoggerV(1)
	kube := fake.NewClientset()
	e, rbac := chartEnv(t, testkit.ChartVerbs, func(o *Options) {
		o.Log = &log
		o.EventRecorder = record.NewFakeRecorder(1000)
		o.PodCondition = &PodCondition{Type: "example.com/certificates", Client: kube.CoreV1()}
	})
	e.opts.Client = accessClient{RBACClient: rbac, discovery: discovery.NewDiscoveryClientForConfigOrDie(cfg)}
	e.start()
	waitCheckEnded(t, lines)

	got := lines.Matching("add this rule to its ClusterRole")
	want := []string{
		`"rule"="- {apiGroups: ['cert-manager.io'], resources: ['certificaterequests'], verbs: ['list']}" "needed_for"="the manager"`,
		`"rule"="- {apiGroups: [''], resources: ['events'], verbs: ['patch']}" "needed_for"="Options.EventRecorder"`,
		`"rule"="- {apiGroups: [''], resources: ['pods/status'], verbs: ['patch']}" "needed_for"="Options.PodCondition"`,
	}
	if len(got) != len(want) {
		t.Fatalf("%d lines naming a missing rule, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.Contains(got[i], want[i]) {
			t.Errorf("line %d:\n%s\nwant it to contain\n%s", i, got[i], want[i])
		}
	}
	expectCheckEnded(t, lines, `"rules"=4 "rules_lacking"=3`)
}

// waitCheckEnded waits (bounded) until the access check has logged its end.
func waitCheckEnded(t *testing.T, lines *testkit.LogLines) {
	t.Helper()
	if !pollFor(func() bool { return len(lines.Matching("Checked the driver's permissions at start")) > 0 }) {
		t.Fatal("the access check did not log its end")
	}
}

// expectCheckEnded asserts that the access check logged its end once, with the counts given.
func expectCheckEnded(t *testing.T, lines *testkit.LogLines, counts string) {
	t.Helper()
	ended := lines.Matching("Checked the driver's permissions at start")
	if len(ended) != 1 || !strings.Contains(ended[0], counts) {
		t.Errorf("the check's end, logged %d times: %v; want once, with %s", len(ended), ended, counts)
	}
}

// TestStartUpCheckIsQuietWhenEverythingIsGranted: with every permission held, no line names a
// missing rule; in token mode (ClientForMetadata set) create is not asked for the driver.
func TestStartUpCheckIsQuietWhenEverythingIsGranted(t *testing.T) {
	cfg, rs := newReviewServer(t, nil, "certificaterequests watch", "certificaterequests list", "certificaterequests delete")
	lines := &testkit.LogLines{}
	log := lines.LoggerV(1)
	e, rbac := chartEnv(t, testkit.ChartVerbs, func(o *Options) {
		o.Log = &log
		client := o.Client
		o.ClientForMetadata = func(metadata.Metadata) (cmclient.Interface, error) { return client, nil }
	})
	e.opts.Client = accessClient{RBACClient: rbac, discovery: discovery.NewDiscoveryClientForConfigOrDie(cfg)}
	e.start()
	waitCheckEnded(t, lines)
	if n := rs.reviews.Load(); n != 3 {
		t.Fatalf("%d reviews sent, want 3 (list, watch, delete: one per verb)", n)
	}
	if got := lines.Matching("add this rule"); len(got) != 0 {
		t.Fatalf("lines naming a missing rule with everything granted:\n%s", strings.Join(got, "\n"))
	}
	if got := lines.Matching("Cannot check"); len(got) != 0 {
		t.Fatalf("the check did not run: %s", got)
	}
	expectCheckEnded(t, lines, `"rules"=1 "rules_lacking"=0`)
}

// TestRefusedSettlingReadIsPermissionDenied: a create lost before it reached the apiserver must
// be settled by reading past the cache; when the apiserver refuses that list, the attempt fails
// with the refusal (naming list), not with the lost answer, and the request stays held for the
// next attempt.
func TestRefusedSettlingReadIsPermissionDenied(t *testing.T) {
	e, rbac := chartEnv(t, testkit.ChartVerbs, nil)
	sentName := loseCreates(e, 1, false)
	e.register("v1", false)
	m := e.start()
	rbac.Revoke("list")
	ctx, cancel := context.WithTimeout(context.Background(), pollTimeout)
	defer cancel()
	_, err := m.ManageVolumeImmediate(ctx, "v1")
	if !errors.Is(err, ErrPermissionDenied) || !strings.Contains(err.Error(), `list certificaterequests.cert-manager.io in namespace "ns"`) {
		t.Fatalf("attempt whose settling read is refused: %v", err)
	}
	if reqKey, ok := e.persistedKey("v1"); !ok || reqKey != "ns/"+sentName() {
		t.Fatalf("the request whose create's outcome is unknown is no longer held (%q held)", reqKey)
	}
	// Once list is granted again, the next attempt settles that request (it creates it again
	// under its name) and waits for it.
	m.UnmanageVolume("v1")
	rbac.Grant("list")
	e.manageAndIssue("v1")
	if reqs := e.requests(); len(reqs) != 1 || reqs[0].Name != sentName() {
		t.Fatalf("%d requests, want only %s", len(reqs), sentName())
	}
}
