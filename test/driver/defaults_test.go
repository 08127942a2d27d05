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
	"crypto/x509"
	"crypto/x509/pkix"
	"math"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/fake"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/mount-utils"
	"k8s.io/utils/clock"
	testclock "k8s.io/utils/clock/testing"

	"github.com/cert-manager/csi-lib/manager"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/metrics"
	"github.com/cert-manager/csi-lib/storage"
	testdriver "github.com/cert-manager/csi-lib/test/driver"
	"github.com/cert-manager/csi-lib/test/testkit"
	testutil "github.com/cert-manager/csi-lib/test/util"
)

// TestRunKeepsUpstreamsDefaults pins the defaults Run fills in, and that the default
// WriteKeypair persists nothing while a publish still succeeds once its request is issued.
func TestRunKeepsUpstreamsDefaults(t *testing.T) {
	opts, cl, _ := testdriver.Run(t, testdriver.Options{})
	if _, ok := opts.Clock.(*clock.RealClock); !ok {
		t.Errorf("Clock = %T, want *clock.RealClock", opts.Clock)
	}
	if _, ok := opts.Client.(*fake.Clientset); !ok {
		t.Errorf("Client = %T, want a fake clientset", opts.Client)
	}
	if opts.ReadyToRequest != nil || opts.GateBackoffConfig != nil {
		t.Error("ReadyToRequest and GateBackoffConfig must stay nil (the manager's defaults)")
	}
	if b := opts.RenewalBackoffConfig; b == nil || *b != (wait.Backoff{Steps: math.MaxInt32}) {
		t.Errorf("RenewalBackoffConfig = %+v, want {Steps: MaxInt32}", b)
	}
	if opts.NodeID != "test-node" {
		t.Errorf("NodeID = %q", opts.NodeID)
	}

	// The default bundle is empty (namespace ""); sign any certificate for it.
	ca := newCA(t)
	key, _ := testkit.NewKey()
	csr, _ := testkit.CSR(&x509.CertificateRequest{Subject: pkix.Name{CommonName: "x"}}, key)
	cert, err := ca.Sign(csr, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxWithTimeout(t, pollTimeout)
	go testutil.IssueOneRequest(ctx, t, opts.Client, "", cert, ca.CertPEM)
	if _, err := cl.NodePublishVolume(ctx, publishRequest(t, "vol-1")); err != nil {
		t.Fatalf("publish with the default functions: %v", err)
	}
	meta, err := opts.Store.ReadMetadata("vol-1")
	if err != nil || meta.NextIssuanceTime != nil || !meta.Mounted {
		t.Errorf("metadata = %+v, %v; the default WriteKeypair persists nothing", meta, err)
	}
	files, _ := opts.Store.(*storage.MemoryFS).ReadFiles("vol-1")
	if len(files) != 1 {
		t.Errorf("files = %v; want only metadata.json", files)
	}
}

// TestClosedGateDoesNotSpin: with the default gate backoff a closed gate is asked once per
// backoff step, not in a tight loop. The clock is never stepped, so after the publish's check
// and the loop's first attempt the gate is not asked again.
func TestClosedGateDoesNotSpin(t *testing.T) {
	var calls atomic.Int64
	clk := testclock.NewFakeClock(time.Now())
	opts, cl, _ := testdriver.Run(t, testdriver.Options{
		Clock:              clk,
		ContinueOnNotReady: true,
		ReadyToRequest: func(metadata.Metadata) (bool, string) {
			calls.Add(1)
			return false, "never"
		},
	})
	if _, err := cl.NodePublishVolume(ctxWithTimeout(t, pollTimeout), publishRequest(t, "vol-1")); err != nil {
		t.Fatal(err)
	}
	// Once the loop waits on the fake clock, which nothing steps, it can ask the gate no more;
	// a loop without a backoff would have asked it many times by now.
	poll(t, "the loop to wait on its gate backoff", func() bool { return clk.HasWaiters() && calls.Load() >= 2 })
	if n := calls.Load(); n != 2 {
		t.Fatalf("gate asked %d times without the clock moving; want 2 (publish check, first attempt)", n)
	}
	_ = opts
}

// TestRunLeavesTheCallersObjectsAlone: Run sweeps nothing, sets nothing on the store and
// creates nothing through the caller's clientset.
func TestRunLeavesTheCallersObjectsAlone(t *testing.T) {
	mem := storage.NewMemoryFS()
	if _, err := mem.RegisterMetadata(metadata.Metadata{VolumeID: "prepared"}); err != nil {
		t.Fatal(err)
	}
	client := fake.NewSimpleClientset()
	testdriver.Run(t, testdriver.Options{Store: mem, Client: client})
	if _, err := mem.ReadMetadata("prepared"); err != nil {
		t.Errorf("Run swept a volume the test prepared: %v", err)
	}
	if mem.Mounter != nil {
		t.Error("Run set the store's Mounter")
	}
	for _, a := range client.Actions() {
		if v := a.GetVerb(); v != "list" && v != "watch" {
			t.Errorf("Run made a %s %s on the caller's clientset", v, a.GetResource().Resource)
		}
	}
	list, _ := client.CertmanagerV1().CertificateRequests("").List(context.Background(), metav1.ListOptions{})
	if len(list.Items) != 0 {
		t.Errorf("%d requests exist after Run", len(list.Items))
	}
}

// TestSeriesLiveThroughUnpublishForTheRetention: a failed publish keeps the volume's series
// (kubelet retries it), and so does its unpublish, as upstream's never-deleted series do, until
// manager.MetricSeriesRetention has passed on the manager's clock.
func TestSeriesLiveThroughUnpublishForTheRetention(t *testing.T) {
	reg := prometheus.NewRegistry()
	store := storage.NewMemoryFS()
	clk := testclock.NewFakeClock(time.Now())
	o := testdriver.Options{Store: store, Clock: clk}
	realIssuance(&o, store)
	o.Metrics = metrics.New("test-node", nil, reg, store, nil)
	opts, cl, _ := testdriver.Run(t, o)
	series := func() int {
		n, err := promtestutil.GatherAndCount(reg, "certmanager_csi_issue_requests_total", "certmanager_csi_issue_errors_total")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	req := publishRequest(t, "vol-1")
	if _, err := cl.NodePublishVolume(ctxWithTimeout(t, 200*time.Millisecond), req); err == nil {
		t.Fatal("publish succeeded without a signer")
	}
	// The client gives up at its deadline; the server counts the error a moment later.
	poll(t, "the failed publish's series (requests and errors)", func() bool { return series() == 2 })
	startSigner(t, opts, newCA(t))
	if _, err := cl.NodePublishVolume(ctxWithTimeout(t, pollTimeout), req); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.NodeUnpublishVolume(ctxWithTimeout(t, pollTimeout), &csi.NodeUnpublishVolumeRequest{VolumeId: "vol-1", TargetPath: req.TargetPath}); err != nil {
		t.Fatal(err)
	}
	clk.Step(manager.MetricSeriesRetention - time.Second)
	if n := series(); n != 2 {
		t.Fatalf("%d series after unpublish, within the retention; want 2", n)
	}
	clk.Step(time.Second)
	poll(t, "the series to go after the retention", func() bool { return series() == 0 })
}

// TestPublishOverAnExistingMount: a target already mounted from the volume's data directory
// but writable (a crash between the bind mount and its read-only remount) is repaired; a target
// mounted from anything else is refused and left alone.
func TestPublishOverAnExistingMount(t *testing.T) {
	store := storage.NewMemoryFS()
	o := testdriver.Options{Store: store}
	realIssuance(&o, store)
	opts, cl, _ := testdriver.Run(t, o)
	startSigner(t, opts, newCA(t))
	mounter := opts.Mounter.(*mount.FakeMounter)
	mountsAt := func(target string) []mount.MountPoint {
		var out []mount.MountPoint
		for _, mp := range mountPoints(t, opts) {
			if mp.Path == target {
				out = append(out, mp)
			}
		}
		return out
	}

	writable := publishRequest(t, "vol-1")
	if err := os.MkdirAll(writable.TargetPath, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := mounter.Mount(store.PathForVolume("vol-1"), writable.TargetPath, "", []string{"bind"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.NodePublishVolume(ctxWithTimeout(t, pollTimeout), writable); err != nil {
		t.Fatal(err)
	}
	mps := mountsAt(writable.TargetPath)
	if len(mps) != 1 || !slices.Contains(mps[0].Opts, "ro") {
		t.Fatalf("mounts at the target after publish: %+v; want one read-only bind", mps)
	}

	foreign := publishRequest(t, "vol-2")
	if err := os.MkdirAll(foreign.TargetPath, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := mounter.Mount("/somewhere/else", foreign.TargetPath, "", []string{"bind", "ro"}); err != nil {
		t.Fatal(err)
	}
	_, err := cl.NodePublishVolume(ctxWithTimeout(t, pollTimeout), foreign)
	if status.Code(err) != codes.Internal {
		t.Fatalf("publish over a foreign mount = %v, want Internal", err)
	}
	if mps := mountsAt(foreign.TargetPath); len(mps) != 1 || mps[0].Device != "/somewhere/else" {
		t.Fatalf("the foreign mount was touched: %+v", mps)
	}
}
