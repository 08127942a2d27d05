// Package metrics exposes the library's Prometheus metrics: issuance counters kept by the
// manager, and a collector that describes the node's CertificateRequests and volumes on every
// scrape.
//
// The upstream families keep their names, help text and labels, so existing dashboards work.
// The fork adds two label vectors, certmanager_csi_issue_gate_pending_total and
// certmanager_csi_publish_to_first_certificate_seconds; like every vector they print nothing
// until observed, so a driver that never reaches the new code paths scrapes as before.
// Per-volume series are deleted by DeleteVolumeSeries when a volume is gone for good (the node
// server calls it through the manager after a successful NodeUnpublishVolume); a failed publish
// keeps them, because kubelet retries the same volume. A volume whose pod was deleted before any
// publish succeeded gets no unpublish, so its series (at most three) live until the process
// restarts. The start-up sweep runs before any series exists in a new process.
//
// All methods of a nil *Metrics do nothing, so the manager can call them unconditionally.
package metrics

import (
	"net/http"
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
	log      logr.Logger
	registry *prometheus.Registry

	issueCallCountTotal       *prometheus.CounterVec
	issueErrorCountTotal      *prometheus.CounterVec
	gatePendingCountTotal     *prometheus.CounterVec
	publishToFirstCertificate *prometheus.HistogramVec
}

// New registers the library's metrics on registry (a new one if nil) and returns them.
// metadataReader and certificateRequestLister feed the CertificateRequestCollector; the lister
// should list the node's requests (the manager's CertificateRequestLister does).
func New(nodeId string, logger *logr.Logger, registry *prometheus.Registry, metadataReader storage.MetadataReader, certificateRequestLister cmlisters.CertificateRequestLister) *Metrics {
	if registry == nil {
		registry = prometheus.NewRegistry()
	}
	log := logr.Discard()
	if logger != nil {
		log = *logger
	}
	m := &Metrics{
		log:      log.WithName("metrics"),
		registry: registry,
		issueCallCountTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "issue_requests_total",
			Help: "The number of issue() calls made by the driver.",
		}, []string{"node", "volume"}),
		issueErrorCountTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "issue_errors_total",
			Help: "The number of errors encountered during the driver issue() calls.",
		}, []string{"node", "volume"}),
		gatePendingCountTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "issue_gate_pending_total",
			Help: "The number of issue() calls that found the volume not yet ready to request (ReadyToRequest said no). Not counted as errors.",
		}, []string{"node", "volume"}),
		publishToFirstCertificate: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "publish_to_first_certificate_seconds",
			Help:    "The time from a volume being first managed (its publish) to its first certificate being written.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600},
		}, []string{"node"}),
	}
	registry.MustRegister(
		m.issueCallCountTotal,
		m.issueErrorCountTotal,
		m.gatePendingCountTotal,
		m.publishToFirstCertificate,
		NewCertificateRequestCollector(util.HashIdentifier(nodeId), metadataReader, certificateRequestLister),
	)
	return m
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
// request.
func (m *Metrics) IncrementGatePendingCountTotal(nodeNameHash, volumeID string) {
	if m != nil {
		m.gatePendingCountTotal.WithLabelValues(nodeNameHash, volumeID).Inc()
	}
}

// ObservePublishToFirstCertificate records how long a volume waited for its first certificate.
func (m *Metrics) ObservePublishToFirstCertificate(nodeNameHash string, d time.Duration) {
	if m != nil {
		m.publishToFirstCertificate.WithLabelValues(nodeNameHash).Observe(d.Seconds())
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
