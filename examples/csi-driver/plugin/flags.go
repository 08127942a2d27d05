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

package plugin

import (
	"flag"
	"fmt"
	"path/filepath"
	"strings"
)

// BindFlags defines on fs the operator's flags of the example driver, one per field of cfg
// that an operator sets, each bound to that field and defaulting to its value in cfg now.
//
// Those that cert-manager csi-driver has carry its names: --driver-name, --node-id, --endpoint
// (a unix:// CSI endpoint, as csi-driver's chart passes it), --data-root, --kubeconfig and
// --metrics-bind-address. The rest are the example's own: --plugins-registry and
// --kubelet-registration-path (registering with kubelet without node-driver-registrar),
// --gate-on-pod-ip, --requeue-pods, --pod-condition, --remove-startup-taint, --issuer-kind,
// --issuer-name and --issuer-group (csi-driver takes the issuer from each volume's attributes
// only).
func BindFlags(fs *flag.FlagSet, cfg *Config) {
	fs.StringVar(&cfg.DriverName, "driver-name", cfg.DriverName, "CSI driver name")
	fs.StringVar(&cfg.NodeID, "node-id", cfg.NodeID, "node ID: the node's name")
	fs.StringVar(&cfg.Kubeconfig, "kubeconfig", cfg.Kubeconfig, "kubeconfig of the driver's account (empty: the in-cluster configuration)")
	fs.StringVar(&cfg.DataRoot, "data-root", cfg.DataRoot, "base directory of the volumes (a tmpfs is mounted at <data-root>/inmemfs)")
	fs.Var(endpointValue{&cfg.CSISocket}, "endpoint", "the CSI endpoint the driver serves on: unix:// and the socket's path (unix:///plugin/csi.sock; unix://plugin/csi.sock is the same socket)")
	fs.StringVar(&cfg.PluginsRegistry, "plugins-registry", cfg.PluginsRegistry, "kubelet's plugins_registry directory, to register with kubelet without node-driver-registrar (empty: none, as in a DaemonSet with the registrar)")
	fs.StringVar(&cfg.KubeletRegistrationPath, "kubelet-registration-path", cfg.KubeletRegistrationPath, "the CSI socket's path as kubelet on the host sees it, sent in the registration (default: --endpoint's path; set it when the driver runs in a container)")
	fs.BoolVar(&cfg.GateOnPodIP, "gate-on-pod-ip", cfg.GateOnPodIP, "readiness gate: the pod has an IP (with ContinueOnNotReady)")
	fs.BoolVar(&cfg.RequeuePods, "requeue-pods", cfg.RequeuePods, "call RequeuePod when a pod changes (the gate opens at once)")
	fs.StringVar((*string)(&cfg.PodCondition), "pod-condition", string(cfg.PodCondition), "keep a pod condition of this type (manager.Options.PodCondition; empty: none)")
	fs.BoolVar(&cfg.RemoveStartupTaint, "remove-startup-taint", cfg.RemoveStartupTaint, "remove the node's startup taint <driver-name>/agent-not-ready once kubelet has registered the driver (driver.Options.RemoveStartupTaint; its account needs examples/deploy/startup-taint)")
	fs.StringVar(&cfg.MetricsAddress, "metrics-bind-address", cfg.MetricsAddress, "serve /metrics on this address (host:port; empty: none)")
	fs.StringVar(&cfg.Issuer.Kind, "issuer-kind", cfg.Issuer.Kind, "kind of the issuer of a volume that names none ("+IssuerKindAttribute+")")
	fs.StringVar(&cfg.Issuer.Name, "issuer-name", cfg.Issuer.Name, "name of the issuer of a volume that names none ("+IssuerNameAttribute+")")
	fs.StringVar(&cfg.Issuer.Group, "issuer-group", cfg.Issuer.Group, "API group of the issuer")
}

// endpointValue is --endpoint bound to Config.CSISocket: the flag takes a CSI endpoint, as
// csi-driver's does, and the Config keeps the socket's path. The path is "/" followed by what
// comes after the scheme, as the library's driver.New reads an endpoint, so that
// "unix:///plugin/csi.sock" and "unix://plugin/csi.sock" are both /plugin/csi.sock. The example
// serves a unix socket only: kubelet is sent its path.
type endpointValue struct{ path *string }

func (v endpointValue) String() string {
	if v.path == nil || *v.path == "" {
		return ""
	}
	return "unix://" + *v.path
}

func (v endpointValue) Set(s string) error {
	const scheme = "unix://"
	if len(s) <= len(scheme) || !strings.EqualFold(s[:len(scheme)], scheme) {
		return fmt.Errorf("%q is not a unix:// endpoint with a socket's path (unix:///plugin/csi.sock)", s)
	}
	path := filepath.Clean("/" + s[len(scheme):])
	if path == "/" {
		return fmt.Errorf("%q names no socket", s)
	}
	*v.path = path
	return nil
}
