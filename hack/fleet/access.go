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
	"bufio"
	"bytes"
	"context"
	"crypto"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cert-manager/csi-lib/manager"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/storage"
	"github.com/cert-manager/csi-lib/test/testkit"
)

// accessResult is what the start-up access check of a fleet restarting at once costs the
// apiserver.
type accessResult struct {
	perNode     float64 // reviews one manager's start sends, counted by the apiserver
	nodes       int
	concurrency int
	reviews     int
	wall        time.Duration
	cpu         float64 // the apiserver's CPU seconds over the storm
	p50, p99    time.Duration
}

// accessCheckCost starts one manager on a service account bound to the charts' ClusterRole
// (watch, create, delete, list on certificaterequests) and counts, from the apiserver's
// apiserver_request_total, the SelfSubjectAccessReviews its start sends. Then nodes such
// starts at once: nodes × that many reviews of the same account and the same attributes,
// concurrency of them in flight, with the apiserver's CPU (its process_cpu_seconds_total)
// read before and after.
func (b *bench) accessCheckCost(ctx context.Context, nodes, concurrency int) (*accessResult, error) {
	cfg, err := b.chartAccount(ctx)
	if err != nil {
		return nil, err
	}
	before, _, err := b.reviewsAndCPU(ctx)
	if err != nil {
		return nil, err
	}
	log := logr.Discard()
	store := storage.NewMemoryFS()
	m, err := manager.NewManager(manager.Options{
		Client:             cmclient.NewForConfigOrDie(cfg),
		MetadataReader:     store,
		Log:                &log,
		NodeID:             "access-node",
		GeneratePrivateKey: testkit.GenerateKey,
		GenerateRequest:    generateRequest,
		SignRequest:        testkit.SignCSR,
		WriteKeypair:       testkit.KeypairWriter(store, func(metadata.Metadata, crypto.PrivateKey, []byte) {}),
	})
	if err != nil {
		return nil, err
	}
	// The check runs in the background: wait, bounded, until the apiserver has counted four
	// reviews or ten seconds have passed, then read the count.
	var perNode float64
	_ = waitFor(10*time.Second, func() bool {
		n, _, err := b.reviewsAndCPU(ctx)
		perNode = n - before
		return err == nil && perNode >= 4
	})
	m.Stop()
	if perNode == 0 {
		return nil, fmt.Errorf("the manager's start sent no SelfSubjectAccessReview")
	}

	kube := kubernetes.NewForConfigOrDie(cfg)
	verbs := []string{"create", "list", "watch", "delete"}
	total := nodes * int(perNode)
	work := make(chan int)
	lat := make([]time.Duration, total)
	errs := make(chan error, concurrency)
	_, cpuBefore, err := b.reviewsAndCPU(ctx)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				t := time.Now()
				_, err := kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
					Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
						Group: "cert-manager.io", Resource: "certificaterequests", Verb: verbs[i%len(verbs)],
					}},
				}, metav1.CreateOptions{})
				if err != nil {
					select {
					case errs <- err:
					default:
					}
					continue
				}
				lat[i] = time.Since(t)
			}
		}()
	}
	for i := 0; i < total; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	wall := time.Since(start)
	select {
	case err := <-errs:
		return nil, fmt.Errorf("a review failed: %w", err)
	default:
	}
	_, cpuAfter, err := b.reviewsAndCPU(ctx)
	if err != nil {
		return nil, err
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return &accessResult{
		perNode: perNode, nodes: nodes, concurrency: concurrency, reviews: total, wall: wall,
		cpu: cpuAfter - cpuBefore, p50: lat[total/2], p99: lat[total*99/100],
	}, nil
}

// chartAccount creates, at its first call, a service account bound to a ClusterRole with the
// charts' verbs on certificaterequests, and returns a configuration that authenticates with its
// token.
func (b *bench) chartAccount(ctx context.Context) (*rest.Config, error) {
	const name = "fleet-driver"
	if b.chartConfig != nil {
		return rest.CopyConfig(b.chartConfig), nil
	}
	if _, err := b.kube.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if _, err := b.kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"cert-manager.io"}, Resources: []string{"certificaterequests"},
			Verbs: []string{"watch", "create", "delete", "list"}}},
	}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if _, err := b.kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: namespace}},
	}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	tr, err := b.kube.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	cfg := rest.AnonymousClientConfig(b.cfg)
	cfg.BearerToken = tr.Status.Token
	cfg.QPS = -1
	b.chartConfig = cfg
	return rest.CopyConfig(cfg), nil
}

// reviewsAndCPU reads from the apiserver's /metrics the SelfSubjectAccessReviews it has served
// (apiserver_request_total) and its own CPU seconds (process_cpu_seconds_total).
func (b *bench) reviewsAndCPU(ctx context.Context) (reviews, cpu float64, err error) {
	raw, err := b.kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("reading the apiserver's /metrics: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "apiserver_request_total{") && strings.Contains(line, `resource="selfsubjectaccessreviews"`):
			reviews += lastValue(line)
		case strings.HasPrefix(line, "process_cpu_seconds_total "):
			cpu = lastValue(line)
		}
	}
	return reviews, cpu, sc.Err()
}

func lastValue(line string) float64 {
	f := strings.Fields(line)
	v, _ := strconv.ParseFloat(f[len(f)-1], 64)
	return v
}

func printAccess(r *accessResult) {
	fmt.Printf("Start-up access check (SelfSubjectAccessReview, a service account with the charts' ClusterRole)\n")
	fmt.Printf("   reviews per manager start, counted by the apiserver: %.0f\n", r.perNode)
	fmt.Printf("   %d nodes starting at once: %d reviews, %d in flight: %.2fs, %.0f reviews/s, apiserver CPU %.2fs (%.3f ms per review), latency p50 %s p99 %s\n\n",
		r.nodes, r.reviews, r.concurrency, r.wall.Seconds(), float64(r.reviews)/r.wall.Seconds(), r.cpu, r.cpu*1000/float64(r.reviews),
		r.p50.Round(10*time.Microsecond), r.p99.Round(10*time.Microsecond))
}
