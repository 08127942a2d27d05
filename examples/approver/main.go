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

// Command approver is an example CertificateRequest approver for drivers built on csi-lib that
// have none: it approves a request the library created when the pod it names exists, with the
// UID it names, bound to the node it names, and not terminating (csi-lib's approval check), and
// denies it otherwise, through the status subresource as cert-manager's approvers do. Run it
// with the issuers it serves left out of cert-manager's approveSignerNames (the chart's value:
// cert-manager's approver keeps approving for the others, and its approval for these is refused
// by cert-manager's webhook; do not turn cert-manager's approver off), with
// examples/deploy/approver.yaml's RBAC and with the admission policy
// examples/deploy/node-bound-policy.yaml. See docs/node-bound.md.
//
//	(cd examples && go run ./approver --help)   # from the repository's root; examples is a module of its own
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/cert-manager/csi-lib/approval"
	"github.com/cert-manager/csi-lib/examples/approver/controller"
)

// issuerFlags collects --issuer values: Kind/name or group/Kind/name.
type issuerFlags []cmmeta.IssuerReference

func (f *issuerFlags) String() string { return fmt.Sprint(*f) }

func (f *issuerFlags) Set(v string) error {
	parts := strings.Split(v, "/")
	switch {
	case len(parts) == 2 && parts[0] != "" && parts[1] != "":
		*f = append(*f, cmmeta.IssuerReference{Kind: parts[0], Name: parts[1]})
	case len(parts) == 3 && parts[0] != "" && parts[1] != "" && parts[2] != "":
		*f = append(*f, cmmeta.IssuerReference{Group: parts[0], Kind: parts[1], Name: parts[2]})
	default:
		return fmt.Errorf("%q: want Kind/name or group/Kind/name, for example ClusterIssuer/csi-ca", v)
	}
	return nil
}

func main() {
	var issuers issuerFlags
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the approver's account (empty: in-cluster)")
	cnIsPodName := flag.Bool("common-name-is-pod-name", false, "deny a request whose certificate request's common name is not its pod's name (the rule of examples/csi-driver)")
	workers := flag.Int("workers", 4, "requests decided in parallel")
	qps := flag.Float64("kube-api-qps", 50, "requests per second to the apiserver (each decision is a pod read and a status update)")
	burst := flag.Int("kube-api-burst", 100, "burst of requests to the apiserver")
	verbosity := flag.Int("v", 2, "log verbosity")
	flag.Var(&issuers, "issuer", "decide only requests for this issuer, as Kind/name or group/Kind/name (repeatable; none: every request csi-lib created)")
	flag.Parse()
	log := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(*verbosity)))
	klog.SetLogger(log)

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		log.Error(err, "reading the kubeconfig")
		os.Exit(1)
	}
	var rules []approval.PodRule
	if *cnIsPodName {
		rules = append(rules, controller.CommonNameIsPodName)
	}
	cfg.QPS, cfg.Burst = float32(*qps), *burst
	c, err := controller.New(controller.Options{
		CertManager: cmclient.NewForConfigOrDie(cfg),
		Kube:        kubernetes.NewForConfigOrDie(cfg),
		Issuers:     issuers,
		Rules:       rules,
		Workers:     *workers,
		Log:         log,
	})
	if err != nil {
		log.Error(err, "setting up the approver")
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := c.Run(ctx); err != nil {
		log.Error(err, "approver stopped")
		os.Exit(1)
	}
}
