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
	"path/filepath"

	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"

	"github.com/cert-manager/csi-lib/examples/csi-driver/plugin"
	"github.com/cert-manager/csi-lib/manager"
)

// exampleDriver is the example driver (examples/csi-driver's package plugin, what its main
// runs) running in this process: plugin.Run until stop.
type exampleDriver struct {
	nodeID  string
	socket  string
	serving plugin.Serving
	cancel  context.CancelFunc
	done    chan error
}

// driverConfig is how the demo runs one example driver.
type driverConfig struct {
	name        string // the driver's socket, store and logs are named after it
	nodeID      string
	base        string // the store's directory, under the work directory
	requeuePods bool   // RequeuePod when a pod changes (the fork's fast path)
	v012Gate    bool   // v0.12.0's gate settings: the 1–10 s gate backoff, no gate poll
	metrics     bool   // serve /metrics at -metrics-address
	wrapStore   func(plugin.Store) plugin.Store
}

// startDriver runs the example driver with the demo's issuer, its readiness gate on the pod's
// IP, and the demo's mounts, and returns once it serves CSI.
func (d *demo) startDriver(c driverConfig) (*exampleDriver, error) {
	ctx, cancel := context.WithCancel(context.Background())
	ed := &exampleDriver{nodeID: c.nodeID, socket: filepath.Join(d.workDir, c.name+".sock"), cancel: cancel, done: make(chan error, 1)}
	serving := make(chan plugin.Serving, 1)
	cfg := plugin.Config{
		DriverName:     "csi.example.com",
		NodeID:         c.nodeID,
		Kubeconfig:     d.kubeconfig,
		DataRoot:       filepath.Join(d.workDir, c.base),
		CSISocket:      ed.socket,
		GateOnPodIP:    true,
		RequeuePods:    c.requeuePods,
		Issuer:         cmmeta.IssuerReference{Name: "demo-ca", Kind: "Issuer", Group: "cert-manager.io"},
		Mounter:        d.mounter,
		PlainDirectory: d.plain,
		OnWritten:      d.onWritten,
		TuneManager:    d.backoffs(c.v012Gate),
		WrapStore:      c.wrapStore,
		OnServing:      func(s plugin.Serving) { serving <- s },
	}
	if c.metrics {
		cfg.MetricsAddress = d.o.metricsAddr
	}
	go func() { ed.done <- plugin.Run(ctx, d.log.WithName(c.name), cfg) }()
	select {
	case s := <-serving:
		ed.serving = s
		return ed, nil
	case err := <-ed.done:
		cancel()
		return nil, err
	}
}

// v012GateLabel names story 1's baseline: this library's code with upstream v0.12.0's gate
// settings, not upstream's code.
const v012GateLabel = "v0.12.0's gate settings (1–10 s backoff, no poll, no RequeuePod)"

// backoffs is the demo's TuneManager: the issuance backoff from -issue-backoff, so story 4 fits
// in a demo; or, with v012Gate, upstream v0.12.0's settings: the library's default gate backoff
// (1 s doubling to 10 s, which is v0.12.0's), no gate poll (the library's default: v0.12.0 has
// none) and the library's default issuance backoff (30 s, v0.12.0's). No RequeuePod is the driverConfig's requeuePods.
func (d *demo) backoffs(v012Gate bool) func(*manager.Options) {
	return func(o *manager.Options) {
		if v012Gate {
			gate := manager.DefaultGateBackoff()
			o.GateBackoffConfig = &gate
			return
		}
		issue := manager.DefaultRenewalBackoff()
		issue.Duration = d.o.issueBackoff
		o.RenewalBackoffConfig = &issue
	}
}

// metricsURL is where the driver serves /metrics.
func (ed *exampleDriver) metricsURL() string {
	return "http://" + ed.serving.MetricsAddress.String() + "/metrics"
}

// stop ends plugin.Run and waits for it: the manager stops first, so a publish in flight fails
// at once, then the CSI server.
func (ed *exampleDriver) stop() {
	ed.cancel()
	<-ed.done
}
