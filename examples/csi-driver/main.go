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

// Command csi-driver is the example CSI node driver: a driver built from the library's public API
// only, as a driver author writes one (its body is the package plugin). Where cert-manager
// csi-driver has a flag for the same thing, the example's has its name: --driver-name,
// --node-id, --endpoint, --data-root, --kubeconfig and --metrics-bind-address. Its other flags are
// its own (plugin.BindFlags lists them): the readiness gate, the pod condition, the default
// issuer, and the registration socket through which kubelet discovers it (kubelet's plugin
// registration API, what node-driver-registrar serves in a cluster).
// examples/deploy holds what an operator applies to run it in a cluster.
//
//	(cd examples && go run ./csi-driver --help)   # from the repository's root; examples is a module of its own
package main

import (
	"context"
	"errors"
	"flag"
	"os"
	"os/signal"
	"syscall"

	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/cert-manager/csi-lib/examples/csi-driver/plugin"
)

func main() {
	// The defaults: a DaemonSet passes the node's name in NODE_NAME (examples/deploy), and the
	// issuer is examples/deploy's ClusterIssuer.
	cfg := plugin.Config{
		DriverName: "csi.example.com",
		NodeID:     os.Getenv("NODE_NAME"),
		Issuer:     cmmeta.IssuerReference{Kind: "ClusterIssuer", Name: "csi-ca", Group: "cert-manager.io"},
	}
	plugin.BindFlags(flag.CommandLine, &cfg)
	verbosity := flag.Int("v", 2, "log verbosity")
	flag.Parse()
	log := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(*verbosity)))
	klog.SetLogger(log)
	if cfg.NodeID == "" {
		log.Error(errors.New("--node-id is empty and NODE_NAME is not set"), "no node ID")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := plugin.Run(ctx, log, cfg); err != nil {
		log.Error(err, "driver failed")
		stop()
		os.Exit(1)
	}
}
