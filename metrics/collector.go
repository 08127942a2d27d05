package metrics

import (
	"crypto/x509"
	"encoding/pem"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	cmlisters "github.com/cert-manager/cert-manager/pkg/client/listers/certmanager/v1"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/cert-manager/csi-lib/internal/api"
	"github.com/cert-manager/csi-lib/internal/api/util"
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

// CertificateRequestCollector describes, on every scrape, the node's volumes and the
// CertificateRequests labelled with the node's hash: their Ready condition, the expiry of their
// certificate, and the volume's next issuance time. It reads the informer's cache and the
// volumes' metadata; it never calls the apiserver and never modifies storage.
type CertificateRequestCollector struct {
	nodeNameHash   string
	metadataReader storage.MetadataReader
	lister         cmlisters.CertificateRequestLister
}

// NewCertificateRequestCollector returns the collector for the node whose ID hashes to
// nodeNameHash (see internal/api/util.HashIdentifier).
func NewCertificateRequestCollector(nodeNameHash string, metadataReader storage.MetadataReader, lister cmlisters.CertificateRequestLister) prometheus.Collector {
	return &CertificateRequestCollector{nodeNameHash: nodeNameHash, metadataReader: metadataReader, lister: lister}
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
	volumeByHash := map[string]string{}
	if c.metadataReader != nil {
		if ids, err := c.metadataReader.ListVolumes(); err == nil {
			ch <- prometheus.MustNewConstMetric(volumeCountDesc, prometheus.GaugeValue, float64(len(ids)), node)
			for _, id := range ids {
				volumeByHash[util.HashIdentifier(id)] = id
			}
		}
	}
	if c.lister == nil {
		return
	}
	reqs, err := c.lister.List(labels.SelectorFromSet(labels.Set{api.NodeIDHashLabelKey: node}))
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(requestCountDesc, prometheus.GaugeValue, float64(len(reqs)), node)
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
		if notAfter, ok := leafNotAfter(req.Status.Certificate); ok {
			ch <- prometheus.MustNewConstMetric(expirationDesc, prometheus.GaugeValue, float64(notAfter), lv...)
		}
		if id, ok := volumeByHash[req.Labels[api.VolumeIDHashLabelKey]]; ok && isReady(req) {
			if meta, err := c.metadataReader.ReadMetadata(id); err == nil && meta.NextIssuanceTime != nil {
				ch <- prometheus.MustNewConstMetric(renewalDesc, prometheus.GaugeValue, float64(meta.NextIssuanceTime.Unix()), lv...)
			}
		}
	}
}

func readyStatus(req *cmapi.CertificateRequest) cmmeta.ConditionStatus {
	for _, cond := range req.Status.Conditions {
		if cond.Type == cmapi.CertificateRequestConditionReady {
			return cond.Status
		}
	}
	return cmmeta.ConditionUnknown
}

func isReady(req *cmapi.CertificateRequest) bool {
	return readyStatus(req) == cmmeta.ConditionTrue && len(req.Status.Certificate) > 0
}

func leafNotAfter(chain []byte) (int64, bool) {
	block, _ := pem.Decode(chain)
	if block == nil {
		return 0, false
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return 0, false
	}
	return cert.NotAfter.Unix(), true
}
