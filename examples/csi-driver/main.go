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
// only, as a driver author writes one (its body is the package plugin), with the flags of
// cert-manager csi-driver where it has them (--driver-name, --node-id, --data-root,
// --metrics-address), plus the registration socket through which kubelet discovers it
// (kubelet's plugin registration API, what node-driver-registrar serves in a cluster).
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
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/cert-manager/csi-lib/examples/csi-driver/plugin"
)

func main() {
	var (
		name         = flag.String("driver-name", "csi.example.com", "CSI driver name")
		nodeID       = flag.String("node-id", os.Getenv("NODE_NAME"), "node ID: the node's name (default: the NODE_NAME environment variable)")
		kubeconfig   = flag.String("kubeconfig", "", "kubeconfig of the driver's account (empty: the in-cluster configuration)")
		dataRoot     = flag.String("data-root", "", "base directory of the volumes (a tmpfs is mounted at <data-root>/inmemfs)")
		socket       = flag.String("csi-socket", "", "path of the CSI socket")
		registry     = flag.String("plugins-registry", "", "kubelet's plugins_registry directory, to register with kubelet without node-driver-registrar (empty: none, as in a DaemonSet with the registrar)")
		registration = flag.String("kubelet-registration-path", "", "the CSI socket's path as kubelet on the host sees it, sent in the registration (default: --csi-socket; set it when the driver runs in a container)")
		gateOnIP     = flag.Bool("gate-on-pod-ip", false, "readiness gate: the pod has an IP (with ContinueOnNotReady)")
		requeuePods  = flag.Bool("requeue-pods", false, "call RequeuePod when a pod changes (the gate opens at once)")
		podCond      = flag.String("pod-condition", "", "keep a pod condition of this type (manager.Options.PodCondition; empty: none)")
		metricsAddr  = flag.String("metrics-address", "", "serve /metrics on this address (host:port; empty: none)")
		issuerKind   = flag.String("issuer-kind", "ClusterIssuer", "kind of the issuer of a volume that names none ("+plugin.IssuerKindAttribute+")")
		issuerName   = flag.String("issuer-name", "csi-ca", "name of the issuer of a volume that names none ("+plugin.IssuerNameAttribute+")")
		issuerGroup  = flag.String("issuer-group", "cert-manager.io", "API group of the issuer")
		verbosity    = flag.Int("v", 2, "log verbosity")
	)
	flag.Parse()
	log := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(*verbosity)))
	klog.SetLogger(log)
	if *nodeID == "" {
		log.Error(errors.New("--node-id is empty and NODE_NAME is not set"), "no node ID")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	err := plugin.Run(ctx, log, plugin.Config{
		DriverName:              *name,
		NodeID:                  *nodeID,
		Kubeconfig:              *kubeconfig,
		DataRoot:                *dataRoot,
		CSISocket:               *socket,
		PluginsRegistry:         *registry,
		KubeletRegistrationPath: *registration,
		MetricsAddress:          *metricsAddr,
		GateOnPodIP:             *gateOnIP,
		RequeuePods:             *requeuePods,
		PodCondition:            corev1.PodConditionType(*podCond),
		Issuer:                  cmmeta.IssuerReference{Kind: *issuerKind, Name: *issuerName, Group: *issuerGroup},
	})
	if err != nil {
		log.Error(err, "driver failed")
		stop()
		os.Exit(1)
	}
}
