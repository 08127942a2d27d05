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

// Package metrics exposes the library's Prometheus metrics: issuance counters kept by the
// manager, and a collector that describes the node's CertificateRequests and volumes on every
// scrape.
//
// New registers exactly upstream csi-lib's families, with their names, help texts and labels, so
// /metrics is upstream's text for the same events and existing dashboards and tests (which
// compare the whole output) keep working. The families upstream lacks are registered and
// recorded only after EnableExtendedMetrics: certmanager_csi_issue_gate_pending_total,
// certmanager_csi_publish_to_first_certificate_seconds,
// certmanager_csi_issuance_admission_waiting, certmanager_csi_issuance_admission_waits_total and
// the state gauge certmanager_csi_volumes (which EnableVolumeStateGauge turns on alone).
// certmanager_csi_startup_taint_removals_total is registered only by EnableStartupTaintRemovals,
// which the driver's opt-in startup taint option calls.
//
// Per-volume series outlive their volume by a retention, as upstream's never-deleted series
// do for a while: the manager deletes them (DeleteVolumeSeries) once its
// MetricSeriesRetention has passed after a NodeUnpublishVolume, or after a failed first publish
// that kubelet did not retry within it. The start-up sweep runs before any series exists in a
// new process.
//
// All methods of a nil *Metrics do nothing, so the manager can call them unconditionally.
package metrics

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	cmlisters "github.com/cert-manager/cert-manager/pkg/client/listers/certmanager/v1"

	"github.com/cert-manager/csi-lib/internal/api/util"
	"github.com/cert-manager/csi-lib/storage"
)

const namespace = "certmanager"
const subsystem = "csi"

// Metrics holds the library's metrics on one registry.
type Metrics struct {
	registry *prometheus.Registry

	issueCallCountTotal  *prometheus.CounterVec
	issueErrorCountTotal *prometheus.CounterVec
	requests             *CertificateRequestCollector

	// The families upstream lacks: registered, and recorded, only once extended is set by
	// EnableExtendedMetrics.
	extended                  atomic.Bool
	gatePendingCountTotal     *prometheus.CounterVec
	publishToFirstCertificate *prometheus.HistogramVec
	admissionWaiting          *prometheus.GaugeVec
	admissionWaitsTotal       *prometheus.CounterVec

	// volumeStates is registered, and set, only once volumeStatesOn is set by
	// EnableVolumeStateGauge (or EnableExtendedMetrics).
	volumeStatesOn atomic.Bool
	volumeStates   *prometheus.GaugeVec

	// startupTaintRemovals is registered, and counted, only once startupTaintOn is set by
	// EnableStartupTaintRemovals (which the driver's opt-in startup taint option calls).
	startupTaintOn       atomic.Bool
	startupTaintRemovals *prometheus.CounterVec
}

// VolumeStates are the states certmanager_csi_volumes counts, in the order they are printed.
// Every managed volume is in exactly one:
//   - issued: it has a certificate that is not yet overdue for renewal, and nothing is failing;
//   - pending: it has no certificate yet, and its attempts have not failed (first issuance in
//     progress, or waiting for a ContinueOnNotReady loop);
//   - gate_pending: the driver's readiness gate said "not yet" at the last attempt;
//   - failing: the last attempt failed with an issuance error (denied, failed, refused, timed
//     out), whether or not the volume still has a valid certificate;
//   - overdue: its certificate is past its renewal time by more than a quarter of the time from
//     the renewal time to expiry, and has not been renewed;
//   - expired: its certificate is past its NotAfter.
var VolumeStates = []string{"issued", "pending", "gate_pending", "failing", "overdue", "expired"}

// New registers the library's metrics on registry (a new one if nil) and returns them, for
// manager.Options.Metrics. The logger may be nil (upstream csi-lib panics): the metrics log
// nothing.
//
// metadataReader (the driver's store) and certificateRequestLister feed the
// CertificateRequestCollector, which on every scrape lists the lister's requests that carry
// this node's hash label. Either pass the lister of an informer of the driver's own on the
// node's CertificateRequests, as upstream csi-lib's metrics test does, or pass nil and hand
// the metrics the manager's own lister once NewManager has returned, with
// SetCertificateRequestLister(manager.CertificateRequestLister()): one informer on the node's
// requests, and no copy of the label's hash in the driver. Until a lister is set the
// collector emits none of its families.
func New(nodeId string, logger *logr.Logger, registry *prometheus.Registry, metadataReader storage.MetadataReader, certificateRequestLister cmlisters.CertificateRequestLister) *Metrics {
	if registry == nil {
		registry = prometheus.NewRegistry()
	}
	m := &Metrics{
		registry:             registry,
		issueCallCountTotal:  counterVec("issue_requests_total", "The number of issue() calls made by the driver.", "node", "volume"),
		issueErrorCountTotal: counterVec("issue_errors_total", "The number of errors encountered during the driver issue() calls.", "node", "volume"),
		gatePendingCountTotal: counterVec("issue_gate_pending_total",
			"The number of issue() calls that found the volume not yet ready to request (ReadyToRequest said no). Not counted as errors.", "node", "volume"),
		publishToFirstCertificate: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "publish_to_first_certificate_seconds",
			Help:    "The time from a volume being first managed (its publish) to its first certificate being written.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600},
		}, []string{"node"}),
		admissionWaiting: gaugeVec("issuance_admission_waiting",
			"The number of issuance attempts waiting for admission (MaxConcurrentIssuances or IssuanceRateLimit).", "node"),
		admissionWaitsTotal: counterVec("issuance_admission_waits_total",
			"The number of issuance attempts that had to wait for admission (MaxConcurrentIssuances or IssuanceRateLimit). Not counted as errors.", "node"),
		volumeStates: gaugeVec("volumes",
			"The number of managed volumes in each state: issued, pending, gate_pending, failing, overdue, expired.", "node", "state"),
		startupTaintRemovals: counterVec("startup_taint_removals_total",
			"The number of startup taints (<driver name>/agent-not-ready) the driver removed from its node.", "node"),
	}
	m.requests = newCertificateRequestCollector(util.HashIdentifier(nodeId), metadataReader, certificateRequestLister)
	registry.MustRegister(m.issueCallCountTotal, m.issueErrorCountTotal, m.requests)
	return m
}

// counterVec returns the counter family certmanager_csi_<name>.
func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: subsystem, Name: name, Help: help}, labels)
}

// gaugeVec returns the gauge family certmanager_csi_<name>.
func gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Subsystem: subsystem, Name: name, Help: help}, labels)
}

// SetCertificateRequestLister replaces the lister given to New: from the next scrape on, the
// collector reports lister's requests that carry this node's hash label (none when lister is
// nil). Its use is the manager's own informer, which exists only once NewManager, which takes
// these Metrics, has returned:
//
//	met := metrics.New(nodeID, &log, registry, store, nil)
//	m, err := manager.NewManager(manager.Options{Metrics: met, ...})
//	...
//	met.SetCertificateRequestLister(m.CertificateRequestLister())
//
// It is safe to call while the metrics are scraped.
func (m *Metrics) SetCertificateRequestLister(lister cmlisters.CertificateRequestLister) {
	m.requests.lister.Store(&requestLister{lister})
}

// EnableExtendedMetrics registers the families upstream csi-lib does not have, and from then on
// records them:
//   - certmanager_csi_issue_gate_pending_total{node, volume}: attempts that found the volume
//     not yet ready to request (the driver's ReadyToRequest said no); not counted as errors;
//   - certmanager_csi_publish_to_first_certificate_seconds{node}: a histogram of the time from
//     a volume's publish (its registration) to its first certificate being written;
//   - certmanager_csi_issuance_admission_waiting{node}: attempts now waiting for admission
//     (MaxConcurrentIssuances or IssuanceRateLimit);
//   - certmanager_csi_issuance_admission_waits_total{node}: attempts that had to wait for it;
//   - certmanager_csi_volumes{node, state}: the managed volumes in each of VolumeStates.
//
// Without it (the default) /metrics is exactly upstream's text for the same events. Call it
// before the manager starts; calling it again is harmless.
func (m *Metrics) EnableExtendedMetrics() {
	if m != nil && m.extended.CompareAndSwap(false, true) {
		m.registry.MustRegister(m.gatePendingCountTotal, m.publishToFirstCertificate, m.admissionWaiting, m.admissionWaitsTotal)
	}
	m.EnableVolumeStateGauge()
}

// ExtendedMetricsEnabled reports whether EnableExtendedMetrics was called.
func (m *Metrics) ExtendedMetricsEnabled() bool {
	return m != nil && m.extended.Load()
}

// EnableVolumeStateGauge registers certmanager_csi_volumes{node, state} alone: the number of
// managed volumes in each of VolumeStates (one series per state, so cardinality is bounded
// whatever the number of volumes). EnableExtendedMetrics turns it on with the other families
// upstream lacks. Calling it more than once is harmless.
func (m *Metrics) EnableVolumeStateGauge() {
	if m != nil && m.volumeStatesOn.CompareAndSwap(false, true) {
		m.registry.MustRegister(m.volumeStates)
	}
}

// VolumeStateGaugeEnabled reports whether EnableVolumeStateGauge was called.
func (m *Metrics) VolumeStateGaugeEnabled() bool {
	return m != nil && m.volumeStatesOn.Load()
}

// SetVolumeStates sets certmanager_csi_volumes for the node: every state of VolumeStates, zero
// where counts has none. It does nothing unless EnableVolumeStateGauge was called.
func (m *Metrics) SetVolumeStates(nodeNameHash string, counts map[string]int) {
	if !m.VolumeStateGaugeEnabled() {
		return
	}
	for _, state := range VolumeStates {
		m.volumeStates.WithLabelValues(nodeNameHash, state).Set(float64(counts[state]))
	}
}

// EnableStartupTaintRemovals registers certmanager_csi_startup_taint_removals_total{node}: the
// number of startup taints (<driver name>/agent-not-ready) the driver removed from its node.
// driver.Options.RemoveStartupTaint calls it when it is given these metrics; it is not part of
// EnableExtendedMetrics, and without it /metrics does not have the family. Calling it more than
// once is harmless.
func (m *Metrics) EnableStartupTaintRemovals() {
	if m != nil && m.startupTaintOn.CompareAndSwap(false, true) {
		m.registry.MustRegister(m.startupTaintRemovals)
	}
}

// AddStartupTaintRemovals adds n startup taints removed from the node (0 creates the node's
// series at zero). It does nothing unless EnableStartupTaintRemovals was called.
func (m *Metrics) AddStartupTaintRemovals(nodeNameHash string, n int) {
	if m != nil && m.startupTaintOn.Load() {
		m.startupTaintRemovals.WithLabelValues(nodeNameHash).Add(float64(n))
	}
}

// DefaultHandler serves the registry in the Prometheus text format at /metrics.
func (m *Metrics) DefaultHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{}))
	return mux
}

// Registry returns the registry the metrics are registered on.
func (m *Metrics) Registry() *prometheus.Registry { return m.registry }

// IncrementIssueCallCountTotal counts one issuance attempt for a volume.
func (m *Metrics) IncrementIssueCallCountTotal(nodeNameHash, volumeID string) {
	if m != nil {
		m.issueCallCountTotal.WithLabelValues(nodeNameHash, volumeID).Inc()
	}
}

// IncrementIssueErrorCountTotal counts one failed issuance attempt for a volume. A gate-pending
// attempt is not an error: see IncrementGatePendingCountTotal.
func (m *Metrics) IncrementIssueErrorCountTotal(nodeNameHash, volumeID string) {
	if m != nil {
		m.issueErrorCountTotal.WithLabelValues(nodeNameHash, volumeID).Inc()
	}
}

// IncrementGatePendingCountTotal counts one attempt that found the volume not yet ready to
// request. It records only after EnableExtendedMetrics, as do ObservePublishToFirstCertificate,
// SetAdmissionWaiting and IncrementAdmissionWaits.
func (m *Metrics) IncrementGatePendingCountTotal(nodeNameHash, volumeID string) {
	if m.ExtendedMetricsEnabled() {
		m.gatePendingCountTotal.WithLabelValues(nodeNameHash, volumeID).Inc()
	}
}

// ObservePublishToFirstCertificate records how long a volume waited for its first certificate.
func (m *Metrics) ObservePublishToFirstCertificate(nodeNameHash string, d time.Duration) {
	if m.ExtendedMetricsEnabled() {
		m.publishToFirstCertificate.WithLabelValues(nodeNameHash).Observe(d.Seconds())
	}
}

// SetAdmissionWaiting sets the number of issuance attempts waiting for admission.
func (m *Metrics) SetAdmissionWaiting(nodeNameHash string, n int) {
	if m.ExtendedMetricsEnabled() {
		m.admissionWaiting.WithLabelValues(nodeNameHash).Set(float64(n))
	}
}

// IncrementAdmissionWaits counts one issuance attempt that had to wait for admission.
func (m *Metrics) IncrementAdmissionWaits(nodeNameHash string) {
	if m.ExtendedMetricsEnabled() {
		m.admissionWaitsTotal.WithLabelValues(nodeNameHash).Inc()
	}
}

// DeleteVolumeSeries deletes the volume's per-volume series (issue requests, issue errors, gate
// pending), so a long-lived node does not keep series for pods long gone. Call it only when the
// volume is gone for good.
func (m *Metrics) DeleteVolumeSeries(nodeNameHash, volumeID string) {
	if m == nil {
		return
	}
	for _, v := range []*prometheus.CounterVec{m.issueCallCountTotal, m.issueErrorCountTotal, m.gatePendingCountTotal} {
		v.DeleteLabelValues(nodeNameHash, volumeID)
	}
}
