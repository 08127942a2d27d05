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
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
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
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/cert-manager/csi-lib/internal/api"
	"github.com/cert-manager/csi-lib/internal/api/util"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/storage"
	"github.com/cert-manager/csi-lib/test/testkit"
)

func setup(t *testing.T) (*Metrics, *prometheus.Registry, *storage.MemoryFS, cache.Indexer) {
	t.Helper()
	store := storage.NewMemoryFS()
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	reg := prometheus.NewRegistry()
	log := testr.New(t)
	return New("test-node", &log, reg, store, cmlisters.NewCertificateRequestLister(indexer)), reg, store, indexer
}

// seriesCount is the number of series of the family name on reg.
func seriesCount(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	n, err := testutil.GatherAndCount(reg, name)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// recordExtended records once in every family upstream lacks but the state gauge.
func recordExtended(m *Metrics) {
	m.IncrementGatePendingCountTotal("f56fd9f8b", "v1")
	m.ObservePublishToFirstCertificate("f56fd9f8b", time.Second)
	m.SetAdmissionWaiting("f56fd9f8b", 1)
	m.IncrementAdmissionWaits("f56fd9f8b")
}

// TestExtendedFamiliesOnlyWithTheSwitch: New registers upstream's families alone, so what the
// manager records in the others before EnableExtendedMetrics is neither printed nor kept; after
// it, each family prints once observed (the gauge at once), and DeleteVolumeSeries deletes the
// per-volume ones.
func TestExtendedFamiliesOnlyWithTheSwitch(t *testing.T) {
	m, reg, _, _ := setup(t)
	count := func(name string) int { return seriesCount(t, reg, name) }
	extended := []string{"certmanager_csi_issue_gate_pending_total", "certmanager_csi_publish_to_first_certificate_seconds",
		"certmanager_csi_issuance_admission_waiting", "certmanager_csi_issuance_admission_waits_total", "certmanager_csi_volumes"}
	recordExtended(m)
	m.SetVolumeStates("f56fd9f8b", map[string]int{"issued": 1})
	for _, name := range extended {
		if n := count(name); n != 0 {
			t.Fatalf("%s has %d series without EnableExtendedMetrics", name, n)
		}
	}
	if m.ExtendedMetricsEnabled() || m.VolumeStateGaugeEnabled() {
		t.Fatal("enabled before EnableExtendedMetrics")
	}
	m.EnableExtendedMetrics()
	m.EnableExtendedMetrics() // harmless
	for _, name := range extended {
		if n := count(name); name != "certmanager_csi_volumes" && n != 0 {
			t.Fatalf("%s kept %d series recorded before the switch", name, n)
		}
	}
	recordExtended(m)
	m.SetVolumeStates("f56fd9f8b", map[string]int{"issued": 1})
	for _, name := range extended {
		if n := count(name); n == 0 {
			t.Fatalf("%s has no series after EnableExtendedMetrics", name)
		}
	}
	m.DeleteVolumeSeries("f56fd9f8b", "v1")
	if n := count("certmanager_csi_issue_gate_pending_total"); n != 0 {
		t.Fatalf("gate pending kept %d series after DeleteVolumeSeries", n)
	}
}

// TestUpstreamCountersAndTheirDeletion: the two counters upstream has print once observed, and
// DeleteVolumeSeries deletes a volume's series.
func TestUpstreamCountersAndTheirDeletion(t *testing.T) {
	m, reg, _, _ := setup(t)
	count := func(name string) int { return seriesCount(t, reg, name) }
	if n := count("certmanager_csi_issue_errors_total"); n != 0 {
		t.Fatalf("issue_errors_total has %d series before any observation", n)
	}
	m.IncrementIssueCallCountTotal("f56fd9f8b", "v1")
	m.IncrementIssueErrorCountTotal("f56fd9f8b", "v1")
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
	m.DeleteVolumeSeries("f56fd9f8b", "v1")
	for _, name := range []string{"certmanager_csi_issue_errors_total", "certmanager_csi_issue_requests_total"} {
		if n := count(name); n != 0 {
			t.Fatalf("%s kept %d series after DeleteVolumeSeries", name, n)
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
	// pending: no certificate yet (expiration 0), for a volume with no time (renewal 0).
	pending := issued.DeepCopy()
	pending.Name = "pending"
	pending.Labels[api.VolumeIDHashLabelKey] = util.HashIdentifier("v2")
	pending.Status = cmapi.CertificateRequestStatus{}
	// garbage: a certificate that does not parse (no expiration series), an odd Ready status
	// (all three ready series 0), for a volume the store does not have (renewal 0).
	garbage := issued.DeepCopy()
	garbage.Name = "garbage"
	garbage.Labels[api.VolumeIDHashLabelKey] = util.HashIdentifier("gone")
	garbage.Status = cmapi.CertificateRequestStatus{Certificate: []byte("not PEM"), Conditions: []cmapi.CertificateRequestCondition{
		{Type: cmapi.CertificateRequestConditionReady, Status: "Odd"}}}
	// zero: a request for a volume registered with a zero time (ContinueOnNotReady).
	zero := pending.DeepCopy()
	zero.Name = "zero"
	zero.Labels[api.VolumeIDHashLabelKey] = util.HashIdentifier("v3")
	var zeroTime time.Time
	if _, err := store.RegisterMetadata(metadata.Metadata{VolumeID: "v3", NextIssuanceTime: &zeroTime}); err != nil {
		t.Fatal(err)
	}
	for _, o := range []any{issued, otherNode, pending, garbage, zero} {
		if err := indexer.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	// The whole exposition, every family: upstream's output for this state. The counters print
	// nothing until observed.
	const labels = `issuer_group="cert-manager.io",issuer_kind="Issuer",issuer_name="iss"`
	want := strings.ReplaceAll(`
# HELP certmanager_csi_certificate_request_expiration_timestamp_seconds The timestamp after which the certificate request expires, expressed in Unix Epoch Time.
# TYPE certmanager_csi_certificate_request_expiration_timestamp_seconds gauge
certmanager_csi_certificate_request_expiration_timestamp_seconds{L,name="cr1",namespace="ns"} 1.7000036e+09
certmanager_csi_certificate_request_expiration_timestamp_seconds{L,name="pending",namespace="ns"} 0
certmanager_csi_certificate_request_expiration_timestamp_seconds{L,name="zero",namespace="ns"} 0
# HELP certmanager_csi_certificate_request_ready_status The ready status of the certificate request.
# TYPE certmanager_csi_certificate_request_ready_status gauge
certmanager_csi_certificate_request_ready_status{condition="False",L,name="cr1",namespace="ns"} 0
certmanager_csi_certificate_request_ready_status{condition="False",L,name="garbage",namespace="ns"} 0
certmanager_csi_certificate_request_ready_status{condition="False",L,name="pending",namespace="ns"} 0
certmanager_csi_certificate_request_ready_status{condition="False",L,name="zero",namespace="ns"} 0
certmanager_csi_certificate_request_ready_status{condition="True",L,name="cr1",namespace="ns"} 1
certmanager_csi_certificate_request_ready_status{condition="True",L,name="garbage",namespace="ns"} 0
certmanager_csi_certificate_request_ready_status{condition="True",L,name="pending",namespace="ns"} 0
certmanager_csi_certificate_request_ready_status{condition="True",L,name="zero",namespace="ns"} 0
certmanager_csi_certificate_request_ready_status{condition="Unknown",L,name="cr1",namespace="ns"} 0
certmanager_csi_certificate_request_ready_status{condition="Unknown",L,name="garbage",namespace="ns"} 0
certmanager_csi_certificate_request_ready_status{condition="Unknown",L,name="pending",namespace="ns"} 1
certmanager_csi_certificate_request_ready_status{condition="Unknown",L,name="zero",namespace="ns"} 1
# HELP certmanager_csi_certificate_request_renewal_timestamp_seconds The timestamp after which the certificate request should be renewed, expressed in Unix Epoch Time.
# TYPE certmanager_csi_certificate_request_renewal_timestamp_seconds gauge
certmanager_csi_certificate_request_renewal_timestamp_seconds{L,name="cr1",namespace="ns"} 1.7000024e+09
certmanager_csi_certificate_request_renewal_timestamp_seconds{L,name="garbage",namespace="ns"} 0
certmanager_csi_certificate_request_renewal_timestamp_seconds{L,name="pending",namespace="ns"} 0
certmanager_csi_certificate_request_renewal_timestamp_seconds{L,name="zero",namespace="ns"} -6.21355968e+10
# HELP certmanager_csi_managed_certificate_request_count The number of managed certificate requests by the csi driver.
# TYPE certmanager_csi_managed_certificate_request_count gauge
certmanager_csi_managed_certificate_request_count{node="f56fd9f8b"} 4
# HELP certmanager_csi_managed_volume_count The number of managed volumes by the csi driver.
# TYPE certmanager_csi_managed_volume_count gauge
certmanager_csi_managed_volume_count{node="f56fd9f8b"} 2
`, "L,", labels+",")
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
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

// failingReader fails every call of one kind.
type failingReader struct {
	storage.MetadataReader
	failList, failRead bool
}

func (f failingReader) ListVolumes() ([]string, error) {
	if f.failList {
		return nil, errors.New("boom")
	}
	return f.MetadataReader.ListVolumes()
}

func (f failingReader) ReadMetadata(id string) (metadata.Metadata, error) {
	if f.failRead {
		return metadata.Metadata{}, errors.New("boom")
	}
	return f.MetadataReader.ReadMetadata(id)
}

// failingLister fails every List.
type failingLister struct {
	cmlisters.CertificateRequestLister
}

func (failingLister) List(labels.Selector) ([]*cmapi.CertificateRequest, error) {
	return nil, errors.New("boom")
}

// TestCollectorShortCircuits: a lister error emits nothing; a storage error stops after the
// request count; a volume whose metadata is not found (mid-registration) is skipped.
func TestCollectorShortCircuits(t *testing.T) {
	store := storage.NewMemoryFS()
	nit := time.Unix(100, 0)
	if _, err := store.RegisterMetadata(metadata.Metadata{VolumeID: "v1", NextIssuanceTime: &nit}); err != nil {
		t.Fatal(err)
	}
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	req := &cmapi.CertificateRequest{ObjectMeta: metav1.ObjectMeta{Name: "cr", Namespace: "ns", Labels: map[string]string{
		api.NodeIDHashLabelKey: util.HashIdentifier("test-node"), api.VolumeIDHashLabelKey: util.HashIdentifier("v1")}}}
	if err := indexer.Add(req); err != nil {
		t.Fatal(err)
	}
	lister := cmlisters.NewCertificateRequestLister(indexer)
	countOnly := `
# HELP certmanager_csi_managed_certificate_request_count The number of managed certificate requests by the csi driver.
# TYPE certmanager_csi_managed_certificate_request_count gauge
certmanager_csi_managed_certificate_request_count{node="f56fd9f8b"} 1
`
	for name, tc := range map[string]struct {
		reader storage.MetadataReader
		lister cmlisters.CertificateRequestLister
		want   string
	}{
		"lister fails":  {store, failingLister{lister}, ""},
		"listing fails": {failingReader{MetadataReader: store, failList: true}, lister, countOnly},
		"a read fails":  {failingReader{MetadataReader: store, failRead: true}, lister, countOnly},
		"mid-register":  {missingReader{store}, lister, "renewal"},
	} {
		t.Run(name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			reg.MustRegister(NewCertificateRequestCollector(util.HashIdentifier("test-node"), tc.reader, tc.lister))
			if tc.want == "renewal" {
				n, err := testutil.GatherAndCount(reg, "certmanager_csi_certificate_request_renewal_timestamp_seconds")
				if err != nil || n != 1 {
					t.Fatalf("a not-found volume ended the scrape: %d renewal series, %v", n, err)
				}
				return
			}
			if err := testutil.GatherAndCompare(reg, strings.NewReader(tc.want)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// missingReader lists an extra volume whose metadata is not found.
type missingReader struct{ storage.MetadataReader }

func (r missingReader) ListVolumes() ([]string, error) {
	ids, err := r.MetadataReader.ListVolumes()
	return append(ids, "registering"), err
}

// TestAdmissionFamilies: the admission gauge and counter print nothing until an attempt waits,
// then exactly these series; DeleteVolumeSeries leaves them (they are per node).
func TestAdmissionFamilies(t *testing.T) {
	m, reg, _, _ := setup(t)
	m.EnableExtendedMetrics()
	names := []string{"certmanager_csi_issuance_admission_waiting", "certmanager_csi_issuance_admission_waits_total"}
	for _, name := range names {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n != 0 {
			t.Fatalf("%s: %d series before any wait (%v)", name, n, err)
		}
	}
	m.IncrementAdmissionWaits("f56fd9f8b")
	m.IncrementAdmissionWaits("f56fd9f8b")
	m.SetAdmissionWaiting("f56fd9f8b", 2)
	m.SetAdmissionWaiting("f56fd9f8b", 1)
	m.DeleteVolumeSeries("f56fd9f8b", "v1")
	want := `
# HELP certmanager_csi_issuance_admission_waiting The number of issuance attempts waiting for admission (MaxConcurrentIssuances or IssuanceRateLimit).
# TYPE certmanager_csi_issuance_admission_waiting gauge
certmanager_csi_issuance_admission_waiting{node="f56fd9f8b"} 1
# HELP certmanager_csi_issuance_admission_waits_total The number of issuance attempts that had to wait for admission (MaxConcurrentIssuances or IssuanceRateLimit). Not counted as errors.
# TYPE certmanager_csi_issuance_admission_waits_total counter
certmanager_csi_issuance_admission_waits_total{node="f56fd9f8b"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	var nilMetrics *Metrics
	nilMetrics.SetAdmissionWaiting("n", 1) // must not panic
	nilMetrics.IncrementAdmissionWaits("n")
}

// TestSetCertificateRequestLister: metrics made with no lister report no request families; once
// given one (the manager's, in a driver) the next scrape lists its requests; nil stops it again.
func TestSetCertificateRequestLister(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New("test-node", nil, reg, storage.NewMemoryFS(), nil)
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, name := range []string{"cr-1", "cr-2"} {
		if err := indexer.Add(&cmapi.CertificateRequest{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{
			api.NodeIDHashLabelKey: util.HashIdentifier("test-node")}}}); err != nil {
			t.Fatal(err)
		}
	}
	const family = "certmanager_csi_managed_certificate_request_count"
	if n := seriesCount(t, reg, family); n != 0 {
		t.Fatalf("without a lister: %d series of %s", n, family)
	}
	m.SetCertificateRequestLister(cmlisters.NewCertificateRequestLister(indexer))
	want := `
# HELP certmanager_csi_managed_certificate_request_count The number of managed certificate requests by the csi driver.
# TYPE certmanager_csi_managed_certificate_request_count gauge
certmanager_csi_managed_certificate_request_count{node="f56fd9f8b"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), family); err != nil {
		t.Fatal(err)
	}
	m.SetCertificateRequestLister(nil)
	if n := seriesCount(t, reg, family); n != 0 {
		t.Fatalf("after setting nil: %d series of %s", n, family)
	}
}
