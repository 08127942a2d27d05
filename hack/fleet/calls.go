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
	"sort"
	"sync"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// callsNamespace holds the requests the reads by name find.
const callsNamespace = "fleet-calls"

// callCost is what one kind of call costs the apiserver, sent calls times, inFlight at once.
type callCost struct {
	name            string
	calls, inFlight int
	wall            time.Duration
	cpu             float64 // the apiserver's CPU seconds over the calls
	p50, p99        time.Duration
}

// outageCallsCost measures the two calls the manager makes by default only while the apiserver
// misbehaves: the outage probe (GET /version) and the read by name that stands in for a suspect
// watch (a list of certificaterequests selecting one name, in a namespace of `requests`
// requests), each sent `calls` times with `inFlight` at once on the charts' account, with the
// apiserver's CPU read before and after.
func (b *bench) outageCallsCost(ctx context.Context, calls, inFlight, requests int) ([]*callCost, error) {
	cfg, err := b.chartAccount(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := b.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: callsNamespace}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	for i := range requests {
		if _, err := b.cm.CertmanagerV1().CertificateRequests(callsNamespace).Create(ctx, &cmapi.CertificateRequest{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("req-%04d", i)},
			Spec: cmapi.CertificateRequestSpec{
				Request:   []byte("-----BEGIN CERTIFICATE REQUEST-----\n-----END CERTIFICATE REQUEST-----\n"),
				IssuerRef: cmmeta.IssuerReference{Name: "calls", Kind: "Issuer", Group: "cert-manager.io"},
			},
		}, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
	}
	kube := kubernetes.NewForConfigOrDie(cfg)
	cm := cmclient.NewForConfigOrDie(cfg)
	probe := &callCost{name: "outage probe: GET /version"}
	read := &callCost{name: fmt.Sprintf("read by name: list certificaterequests, fieldSelector metadata.name, in a namespace of %d requests", requests)}
	for _, c := range []struct {
		cost *callCost
		call func(i int) error
	}{
		{probe, func(int) error { return kube.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Error() }},
		{read, func(i int) error {
			list, err := cm.CertmanagerV1().CertificateRequests(callsNamespace).List(ctx, metav1.ListOptions{
				FieldSelector: fields.OneTermEqualSelector("metadata.name", fmt.Sprintf("req-%04d", i%requests)).String(),
			})
			if err == nil && len(list.Items) != 1 {
				err = fmt.Errorf("%d requests found by name, want 1", len(list.Items))
			}
			return err
		}},
	} {
		if err := b.timeCalls(ctx, c.cost, calls, inFlight, c.call); err != nil {
			return nil, fmt.Errorf("%s: %w", c.cost.name, err)
		}
	}
	return []*callCost{probe, read}, nil
}

// timeCalls sends call n times, inFlight at once, and fills in c.
func (b *bench) timeCalls(ctx context.Context, c *callCost, n, inFlight int, call func(i int) error) error {
	_, cpuBefore, err := b.reviewsAndCPU(ctx)
	if err != nil {
		return err
	}
	lat := make([]time.Duration, n)
	work := make(chan int)
	errs := make(chan error, inFlight)
	start := time.Now()
	var wg sync.WaitGroup
	for range inFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				t := time.Now()
				if err := call(i); err != nil {
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
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	c.wall = time.Since(start)
	select {
	case err := <-errs:
		return err
	default:
	}
	_, cpuAfter, err := b.reviewsAndCPU(ctx)
	if err != nil {
		return err
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	c.calls, c.inFlight, c.cpu = n, inFlight, cpuAfter-cpuBefore
	c.p50, c.p99 = lat[n/2], lat[n*99/100]
	return nil
}

func printCallCosts(costs []*callCost) {
	fmt.Printf("Calls made only while the apiserver misbehaves (the charts' account)\n")
	for _, c := range costs {
		fmt.Printf("   %s: %d calls, %d in flight: %.2fs, %.0f calls/s, apiserver CPU %.2fs (%.3f ms per call), latency p50 %s p99 %s\n",
			c.name, c.calls, c.inFlight, c.wall.Seconds(), float64(c.calls)/c.wall.Seconds(), c.cpu, c.cpu*1000/float64(c.calls),
			c.p50.Round(10*time.Microsecond), c.p99.Round(10*time.Microsecond))
	}
	fmt.Println()
}
