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
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/cert-manager/csi-lib/approval"
	"github.com/cert-manager/csi-lib/approval/podspec"
	"github.com/cert-manager/csi-lib/examples/approver/controller"
	"github.com/cert-manager/csi-lib/examples/csi-driver/plugin"
	"github.com/cert-manager/csi-lib/internal/api"
	"github.com/cert-manager/csi-lib/internal/api/util"
	"github.com/cert-manager/csi-lib/manager"
	"github.com/cert-manager/csi-lib/test/testkit"
)

// approverNamespace holds the approver measurement's pods and requests (the fleet's signer
// watches its own namespace alone).
const approverNamespace = "approver-bench"

// approverRun is one configuration of the example approver the measurement runs.
type approverRun struct {
	name     string
	podCache bool
	qps      float32 // the clients' limit; negative: none
	burst    int
}

// approverResult is what deciding the pending requests cost, in one configuration.
type approverResult struct {
	run       approverRun
	requests  int
	startup   time.Duration // Run called -> first decision (the informers' caches filled)
	deciding  time.Duration // first decision -> last
	calls     map[string]int
	cpu       time.Duration // this process's CPU time over the run (the approver, and the bench's polls)
	approved  int
	decisions int
}

// countingTransport counts a client's requests by verb (GET by name, LIST, WATCH, PUT, ...).
type countingTransport struct {
	next  http.RoundTripper
	mu    sync.Mutex
	calls map[string]int
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	verb := r.Method
	if r.Method == http.MethodGet {
		switch {
		case r.URL.Query().Get("watch") == "true":
			verb = "WATCH"
		case isNamed(r.URL.Path):
			verb = "GET"
		default:
			verb = "LIST"
		}
	}
	c.mu.Lock()
	c.calls[verb]++
	c.mu.Unlock()
	return c.next.RoundTrip(r)
}

// isNamed reports whether an API path names one object: .../<resource>/<name>.
func isNamed(path string) bool {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api": // api/v1/...
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis": // apis/group/version/...
		parts = parts[3:]
	}
	if len(parts) >= 2 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	return len(parts) >= 2
}

// approverCost creates n pods, each with a volume of the example driver on one of 100 nodes, and
// n pending requests as the library makes them for those volumes; then, for each configuration,
// runs the example approver with its pod-spec rule (the example driver's generator) until it
// has decided all n, and counts what its clients asked of the apiserver. Between runs the
// requests' decisions are cleared.
func (b *bench) approverCost(ctx context.Context, n int, runs []approverRun) ([]*approverResult, error) {
	if _, err := b.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: approverNamespace}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if _, err := b.kube.CoreV1().ServiceAccounts(approverNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "app"}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	cfg := controller.DefaultConfig()
	generate := plugin.RequestFor(cfg.DriverIssuer)
	names := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 32)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			name, err := b.pendingRequest(ctx, i, generate)
			names[i] = name
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	rules, err := cfg.PodRules()
	if err != nil {
		return nil, err
	}
	var results []*approverResult
	for i, r := range runs {
		if i > 0 {
			if err := b.clearDecisions(ctx, names); err != nil {
				return nil, err
			}
		}
		res, err := b.decideAll(ctx, r, rules, cfg.Issuers, n)
		if err != nil {
			return nil, err
		}
		results = append(results, res)
	}
	return results, nil
}

// pendingRequest creates pod i (node i%100, one volume of the example driver asking for its
// service name) and the request the library on its node makes for that volume.
func (b *bench) pendingRequest(ctx context.Context, i int, generate manager.GenerateRequestFunc) (string, error) {
	node := fmt.Sprintf("node-%03d", i%100)
	pod, err := b.kube.CoreV1().Pods(approverNamespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("app-%04d", i), Namespace: approverNamespace},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: "app", Containers: []corev1.Container{{Name: "app", Image: "app"}},
			Volumes: []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
				Driver: "csi.example.com", ReadOnly: ptr.To(true), VolumeAttributes: map[string]string{plugin.DNSNamesAttribute: "${POD_NAME}.${POD_NAMESPACE}.svc"},
			}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	meta := podspec.VolumesOf(pod, "csi.example.com", "")[0].Metadata
	bundle, err := generate(meta)
	if err != nil {
		return "", err
	}
	key, err := testkit.GenerateKey(meta)
	if err != nil {
		return "", err
	}
	csr, err := testkit.SignCSR(meta, key, bundle.Request)
	if err != nil {
		return "", err
	}
	req, err := b.cm.CertmanagerV1().CertificateRequests(approverNamespace).Create(ctx, &cmapi.CertificateRequest{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "req-", Namespace: approverNamespace,
			Labels: map[string]string{api.NodeIDHashLabelKey: util.HashIdentifier(node), api.VolumeIDHashLabelKey: util.HashIdentifier(meta.VolumeID)},
			Annotations: map[string]string{
				approval.NodeNameAnnotationKey: node, approval.PodNamespaceAnnotationKey: approverNamespace, approval.PodNameAnnotationKey: pod.Name,
				approval.PodUIDAnnotationKey: string(pod.UID), approval.PodServiceAccountAnnotationKey: "app",
			},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}},
		},
		Spec: cmapi.CertificateRequestSpec{Request: csr, Duration: &metav1.Duration{Duration: bundle.Duration}, IssuerRef: bundle.IssuerRef, Usages: bundle.Usages},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return req.Name, nil
}

// clearDecisions removes every request's status conditions, so that the next run decides them
// all again.
func (b *bench) clearDecisions(ctx context.Context, names []string) error {
	for _, name := range names {
		req, err := b.cm.CertmanagerV1().CertificateRequests(approverNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		req.Status = cmapi.CertificateRequestStatus{}
		if _, err := b.cm.CertmanagerV1().CertificateRequests(approverNamespace).UpdateStatus(ctx, req, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// decideAll runs the example approver in configuration r until it has decided n requests.
func (b *bench) decideAll(ctx context.Context, r approverRun, rules []approval.PodRule, issuers []cmmeta.IssuerReference, n int) (*approverResult, error) {
	counter := &countingTransport{calls: map[string]int{}}
	cfg := rest.CopyConfig(b.cfg)
	cfg.QPS, cfg.Burst = r.qps, r.burst
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { counter.next = rt; return counter })
	c, err := controller.New(controller.Options{
		CertManager: cmclient.NewForConfigOrDie(cfg), Kube: kubernetes.NewForConfigOrDie(cfg),
		Issuers: issuers, Rules: rules, PodCache: r.podCache, Log: logr.Discard(),
	})
	if err != nil {
		return nil, err
	}
	// The decisions are counted from a watch of the administrator's (its events cost this
	// process little CPU beside the approver's).
	list, err := b.cm.CertmanagerV1().CertificateRequests(approverNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	w, err := b.cm.CertmanagerV1().CertificateRequests(approverNamespace).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	cpu0 := cpuTime()
	start := time.Now()
	go func() { done <- c.Run(runCtx) }()
	var first, last time.Time
	decided, approvedN := map[string]bool{}, 0
	timeout := time.After(10 * time.Minute)
	for len(decided) < n {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				cancel()
				return nil, fmt.Errorf("%s: the watch ended", r.name)
			}
			req, isReq := ev.Object.(*cmapi.CertificateRequest)
			if !isReq || decided[req.Name] {
				continue
			}
			for _, cond := range req.Status.Conditions {
				if cond.Type == cmapi.CertificateRequestConditionApproved || cond.Type == cmapi.CertificateRequestConditionDenied {
					if first.IsZero() {
						first = time.Now()
					}
					last = time.Now()
					decided[req.Name] = true
					if cond.Type == cmapi.CertificateRequestConditionApproved {
						approvedN++
					}
				}
			}
		case <-timeout:
			cancel()
			return nil, fmt.Errorf("%s: %d of %d requests decided in 10 min", r.name, len(decided), n)
		}
	}
	cpu := cpuTime() - cpu0
	cancel()
	if err := <-done; err != nil {
		return nil, err
	}
	counter.mu.Lock()
	defer counter.mu.Unlock()
	return &approverResult{run: r, requests: n, startup: first.Sub(start), deciding: last.Sub(first), calls: counter.calls,
		cpu: cpu, approved: approvedN, decisions: len(decided)}, nil
}

// cpuTime is this process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func printApprover(results []*approverResult) {
	if len(results) == 0 {
		return
	}
	fmt.Printf("\nThe example approver (examples/approver: approval.Check and the pod-spec rule, the example driver's generator) deciding %d pending requests, one pod each on 100 nodes, 4 workers:\n", results[0].requests)
	fmt.Printf("%-44s %12s %12s %14s %22s %18s %14s\n", "configuration", "start-up", "deciding", "decisions/s", "reads/decision (GET)", "LIST+WATCH in all", "CPU/decision")
	for _, r := range results {
		reads := float64(r.calls["GET"]) / float64(r.decisions)
		lw := r.calls["LIST"] + r.calls["WATCH"]
		rate := float64(r.decisions) / r.deciding.Seconds()
		verbs := make([]string, 0, len(r.calls))
		for v := range r.calls {
			verbs = append(verbs, v)
		}
		sort.Strings(verbs)
		fmt.Printf("%-44s %12v %12v %14.0f %22.2f %18d %14v", r.run.name, r.startup.Round(time.Millisecond), r.deciding.Round(time.Millisecond), rate, reads, lw,
			(r.cpu / time.Duration(r.decisions)).Round(time.Microsecond))
		fmt.Printf("   calls:")
		for _, v := range verbs {
			fmt.Printf(" %s %d", v, r.calls[v])
		}
		fmt.Printf("; approved %d of %d\n", r.approved, r.decisions)
	}
}
