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
// UID and service account it names, bound to the node it names, Pending or Running and not
// terminating (csi-lib's approval check), and the request passes the rules it is configured
// with (--rules): by default the pod-spec rule, that the request asks for what one of the pod's
// volumes of the example driver asks for, through the driver's own generator; or the SPIFFE
// rule, that its one name is the pod's SPIFFE ID. It denies it otherwise, through the status
// subresource, as cert-manager's approvers do. Run it with the issuers it serves left out of
// cert-manager's approveSignerNames (the chart's value: cert-manager's approver keeps approving
// for the others, and its approval for these is refused by cert-manager's webhook; do not turn
// cert-manager's approver off), with examples/deploy/approver.yaml's RBAC and with the admission
// policy examples/deploy/node-bound-policy.yaml. See docs/node-bound.md.
//
//	(cd examples && go run ./approver --help)   # from the repository's root; examples is a module of its own
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"syscall"

	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/cert-manager/csi-lib/examples/approver/controller"
)

func main() {
	cfg := controller.DefaultConfig()
	controller.BindFlags(flag.CommandLine, &cfg)
	verbosity := flag.Int("v", 2, "log verbosity")
	flag.Parse()
	log := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(*verbosity)))
	klog.SetLogger(log)

	rules, err := cfg.PodRules()
	if err != nil {
		log.Error(err, "the approver's rules")
		os.Exit(2)
	}
	restCfg, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		log.Error(err, "reading the kubeconfig")
		os.Exit(1)
	}
	restCfg.QPS, restCfg.Burst = float32(cfg.QPS), cfg.Burst
	c, err := controller.New(controller.Options{
		CertManager: cmclient.NewForConfigOrDie(restCfg),
		Kube:        kubernetes.NewForConfigOrDie(restCfg),
		Issuers:     cfg.Issuers,
		Rules:       rules,
		PodCache:    cfg.PodCache,
		Workers:     cfg.Workers,
		Log:         log,
	})
	if err != nil {
		log.Error(err, "setting up the approver")
		os.Exit(1)
	}
	log.Info("Rules", "rules", cfg.Rules, "driver", cfg.DriverName, "driver_issuer", cfg.DriverIssuer.Kind+"/"+cfg.DriverIssuer.Name, "spiffe_trust_domain", cfg.SPIFFETrustDomain)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := c.Run(ctx); err != nil {
		log.Error(err, "approver stopped")
		os.Exit(1)
	}
}
