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

// Command cm-controllers runs cert-manager's own controllers that sign CertificateRequests
// against a kube-apiserver, for the project's integration tests: the approver
// (certificaterequests-approver), the CA issuer (certificaterequests-issuer-ca) and the
// readiness of Issuers and ClusterIssuers (issuers, clusterissuers). It is what cert-manager's
// controller binary runs for these four, without leader election, webhook or metrics server.
//
// -approve-signer-names stands in for the cert-manager chart's approveSignerNames. In a cluster
// that value is the list of signer names in the `approve` permission on `signers` that the chart
// grants cert-manager's controller, and cert-manager's webhook refuses an approval by an account
// without that permission for the request's issuer. There is no webhook here: with the flag,
// the approver's attempt at a request whose issuer none of the names covers fails with the
// webhook's refusal instead, and is retried with the approver's backoff, as in a cluster; the
// request stays for another approver. Without it, the approver approves every request.
//
// It stops on SIGTERM or SIGINT. Usage:
//
//	cm-controllers -kubeconfig FILE [-controllers a,b] [-cluster-resource-namespace NS] [-approve-signer-names a,b]
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

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	apiutil "github.com/cert-manager/cert-manager/pkg/api/util"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmlisters "github.com/cert-manager/cert-manager/pkg/client/listers/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
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
	signerNames := flag.String("approve-signer-names", "", "comma-separated signer names the approver may approve for, as the chart's approveSignerNames: "+
		"issuers.cert-manager.io/<namespace>.<name>, clusterissuers.cert-manager.io/<name>, or either group's /* (default: every request)")
	flag.Parse()
	var approveFor []string
	if *signerNames != "" {
		approveFor = strings.Split(*signerNames, ",")
	}
	if err := run(*kubeconfig, strings.Split(*names, ","), *clusterNS, *workers, float32(*qps), *burst, approveFor); err != nil {
		fmt.Fprintln(os.Stderr, "cm-controllers:", err)
		os.Exit(1)
	}
}

func run(kubeconfig string, names []string, clusterNS string, workers int, qps float32, burst int, approveFor []string) error {
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
		var c controller.Interface
		if name == approver.ControllerName && len(approveFor) > 0 {
			c, err = controller.NewBuilder(factory, name).
				For(&scopedApprover{Controller: new(approver.Controller), signerNames: approveFor}).Complete()
		} else {
			c, err = construct(factory)
		}
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
	if len(approveFor) > 0 {
		fmt.Printf("cm-controllers: the approver approves for the signers %s only\n", strings.Join(approveFor, ", "))
	}

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

// scopedApprover is cert-manager's approver whose approvals count only for the issuers that
// signerNames cover, as cert-manager's webhook lets them count in a cluster.
type scopedApprover struct {
	*approver.Controller
	signerNames []string
	requests    cmlisters.CertificateRequestLister
}

func (a *scopedApprover) Register(ctx *controller.Context) (workqueue.TypedRateLimitingInterface[types.NamespacedName], []cache.InformerSynced, error) {
	a.requests = ctx.SharedInformerFactory.Certmanager().V1().CertificateRequests().Lister()
	return a.Controller.Register(ctx)
}

// ProcessItem refuses the approver's approval of a request whose issuer no signer name covers,
// with the text of cert-manager's webhook; the approver's backoff retries it, as in a cluster.
// Requests it would leave alone anyway (approved, denied, issued, failed, gone) go through.
func (a *scopedApprover) ProcessItem(ctx context.Context, key types.NamespacedName) error {
	req, err := a.requests.CertificateRequests(key.Namespace).Get(key.Name)
	if err != nil || apiutil.CertificateRequestIsApproved(req) || apiutil.CertificateRequestIsDenied(req) ||
		apiutil.CertificateRequestReadyReason(req) == cmapi.CertificateRequestReasonFailed ||
		apiutil.CertificateRequestReadyReason(req) == cmapi.CertificateRequestReasonIssued {
		return a.Controller.ProcessItem(ctx, key)
	}
	for _, name := range signerNamesOf(req) {
		for _, allowed := range a.signerNames {
			if name == allowed {
				return a.Controller.ProcessItem(ctx, key)
			}
		}
	}
	ref := req.Spec.IssuerRef
	return fmt.Errorf("status.conditions: Forbidden: cert-manager's approver does not have permissions to set approved/denied conditions for issuer {%s %s %s} (signer names %s, none in -approve-signer-names)",
		ref.Name, ref.Kind, ref.Group, strings.Join(signerNamesOf(req), ", "))
}

// signerNamesOf returns the names cert-manager's webhook checks `approve` on `signers` for, for
// a request: its issuer's resource and group with /*, and with the issuer's name (namespaced
// issuers: the request's namespace, a dot, the name). cert-manager's own kinds are known; for
// another group's kind the resource is taken as the kind in lower case with an s, and kinds
// beginning Cluster as cluster-scoped (the webhook asks the apiserver's discovery).
func signerNamesOf(req *cmapi.CertificateRequest) []string {
	group, kind := req.Spec.IssuerRef.Group, req.Spec.IssuerRef.Kind
	if group == "" {
		group = "cert-manager.io"
	}
	if kind == "" {
		kind = cmapi.IssuerKind
	}
	resource := strings.ToLower(kind) + "s"
	named := req.Spec.IssuerRef.Name
	if !strings.HasPrefix(kind, "Cluster") {
		named = req.Namespace + "." + named
	}
	return []string{resource + "." + group + "/*", resource + "." + group + "/" + named}
}
