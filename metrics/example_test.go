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

package metrics_test

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cert-manager/csi-lib/metrics"
	"github.com/cert-manager/csi-lib/storage"
)

// ExampleMetrics_EnableExtendedMetrics turns on the families upstream csi-lib lacks (gate
// pending, publish to first certificate, admission waits, volumes by state) before the manager
// starts. Without it /metrics is upstream's text. In a driver the lister is the manager's
// (Manager.CertificateRequestLister) and the handler is served on the metrics address.
func ExampleMetrics_EnableExtendedMetrics() {
	registry := prometheus.NewRegistry()
	m := metrics.New("node-1", nil, registry, storage.NewMemoryFS(), nil)
	m.EnableExtendedMetrics()
	m.SetVolumeStates("node-hash", map[string]int{"issued": 3})

	families, err := registry.Gather()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, f := range families {
		if f.GetName() == "certmanager_csi_volumes" {
			for _, s := range f.GetMetric() {
				fmt.Println(s.GetLabel()[1].GetValue(), s.GetGauge().GetValue())
			}
		}
	}
	// Output:
	// expired 0
	// failing 0
	// gate_pending 0
	// issued 3
	// overdue 0
	// pending 0
}
