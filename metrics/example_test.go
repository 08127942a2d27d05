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
	"context"
	"fmt"
	"hash/fnv"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/fake"
	cminformers "github.com/cert-manager/cert-manager/pkg/client/informers/externalversions"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/cert-manager/csi-lib/metrics"
	"github.com/cert-manager/csi-lib/storage"
)

// nodeIDHash is the value of the label csi.cert-manager.io/node-id-hash that the manager puts
// on a node's CertificateRequests: the FNV-1 32-bit hash of the node ID as a decimal string,
// passed through rand.SafeEncodeString.
func nodeIDHash(nodeID string) string {
	h := fnv.New32()
	_, _ = h.Write([]byte(nodeID))
	return rand.SafeEncodeString(fmt.Sprint(h.Sum32()))
}

// ExampleNew gives the metrics the lister of an informer of the driver's own on the node's
// CertificateRequests (the manager's informer exists only once NewManager has returned, and
// NewManager takes the metrics). The informer selects the node's requests by their node-hash
// label, so it holds only what the collector reports.
func ExampleNew() {
	const nodeID = "node-1"
	node := nodeIDHash(nodeID)
	request := func(name, nodeHash string) *cmapi.CertificateRequest {
		return &cmapi.CertificateRequest{ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "app", Labels: map[string]string{"csi.cert-manager.io/node-id-hash": nodeHash},
		}}
	}
	// cmclient.NewForConfig(restConfig) in a driver.
	client := fake.NewClientset(request("on-this-node", node), request("on-another-node", nodeIDHash("node-2")))

	factory := cminformers.NewSharedInformerFactoryWithOptions(client, 0,
		cminformers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = "csi.cert-manager.io/node-id-hash=" + node
		}))
	lister := factory.Certmanager().V1().CertificateRequests().Lister()
	registry := prometheus.NewRegistry()
	// storage.NewMemoryFS() stands for the driver's store.
	m := metrics.New(nodeID, nil, registry, storage.NewMemoryFS(), lister)
	_ = m // in a driver: manager.Options{Metrics: m, ...}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done()) // before the driver serves
	factory.WaitForCacheSync(ctx.Done())

	families, err := registry.Gather()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, f := range families {
		if f.GetName() == "certmanager_csi_managed_certificate_request_count" {
			fmt.Println(f.GetName(), f.GetMetric()[0].GetGauge().GetValue())
		}
	}
	// Output:
	// certmanager_csi_managed_certificate_request_count 1
}

// ExampleMetrics_EnableExtendedMetrics turns on the families upstream csi-lib lacks (gate
// pending, publish to first certificate, admission waits, volumes by state) before the manager
// starts. Without it /metrics is upstream's text. In a driver the lister is that of an informer
// on the node's requests (see the example of New) and the handler is served on the metrics
// address.
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
