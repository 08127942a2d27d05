/*
Copyright 2026 The cert-manager Authors.

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

// Command cm-controllers runs cert-manager's own controllers that sign CertificateRequests
// against a kube-apiserver, for the project's integration tests: the approver
// (certificaterequests-approver), the CA issuer (certificaterequests-issuer-ca) and the
// readiness of Issuers and ClusterIssuers (issuers, clusterissuers). It is what cert-manager's
// controller binary runs for these four, without leader election, webhook or metrics server.
//
// It stops on SIGTERM or SIGINT. Usage:
//
//	cm-controllers -kubeconfig FILE [-controllers a,b] [-cluster-resource-namespace NS]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/cert-manager/cert-manager/pkg/controller"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca" // the CA issuer's readiness checks
	logf "github.com/cert-manager/cert-manager/pkg/logs"
)

// All is every controller this command can run, and its default.
const All = "certificaterequests-approver,certificaterequests-issuer-ca,issuers,clusterissuers"

func main() {
	kubeconfig := flag.String("kubeconfig", "", "the kubeconfig file of the apiserver (required)")
	names := flag.String("controllers", All, "comma-separated controllers to run, of "+All)
	clusterNS := flag.String("cluster-resource-namespace", "cert-manager", "the namespace of ClusterIssuers' secrets")
	workers := flag.Int("workers", 5, "workers per controller")
	// cert-manager's controller defaults: client-go's own (5 per second, burst 10) would throttle
	// every story that issues for many pods at once.
	qps := flag.Float64("kube-api-qps", 20, "requests per second to the apiserver")
	burst := flag.Int("kube-api-burst", 50, "burst of requests to the apiserver")
	flag.Parse()
	if err := run(*kubeconfig, strings.Split(*names, ","), *clusterNS, *workers, float32(*qps), *burst); err != nil {
		fmt.Fprintln(os.Stderr, "cm-controllers:", err)
		os.Exit(1)
	}
}

func run(kubeconfig string, names []string, clusterNS string, workers int, qps float32, burst int) error {
	if kubeconfig == "" {
		return fmt.Errorf("-kubeconfig is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ctx = logf.NewContext(ctx, logf.Log)
	factory, err := controller.NewContextFactory(ctx, controller.ContextOptions{
		Kubeconfig:         kubeconfig,
		KubernetesAPIQPS:   qps,
		KubernetesAPIBurst: burst,
		IssuerOptions:      controller.IssuerOptions{ClusterResourceNamespace: clusterNS},
	})
	if err != nil {
		return err
	}
	var ctrls []controller.Interface
	for _, name := range names {
		construct, ok := controller.Known()[name]
		if !ok {
			return fmt.Errorf("unknown controller %q (known: %s)", name, All)
		}
		c, err := construct(factory)
		if err != nil {
			return fmt.Errorf("building %s: %w", name, err)
		}
		ctrls = append(ctrls, c)
	}
	// The controllers registered their informers on the factory's shared informer factories:
	// start them now.
	shared, err := factory.Build()
	if err != nil {
		return err
	}
	shared.SharedInformerFactory.Start(ctx.Done())
	shared.KubeSharedInformerFactory.Start(ctx.Done())
	fmt.Printf("cm-controllers: running %s\n", strings.Join(names, ", "))

	var wg sync.WaitGroup
	errs := make(chan error, len(ctrls))
	for i, c := range ctrls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Run(workers, ctx); err != nil {
				errs <- fmt.Errorf("%s: %w", names[i], err)
				stop()
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}
