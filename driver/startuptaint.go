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

package driver

import (
	"cmp"
	"math"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	typedstoragev1 "k8s.io/client-go/kubernetes/typed/storage/v1"
	"k8s.io/utils/clock"

	"github.com/cert-manager/csi-lib/internal/api/util"
	"github.com/cert-manager/csi-lib/internal/startuptaint"
	"github.com/cert-manager/csi-lib/metrics"
)

// StartupTaintSuffix follows the driver's name in the key of its startup taint:
// csi.cert-manager.io/agent-not-ready for csi.cert-manager.io.
const StartupTaintSuffix = startuptaint.Suffix

// DefaultStartupTaintWatchWindow is StartupTaintOptions.WatchWindow's default.
const DefaultStartupTaintWatchWindow = 10 * time.Minute

// DefaultStartupTaintBackoff is StartupTaintOptions.Backoff's default: 1 s, doubling with a
// jitter of 0.5, capped at 1 min.
func DefaultStartupTaintBackoff() wait.Backoff {
	return wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.5, Cap: time.Minute, Steps: math.MaxInt32}
}

// StartupTaintKey returns the key of the driver's startup taint, driverName followed by
// StartupTaintSuffix, or an error if that is not a valid taint key.
func StartupTaintKey(driverName string) (string, error) { return startuptaint.Key(driverName) }

// StartupTaintOptions turns on the removal of the driver's startup taint (Options.RemoveStartupTaint).
//
// A node that starts with the taint <DriverName>/agent-not-ready (Karpenter's startupTaints, a
// managed node group's taints), tolerated by the driver's DaemonSet and by nothing else,
// admits no pod that could mount the driver's volumes before kubelet has registered the driver.
// Once the node's CSINode object lists the driver (kubelet writes it there last, after it has
// registered the driver and asked it NodeGetInfo), the driver removes every taint of its node
// with that key, whatever its value and effect, and leaves every other taint as it is: the patch
// tests the node's taint list first, so a concurrent change by another writer makes it fail and
// the driver reads the node again. It then watches the node for WatchWindow, so that the taint
// added after the driver started (a node provisioner that is late) is removed too; the window
// ends only once the node has been seen without the taint.
//
// It runs in the background from Run: the driver serves at once, whatever the apiserver
// answers. A read, watch or patch that fails is logged with the node's name and retried on
// Backoff, never fatal. The driver's account needs get and watch on nodes and
// storage.k8s.io csinodes, and patch on nodes: examples/deploy confines the patch with an
// admission policy to removing this taint from the node its token is bound to.
type StartupTaintOptions struct {
	// Nodes gets, watches and patches the node, for example kubeClient.CoreV1(). Required.
	Nodes typedcorev1.NodesGetter
	// CSINodes gets and watches the node's CSINode, for example kubeClient.StorageV1(). Required.
	CSINodes typedstoragev1.CSINodesGetter
	// NodeName is the Kubernetes node's name. Default: Options.NodeID.
	NodeName string
	// WatchWindow is how long the node is watched for the taint after the driver is first seen
	// registered. Default: DefaultStartupTaintWatchWindow.
	WatchWindow time.Duration
	// Backoff is the wait after a failed read, watch or patch. Default:
	// DefaultStartupTaintBackoff().
	Backoff *wait.Backoff
	// Clock drives the window and the backoff. Default: the real clock.
	Clock clock.Clock
	// Metrics, if set, counts the taints removed in
	// certmanager_csi_startup_taint_removals_total{node} (node: Options.NodeID's hash, as the
	// other families), which it registers (EnableStartupTaintRemovals).
	Metrics *metrics.Metrics
}

// newStartupTaintRemover returns the remover opts ask for: nil without RemoveStartupTaint, an
// error if its options are invalid (a driver name that makes no valid taint key, a missing
// client, a negative window). It registers nothing: NewWithListener enables the metric.
func newStartupTaintRemover(log logr.Logger, opts Options) (*startuptaint.Remover, error) {
	o := opts.RemoveStartupTaint
	if o == nil {
		return nil, nil
	}
	cfg := startuptaint.Config{
		DriverName: opts.DriverName,
		NodeName:   cmp.Or(o.NodeName, opts.NodeID),
		Window:     cmp.Or(o.WatchWindow, DefaultStartupTaintWatchWindow),
		Backoff:    DefaultStartupTaintBackoff(),
		Clock:      cmp.Or[clock.Clock](o.Clock, clock.RealClock{}),
		Log:        log.WithName("startup-taint"),
	}
	if o.Backoff != nil {
		cfg.Backoff = *o.Backoff
	}
	if o.Nodes != nil {
		cfg.Nodes = o.Nodes.Nodes()
	}
	if o.CSINodes != nil {
		cfg.CSINodes = o.CSINodes.CSINodes()
	}
	if o.Metrics != nil {
		met, node := o.Metrics, util.HashIdentifier(opts.NodeID)
		cfg.Removed = func(n int) { met.AddStartupTaintRemovals(node, n) }
	}
	return startuptaint.New(cfg)
}
