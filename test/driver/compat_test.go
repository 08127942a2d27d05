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
	"crypto/x509"
	"crypto/x509/pkix"
	"testing"
	"time"

	"github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/fake"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cert-manager/csi-lib/manager"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/metrics"
	testdriver "github.com/cert-manager/csi-lib/test/driver"
	"github.com/cert-manager/csi-lib/test/testkit"
	testutil "github.com/cert-manager/csi-lib/test/util"
)

// The tests in this file send requests and sign certificates the way drivers' own tests do,
// modelled on upstream csi-lib's: no volume capability, certificates from 1970, a fake clock
// that is never stepped.

// upstreamStylePublishRequest is a publish request as upstream's tests build it: no volume
// capability (kubelet always sends one; drivers' tests do not).
func upstreamStylePublishRequest(t *testing.T, id string) *csi.NodePublishVolumeRequest {
	req := publishRequest(t, id)
	req.VolumeCapability = nil
	return req
}

// TestPublishWithoutVolumeCapability: a request without a volume capability is a mount volume,
// as upstream treats it: it issues, mounts and records the volume as mounted.
func TestPublishWithoutVolumeCapability(t *testing.T) {
	store, opts, cl := runWithRealIssuance(t, testdriver.Options{})
	startSigner(t, opts, newCA(t))
	req := upstreamStylePublishRequest(t, "vol-1")
	if _, err := cl.NodePublishVolume(ctxWithTimeout(t, pollTimeout), req); err != nil {
		t.Fatalf("publish without a volume capability: %v", err)
	}
	files, err := store.ReadFiles("vol-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testkit.VerifyKeyPair(files["tls.key"], files["tls.crt"], files["ca.crt"], time.Now()); err != nil {
		t.Fatalf("published files are not a valid key pair: %v", err)
	}
	if meta, err := store.ReadMetadata("vol-1"); err != nil || !meta.Mounted {
		t.Fatalf("metadata after publish: %+v, %v", meta, err)
	}
	if mps := mountPoints(t, opts); len(mps) != 1 || mps[0].Path != req.TargetPath {
		t.Fatalf("mounts = %+v", mps)
	}
}

// TestAlreadyDueCertificateOnANeverSteppedClock is upstream's metrics test as drivers copy it:
// a certificate valid from Unix 0 to Unix 300 (renewal point Unix 200, long past), a fake clock
// that nobody steps, every request signed as soon as it exists. Upstream's loop waits for its
// next tick after the publish, so such a test sees one request and one issuance; here the loop
// waits 1 s on the fake clock, and renews only once the clock has moved that second.
func TestAlreadyDueCertificateOnANeverSteppedClock(t *testing.T) {
	ca := newCA(t)
	key, _ := testkit.NewKey()
	csr, _ := testkit.CSR(&x509.CertificateRequest{Subject: pkix.Name{CommonName: "old"}}, key)
	cert, err := ca.Sign(csr, time.Unix(0, 0), 300*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	clk := testkit.NewRecordingClock(time.Now())
	reg := prometheus.NewRegistry()
	opts, cl, _ := testdriver.Run(t, testdriver.Options{
		Clock:   clk,
		Metrics: metrics.New("test-node", nil, reg, nil, nil),
		GenerateRequest: func(metadata.Metadata) (*manager.CertificateRequestBundle, error) {
			return &manager.CertificateRequestBundle{Namespace: namespace}, nil
		},
	})
	ctx := ctxWithTimeout(t, pollTimeout)
	go testutil.IssueAllRequests(ctx, t, opts.Client, namespace, cert, ca.CertPEM)
	req := upstreamStylePublishRequest(t, "vol-1")
	if _, err := cl.NodePublishVolume(ctx, req); err != nil {
		t.Fatal(err)
	}
	// The publish's attempt starts no timer; the first is the loop's wait after the success.
	if d := clk.NextTimer(t, pollTimeout); d != time.Second {
		t.Fatalf("after the publish the loop set a %v timer; want its 1 s wait (a 60 s one is a renewal attempt)", d)
	}
	poll(t, "the loop to wait on the clock", clk.HasWaiters)
	creates := func() int { return testkit.CountActions(opts.Client.(*fake.Clientset), "create") }
	if n := creates(); n != 1 {
		t.Fatalf("%d requests created before the clock moved, want 1", n)
	}
	if n := issueRequestsTotal(t, reg, "vol-1"); n != 1 {
		t.Fatalf("certmanager_csi_issue_requests_total = %v before the clock moved, want 1", n)
	}

	clk.Step(time.Second - time.Millisecond)
	if n := len(clk.Timers); n != 0 || creates() != 1 {
		t.Fatal("the loop renewed before the clock had moved 1 s")
	}
	clk.Step(time.Millisecond)
	// The renewal replaces the issued request (upstream's resume rule: issued, key gone).
	poll(t, "the renewal's request", func() bool { return creates() == 2 })
	if n := issueRequestsTotal(t, reg, "vol-1"); n != 2 {
		t.Fatalf("certmanager_csi_issue_requests_total = %v after the renewal, want 2", n)
	}

	// The rest of upstream's test: the pod goes (unpublish) and so do its requests; the
	// volume's counter stays, with its count.
	if _, err := cl.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "vol-1", TargetPath: req.TargetPath}); err != nil {
		t.Fatal(err)
	}
	list, err := opts.Client.CertmanagerV1().CertificateRequests(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range list.Items {
		if err := opts.Client.CertmanagerV1().CertificateRequests(namespace).Delete(ctx, r.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := issueRequestsTotal(t, reg, "vol-1"); n != 2 {
		t.Fatalf("certmanager_csi_issue_requests_total = %v after the unpublish, want 2", n)
	}
}

// issueRequestsTotal is the volume's certmanager_csi_issue_requests_total.
func issueRequestsTotal(t *testing.T, reg *prometheus.Registry, volume string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "certmanager_csi_issue_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if labelIs(m, "volume", volume) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func labelIs(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue() == value
		}
	}
	return false
}
