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

package driver_test

import (
	"context"
	"crypto"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/fake"
	cminformers "github.com/cert-manager/cert-manager/pkg/client/informers/externalversions"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testclock "k8s.io/utils/clock/testing"

	"github.com/cert-manager/csi-lib/manager"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/metrics"
	"github.com/cert-manager/csi-lib/storage"
	testdriver "github.com/cert-manager/csi-lib/test/driver"
	"github.com/cert-manager/csi-lib/test/testkit"
	testutil "github.com/cert-manager/csi-lib/test/util"
)

// metricsServerRun is upstream's metrics test as drivers copy it: a registry with Go's runtime
// collector, the library's metrics on it (with the test's own informer lister), /metrics
// served over HTTP, a driver whose WriteKeypair persists now + 1 h on a fake clock nobody steps,
// and every request signed with one certificate. configure may change the metrics before the
// driver starts.
type metricsServerRun struct {
	client    *fake.Clientset
	node      csi.NodeClient
	target    map[string]string // each published volume's target path
	clock     *testclock.FakeClock
	notAfter  time.Time // of the certificate every request gets
	persisted time.Time // the NextIssuanceTime WriteKeypair persists
}

func startMetricsServer(t *testing.T, configure func(*metrics.Metrics)) (scrape func() string, publish func(id string), r *metricsServerRun) {
	t.Helper()
	clk := testclock.NewFakeClock(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	store := storage.NewMemoryFS()
	client := fake.NewSimpleClientset()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	factory := cminformers.NewSharedInformerFactory(client, 0)
	lister := factory.Certmanager().V1().CertificateRequests().Lister()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	log := testr.New(t)
	met := metrics.New("test-node", &log, reg, store, lister)
	if configure != nil {
		configure(met)
	}
	srv := httptest.NewServer(met.DefaultHandler())
	t.Cleanup(srv.Close)

	ca := newCA(t)
	key, _ := testkit.NewKey()
	csr, _ := testkit.CSR(&x509.CertificateRequest{Subject: pkix.Name{CommonName: "metrics"}}, key)
	cert, err := ca.Sign(csr, clk.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	r = &metricsServerRun{client: client, notAfter: clk.Now().Add(time.Hour), persisted: clk.Now().Add(time.Hour)}
	_, cl, stop := testdriver.Run(t, testdriver.Options{
		Store:   store,
		Clock:   clk,
		Client:  client,
		Metrics: met,
		GenerateRequest: func(metadata.Metadata) (*manager.CertificateRequestBundle, error) {
			return &manager.CertificateRequestBundle{Namespace: namespace}, nil
		},
		WriteKeypair: func(meta metadata.Metadata, _ crypto.PrivateKey, chain, ca []byte) error {
			if err := store.WriteFiles(meta, map[string][]byte{"ca": ca, "cert": chain}); err != nil {
				return err
			}
			next := clk.Now().Add(time.Hour)
			meta.NextIssuanceTime = &next
			return store.WriteMetadata(meta.VolumeID, meta)
		},
	})
	t.Cleanup(stop)
	r.node, r.clock, r.target = cl, clk, map[string]string{}
	go testutil.IssueAllRequests(ctx, t, client, namespace, cert, ca.CertPEM)
	scrape = func() string {
		t.Helper()
		resp, err := http.Get(srv.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(body)
	}
	publish = func(id string) {
		t.Helper()
		req := upstreamStylePublishRequest(t, id)
		r.target[id] = req.TargetPath
		if _, err := cl.NodePublishVolume(ctxWithTimeout(t, pollTimeout), req); err != nil {
			t.Fatal(err)
		}
	}
	return scrape, publish, r
}

// upTo is the text before Go's runtime families, which is what drivers' copies compare.
func upTo(text string) string {
	i := strings.Index(text, "# HELP go_")
	if i < 0 {
		return text
	}
	return text[:i]
}

func promFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// TestMetricsServer is upstream's metrics test, its three phases: before any volume, /metrics
// up to Go's runtime families is exactly the two count families; after one publish and its
// issuance it is exactly upstream's families for that state; after the unpublish and the
// request's deletion the volume's counter is still printed beside the two counts at 0. None of
// the families upstream lacks may appear (the publish writes the volume's first certificate,
// which EnableExtendedMetrics would record). A fourth phase, the fork's own: the counter goes
// once manager.MetricSeriesRetention has passed on the manager's clock.
func TestMetricsServer(t *testing.T) {
	scrape, publish, r := startMetricsServer(t, nil)
	const node = `node="f56fd9f8b"`
	before := `# HELP certmanager_csi_managed_certificate_request_count The number of managed certificate requests by the csi driver.
# TYPE certmanager_csi_managed_certificate_request_count gauge
certmanager_csi_managed_certificate_request_count{` + node + `} 0
# HELP certmanager_csi_managed_volume_count The number of managed volumes by the csi driver.
# TYPE certmanager_csi_managed_volume_count gauge
certmanager_csi_managed_volume_count{` + node + `} 0
`
	if got := upTo(scrape()); got != before {
		t.Fatalf("/metrics before any volume:\n%s\nwant:\n%s", got, before)
	}

	publish("test-vol")
	list, err := r.client.CertmanagerV1().CertificateRequests(namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("requests: %d, %v", len(list.Items), err)
	}
	labels := fmt.Sprintf(`issuer_group="",issuer_kind="",issuer_name="",name=%q,namespace=%q`, list.Items[0].Name, namespace)
	status := func(condition string, v int) string {
		return fmt.Sprintf("certmanager_csi_certificate_request_ready_status{condition=%q,%s} %d\n", condition, labels, v)
	}
	after := `# HELP certmanager_csi_certificate_request_expiration_timestamp_seconds The timestamp after which the certificate request expires, expressed in Unix Epoch Time.
# TYPE certmanager_csi_certificate_request_expiration_timestamp_seconds gauge
certmanager_csi_certificate_request_expiration_timestamp_seconds{` + labels + `} ` + promFloat(float64(r.notAfter.Unix())) + `
# HELP certmanager_csi_certificate_request_ready_status The ready status of the certificate request.
# TYPE certmanager_csi_certificate_request_ready_status gauge
` + status("False", 0) + status("True", 1) + status("Unknown", 0) + `# HELP certmanager_csi_certificate_request_renewal_timestamp_seconds The timestamp after which the certificate request should be renewed, expressed in Unix Epoch Time.
# TYPE certmanager_csi_certificate_request_renewal_timestamp_seconds gauge
certmanager_csi_certificate_request_renewal_timestamp_seconds{` + labels + `} ` + promFloat(float64(r.persisted.Unix())) + `
# HELP certmanager_csi_issue_requests_total The number of issue() calls made by the driver.
# TYPE certmanager_csi_issue_requests_total counter
certmanager_csi_issue_requests_total{` + node + `,volume="test-vol"} 1
# HELP certmanager_csi_managed_certificate_request_count The number of managed certificate requests by the csi driver.
# TYPE certmanager_csi_managed_certificate_request_count gauge
certmanager_csi_managed_certificate_request_count{` + node + `} 1
# HELP certmanager_csi_managed_volume_count The number of managed volumes by the csi driver.
# TYPE certmanager_csi_managed_volume_count gauge
certmanager_csi_managed_volume_count{` + node + `} 1
`
	// The test's own informer sees the signed request a little after the publish returns.
	waitForScrape(t, scrape, "after the issuance", after)

	// Upstream's third phase: the pod is gone (unpublish) and so is its request; the volume's
	// counter is still printed with its count, the managed counts are 0.
	ctx := ctxWithTimeout(t, pollTimeout)
	if _, err := r.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "test-vol", TargetPath: r.target["test-vol"]}); err != nil {
		t.Fatal(err)
	}
	if err := r.client.CertmanagerV1().CertificateRequests(namespace).Delete(ctx, list.Items[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	counter := `# HELP certmanager_csi_issue_requests_total The number of issue() calls made by the driver.
# TYPE certmanager_csi_issue_requests_total counter
certmanager_csi_issue_requests_total{` + node + `,volume="test-vol"} 1
`
	waitForScrape(t, scrape, "after the unpublish", counter+before)

	// The fork's retention: a moment before it ends the counter is still there; once it has
	// passed on the manager's clock, the volume's series are gone.
	r.clock.Step(manager.MetricSeriesRetention - time.Second)
	if got := upTo(scrape()); got != counter+before {
		t.Fatalf("/metrics before the retention ends:\n%s\nwant:\n%s", got, counter+before)
	}
	r.clock.Step(time.Second)
	waitForScrape(t, scrape, "after the retention", before)
}

// waitForScrape polls /metrics (bounded) until the text before Go's runtime families is want.
func waitForScrape(t *testing.T, scrape func() string, when, want string) {
	t.Helper()
	deadline := time.Now().Add(pollTimeout)
	for got := upTo(scrape()); got != want; got = upTo(scrape()) {
		if time.Now().After(deadline) {
			t.Fatalf("/metrics %s:\n%s\nwant:\n%s", when, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestExtendedMetricsAreOptIn: with EnableExtendedMetrics the same run also prints the families
// upstream lacks that it touched: the publish-to-first-certificate histogram and the state
// gauge.
func TestExtendedMetricsAreOptIn(t *testing.T) {
	scrape, publish, _ := startMetricsServer(t, (*metrics.Metrics).EnableExtendedMetrics)
	publish("test-vol")
	text := scrape()
	for _, want := range []string{
		`certmanager_csi_publish_to_first_certificate_seconds_count{node="f56fd9f8b"} 1`,
		`certmanager_csi_volumes{node="f56fd9f8b",state="issued"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics with EnableExtendedMetrics lacks %s:\n%s", want, upTo(text))
		}
	}
}
