package metrics

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	cmlisters "github.com/cert-manager/cert-manager/pkg/client/listers/certmanager/v1"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/cert-manager/csi-lib/internal/api"
	"github.com/cert-manager/csi-lib/internal/api/util"
	"github.com/cert-manager/csi-lib/internal/testkit"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/storage"
)

func setup(t *testing.T) (*Metrics, *prometheus.Registry, *storage.MemoryFS, cache.Indexer) {
	t.Helper()
	store := storage.NewMemoryFS()
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	reg := prometheus.NewRegistry()
	log := testr.New(t)
	return New("test-node", &log, reg, store, cmlisters.NewCertificateRequestLister(indexer)), reg, store, indexer
}

func TestNewFamiliesAppearOnlyOnceObserved(t *testing.T) {
	m, reg, _, _ := setup(t)
	count := func(name string) int {
		n, err := testutil.GatherAndCount(reg, name)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, name := range []string{"certmanager_csi_issue_gate_pending_total", "certmanager_csi_publish_to_first_certificate_seconds", "certmanager_csi_issue_errors_total"} {
		if n := count(name); n != 0 {
			t.Fatalf("%s has %d series before any observation", name, n)
		}
	}
	m.IncrementIssueCallCountTotal("f56fd9f8b", "v1")
	m.IncrementIssueErrorCountTotal("f56fd9f8b", "v1")
	m.IncrementGatePendingCountTotal("f56fd9f8b", "v1")
	m.IncrementGatePendingCountTotal("f56fd9f8b", "v1")
	m.ObservePublishToFirstCertificate("f56fd9f8b", 1500*time.Millisecond)
	want := `
# HELP certmanager_csi_issue_errors_total The number of errors encountered during the driver issue() calls.
# TYPE certmanager_csi_issue_errors_total counter
certmanager_csi_issue_errors_total{node="f56fd9f8b",volume="v1"} 1
# HELP certmanager_csi_issue_requests_total The number of issue() calls made by the driver.
# TYPE certmanager_csi_issue_requests_total counter
certmanager_csi_issue_requests_total{node="f56fd9f8b",volume="v1"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "certmanager_csi_issue_errors_total", "certmanager_csi_issue_requests_total"); err != nil {
		t.Fatal(err)
	}
	if n := count("certmanager_csi_issue_gate_pending_total"); n != 1 {
		t.Fatalf("gate pending series = %d", n)
	}
	if n := count("certmanager_csi_publish_to_first_certificate_seconds"); n != 1 {
		t.Fatalf("histogram series = %d", n)
	}
	m.ForgetVolume("f56fd9f8b", "v1")
	for _, name := range []string{"certmanager_csi_issue_gate_pending_total", "certmanager_csi_issue_errors_total", "certmanager_csi_issue_requests_total"} {
		if n := count(name); n != 0 {
			t.Fatalf("%s kept %d series after ForgetVolume", name, n)
		}
	}
	var nilMetrics *Metrics
	nilMetrics.IncrementIssueErrorCountTotal("n", "v") // must not panic
}

func TestCollectorDescribesRequestsAndVolumes(t *testing.T) {
	m, reg, store, indexer := setup(t)
	ca, err := testkit.NewCA("ca")
	if err != nil {
		t.Fatal(err)
	}
	key, _ := testkit.NewKey()
	csr, _ := testkit.CSR(&x509Template, key)
	notBefore := time.Unix(1_700_000_000, 0)
	cert, err := ca.Sign(csr, notBefore, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	nit := notBefore.Add(40 * time.Minute)
	if _, err := store.RegisterMetadata(metadata.Metadata{VolumeID: "v1"}); err != nil {
		t.Fatal(err)
	}
	if err := store.WriteMetadata("v1", metadata.Metadata{VolumeID: "v1", NextIssuanceTime: &nit, Mounted: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.RegisterMetadata(metadata.Metadata{VolumeID: "v2"}); err != nil {
		t.Fatal(err)
	}
	issued := &cmapi.CertificateRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "cr1", Namespace: "ns", Labels: map[string]string{
			api.NodeIDHashLabelKey: util.HashIdentifier("test-node"), api.VolumeIDHashLabelKey: util.HashIdentifier("v1")}},
		Spec: cmapi.CertificateRequestSpec{IssuerRef: cmmeta.IssuerReference{Name: "iss", Kind: "Issuer", Group: "cert-manager.io"}},
		Status: cmapi.CertificateRequestStatus{Certificate: cert, Conditions: []cmapi.CertificateRequestCondition{
			{Type: cmapi.CertificateRequestConditionReady, Status: cmmeta.ConditionTrue}}},
	}
	otherNode := issued.DeepCopy()
	otherNode.Name = "other"
	otherNode.Labels[api.NodeIDHashLabelKey] = "elsewhere"
	for _, o := range []any{issued, otherNode} {
		if err := indexer.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	want := `
# HELP certmanager_csi_certificate_request_expiration_timestamp_seconds The timestamp after which the certificate request expires, expressed in Unix Epoch Time.
# TYPE certmanager_csi_certificate_request_expiration_timestamp_seconds gauge
certmanager_csi_certificate_request_expiration_timestamp_seconds{issuer_group="cert-manager.io",issuer_kind="Issuer",issuer_name="iss",name="cr1",namespace="ns"} 1.7000036e+09
# HELP certmanager_csi_certificate_request_ready_status The ready status of the certificate request.
# TYPE certmanager_csi_certificate_request_ready_status gauge
certmanager_csi_certificate_request_ready_status{condition="False",issuer_group="cert-manager.io",issuer_kind="Issuer",issuer_name="iss",name="cr1",namespace="ns"} 0
certmanager_csi_certificate_request_ready_status{condition="True",issuer_group="cert-manager.io",issuer_kind="Issuer",issuer_name="iss",name="cr1",namespace="ns"} 1
certmanager_csi_certificate_request_ready_status{condition="Unknown",issuer_group="cert-manager.io",issuer_kind="Issuer",issuer_name="iss",name="cr1",namespace="ns"} 0
# HELP certmanager_csi_certificate_request_renewal_timestamp_seconds The timestamp after which the certificate request should be renewed, expressed in Unix Epoch Time.
# TYPE certmanager_csi_certificate_request_renewal_timestamp_seconds gauge
certmanager_csi_certificate_request_renewal_timestamp_seconds{issuer_group="cert-manager.io",issuer_kind="Issuer",issuer_name="iss",name="cr1",namespace="ns"} 1.7000024e+09
# HELP certmanager_csi_managed_certificate_request_count The number of managed certificate requests by the csi driver.
# TYPE certmanager_csi_managed_certificate_request_count gauge
certmanager_csi_managed_certificate_request_count{node="f56fd9f8b"} 1
# HELP certmanager_csi_managed_volume_count The number of managed volumes by the csi driver.
# TYPE certmanager_csi_managed_volume_count gauge
certmanager_csi_managed_volume_count{node="f56fd9f8b"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"certmanager_csi_certificate_request_expiration_timestamp_seconds", "certmanager_csi_certificate_request_ready_status",
		"certmanager_csi_certificate_request_renewal_timestamp_seconds", "certmanager_csi_managed_certificate_request_count",
		"certmanager_csi_managed_volume_count"); err != nil {
		t.Fatal(err)
	}
	// The handler serves the same registry at /metrics.
	srv := httptest.NewServer(m.DefaultHandler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `certmanager_csi_managed_volume_count{node="f56fd9f8b"} 2`) {
		t.Fatalf("handler output lacks the volume count:\n%s", body)
	}
}

var x509Template = x509.CertificateRequest{Subject: pkix.Name{CommonName: "v1"}}
