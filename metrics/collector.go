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

package metrics

import (
	"errors"
	"sync/atomic"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	cmlisters "github.com/cert-manager/cert-manager/pkg/client/listers/certmanager/v1"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/cert-manager/csi-lib/internal/api"
	"github.com/cert-manager/csi-lib/internal/api/util"
	"github.com/cert-manager/csi-lib/internal/certs"
	"github.com/cert-manager/csi-lib/storage"
)

var (
	requestLabels = []string{"name", "namespace", "issuer_name", "issuer_kind", "issuer_group"}

	readyStatusDesc = prometheus.NewDesc(prometheus.BuildFQName(namespace, subsystem, "certificate_request_ready_status"),
		"The ready status of the certificate request.",
		[]string{"name", "namespace", "condition", "issuer_name", "issuer_kind", "issuer_group"}, nil)
	expirationDesc = prometheus.NewDesc(prometheus.BuildFQName(namespace, subsystem, "certificate_request_expiration_timestamp_seconds"),
		"The timestamp after which the certificate request expires, expressed in Unix Epoch Time.", requestLabels, nil)
	renewalDesc = prometheus.NewDesc(prometheus.BuildFQName(namespace, subsystem, "certificate_request_renewal_timestamp_seconds"),
		"The timestamp after which the certificate request should be renewed, expressed in Unix Epoch Time.", requestLabels, nil)
	volumeCountDesc = prometheus.NewDesc(prometheus.BuildFQName(namespace, subsystem, "managed_volume_count"),
		"The number of managed volumes by the csi driver.", []string{"node"}, nil)
	requestCountDesc = prometheus.NewDesc(prometheus.BuildFQName(namespace, subsystem, "managed_certificate_request_count"),
		"The number of managed certificate requests by the csi driver.", []string{"node"}, nil)

	readyConditions = []cmmeta.ConditionStatus{cmmeta.ConditionTrue, cmmeta.ConditionFalse, cmmeta.ConditionUnknown}
)

// CertificateRequestCollector describes, on every scrape, the node's CertificateRequests and
// volumes exactly as upstream csi-lib's collector does. It reads the informer's cache and the
// volumes' metadata; it never calls the apiserver and never modifies storage. Per scrape:
//  1. list the lister's requests labelled with the node's hash; on error emit nothing;
//  2. managed_certificate_request_count = that number;
//  3. list the volumes and read each one's metadata; on any error stop here, except that a
//     volume whose metadata is not found (mid-registration) is skipped;
//  4. managed_volume_count = the volumes whose NextIssuanceTime is set (a zero time counts);
//  5. per request: the three ready_status series, expiration_timestamp_seconds (the leaf's
//     NotAfter, 0 when the request has no certificate, no series when it does not parse) and
//     renewal_timestamp_seconds (the NextIssuanceTime of the request's volume, 0 when none).
type CertificateRequestCollector struct {
	nodeNameHash   string
	metadataReader storage.MetadataReader
	// lister is read on every scrape and may be replaced (SetCertificateRequestLister) while
	// scrapes run.
	lister atomic.Pointer[requestLister]
}

// requestLister boxes a lister, which may be nil, for an atomic pointer.
type requestLister struct {
	cmlisters.CertificateRequestLister
}

// NewCertificateRequestCollector returns the collector for the node whose ID hashes to
// nodeNameHash: the value of the label csi.cert-manager.io/node-id-hash on the node's
// requests, the FNV-1 32-bit hash of the node ID as a decimal string passed through
// k8s.io/apimachinery's rand.SafeEncodeString. A nil lister emits nothing.
func NewCertificateRequestCollector(nodeNameHash string, metadataReader storage.MetadataReader, lister cmlisters.CertificateRequestLister) prometheus.Collector {
	return newCertificateRequestCollector(nodeNameHash, metadataReader, lister)
}

func newCertificateRequestCollector(nodeNameHash string, metadataReader storage.MetadataReader, lister cmlisters.CertificateRequestLister) *CertificateRequestCollector {
	c := &CertificateRequestCollector{nodeNameHash: nodeNameHash, metadataReader: metadataReader}
	c.lister.Store(&requestLister{lister})
	return c
}

// Describe implements prometheus.Collector.
func (c *CertificateRequestCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{readyStatusDesc, expirationDesc, renewalDesc, volumeCountDesc, requestCountDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *CertificateRequestCollector) Collect(ch chan<- prometheus.Metric) {
	node := c.nodeNameHash
	lister := c.lister.Load().CertificateRequestLister
	if lister == nil {
		return
	}
	// Step 1.
	reqs, err := lister.List(labels.SelectorFromSet(labels.Set{api.NodeIDHashLabelKey: node}))
	if err != nil {
		return
	}
	// Step 2.
	ch <- prometheus.MustNewConstMetric(requestCountDesc, prometheus.GaugeValue, float64(len(reqs)), node)

	// Step 3.
	nextIssuance, ok := c.nextIssuanceTimes()
	if !ok {
		return
	}
	// Step 4.
	ch <- prometheus.MustNewConstMetric(volumeCountDesc, prometheus.GaugeValue, float64(len(nextIssuance)), node)

	// Step 5.
	for _, req := range reqs {
		ref := req.Spec.IssuerRef
		lv := []string{req.Name, req.Namespace, ref.Name, ref.Kind, ref.Group}
		status := readyStatus(req)
		for _, cond := range readyConditions {
			v := 0.0
			if cond == status {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(readyStatusDesc, prometheus.GaugeValue, v,
				req.Name, req.Namespace, string(cond), ref.Name, ref.Kind, ref.Group)
		}
		if req.Status.Certificate == nil {
			ch <- prometheus.MustNewConstMetric(expirationDesc, prometheus.GaugeValue, 0, lv...)
		} else if leaf, err := certs.ParseLeaf(req.Status.Certificate); err == nil {
			ch <- prometheus.MustNewConstMetric(expirationDesc, prometheus.GaugeValue, float64(leaf.NotAfter.Unix()), lv...)
		}
		renewal := 0.0
		if t, ok := nextIssuance[req.Labels[api.VolumeIDHashLabelKey]]; ok {
			renewal = float64(t.Unix())
		}
		ch <- prometheus.MustNewConstMetric(renewalDesc, prometheus.GaugeValue, renewal, lv...)
	}
}

// nextIssuanceTimes returns the NextIssuanceTime of every volume that has one, by volume-ID
// hash. It reports false if the volumes cannot be listed or a metadata read fails for any
// reason but "not found".
func (c *CertificateRequestCollector) nextIssuanceTimes() (map[string]time.Time, bool) {
	out := map[string]time.Time{}
	if c.metadataReader == nil {
		return out, true
	}
	ids, err := c.metadataReader.ListVolumes()
	if err != nil {
		return nil, false
	}
	for _, id := range ids {
		meta, err := c.metadataReader.ReadMetadata(id)
		if errors.Is(err, storage.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, false
		}
		if meta.NextIssuanceTime != nil {
			out[util.HashIdentifier(id)] = *meta.NextIssuanceTime
		}
	}
	return out, true
}

// readyStatus returns the status of the request's first Ready condition, Unknown without one.
// A status other than True, False or Unknown matches none of the three series.
func readyStatus(req *cmapi.CertificateRequest) cmmeta.ConditionStatus {
	for _, cond := range req.Status.Conditions {
		if cond.Type == cmapi.CertificateRequestConditionReady {
			return cond.Status
		}
	}
	return cmmeta.ConditionUnknown
}
