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
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/fake"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/mount-utils"
	testclock "k8s.io/utils/clock/testing"

	"github.com/cert-manager/csi-lib/internal/api/util"
	"github.com/cert-manager/csi-lib/manager"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/storage"
	testdriver "github.com/cert-manager/csi-lib/test/driver"
	"github.com/cert-manager/csi-lib/test/testkit"
	testutil "github.com/cert-manager/csi-lib/test/util"
)

const (
	namespace   = "certificaterequest-namespace"
	pollTimeout = 20 * time.Second
)

// realIssuance fills opts with functions that generate real keys and CSRs and write the key
// pair into the store, like a real driver.
// It returns a channel that receives the volume ID of every key pair written.
func realIssuance(opts *testdriver.Options, store storage.Interface) <-chan string {
	written := make(chan string, 100)
	opts.Store = store
	opts.GeneratePrivateKey = testkit.GenerateKey
	opts.GenerateRequest = func(meta metadata.Metadata) (*manager.CertificateRequestBundle, error) {
		return &manager.CertificateRequestBundle{
			Request:   &x509.CertificateRequest{Subject: pkix.Name{CommonName: meta.VolumeID}},
			Namespace: namespace,
			IssuerRef: cmmeta.IssuerReference{Name: "ca", Kind: "Issuer", Group: "cert-manager.io"},
			Duration:  time.Hour,
		}, nil
	}
	opts.SignRequest = testkit.SignCSR
	opts.WriteKeypair = testkit.KeypairWriter(store, func(meta metadata.Metadata, _ crypto.PrivateKey, _ []byte) {
		select {
		case written <- meta.VolumeID:
		default:
		}
	})
	return written
}

// runWithRealIssuance runs the harness on a new MemoryFS with realIssuance and the other fields
// of o.
func runWithRealIssuance(t *testing.T, o testdriver.Options) (*storage.MemoryFS, testdriver.Options, csi.NodeClient) {
	t.Helper()
	store := storage.NewMemoryFS()
	realIssuance(&o, store)
	opts, cl, _ := testdriver.Run(t, o)
	return store, opts, cl
}

// waitWritten waits until a key pair is written for volumeID.
func waitWritten(t *testing.T, written <-chan string, volumeID string) {
	t.Helper()
	timeout := time.After(pollTimeout)
	for {
		select {
		case id := <-written:
			if id == volumeID {
				return
			}
		case <-timeout:
			t.Fatalf("no key pair written for %s", volumeID)
		}
	}
}

// waitForRequest waits, through a watch, until exactly one CertificateRequest exists.
func waitForRequest(t *testing.T, opts testdriver.Options) {
	t.Helper()
	if _, err := testutil.WaitAndGetOneCertificateRequestInNamespace(ctxWithTimeout(t, pollTimeout), opts.Client, namespace); err != nil {
		t.Fatal(err)
	}
}

func publishRequest(t *testing.T, id string) *csi.NodePublishVolumeRequest {
	return &csi.NodePublishVolumeRequest{
		VolumeId:   id,
		TargetPath: t.TempDir() + "/target",
		Readonly:   true,
		VolumeCapability: &csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY},
		},
		VolumeContext: map[string]string{
			"csi.storage.k8s.io/ephemeral":     "true",
			"csi.storage.k8s.io/pod.name":      "pod-" + id,
			"csi.storage.k8s.io/pod.namespace": namespace,
			"csi.storage.k8s.io/pod.uid":       "uid-" + id,
		},
	}
}

// signer signs pending requests in the background with a real CA until stopped.
type signer struct {
	ca     *testkit.CA
	cancel context.CancelFunc
	done   chan struct{}
}

func startSigner(t *testing.T, opts testdriver.Options, ca *testkit.CA) *signer {
	ctx, cancel := context.WithCancel(context.Background())
	s := &signer{ca: ca, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		reqs := opts.Client.CertmanagerV1().CertificateRequests(namespace)
		for ctx.Err() == nil {
			w, err := reqs.Watch(ctx, metav1.ListOptions{})
			if err != nil {
				return
			}
			issueAll := func() {
				list, err := reqs.List(ctx, metav1.ListOptions{})
				if err != nil {
					return
				}
				for i := range list.Items {
					if !testkit.IsFinished(&list.Items[i]) {
						_, _ = testkit.Issue(ctx, opts.Client, ca, &list.Items[i], opts.Clock.Now())
					}
				}
			}
			issueAll()
			for open := true; open && ctx.Err() == nil; {
				select {
				case <-ctx.Done():
				case _, open = <-w.ResultChan():
					issueAll()
				}
			}
			w.Stop()
		}
	}()
	t.Cleanup(s.stop)
	return s
}

func (s *signer) stop() { s.cancel(); <-s.done }

func newCA(t *testing.T) *testkit.CA {
	ca, err := testkit.NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(pollTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func countRequests(t *testing.T, opts testdriver.Options) int {
	t.Helper()
	list, err := opts.Client.CertmanagerV1().CertificateRequests(namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return len(list.Items)
}

func mountPoints(t *testing.T, opts testdriver.Options) []mount.MountPoint {
	mps, err := opts.Mounter.List()
	if err != nil {
		t.Fatal(err)
	}
	return mps
}

func ctxWithTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestPublishIssuesMountsAndMarksMounted(t *testing.T) {
	store, opts, cl := runWithRealIssuance(t, testdriver.Options{})
	startSigner(t, opts, newCA(t))

	req := publishRequest(t, "vol-1")
	if _, err := cl.NodePublishVolume(ctxWithTimeout(t, pollTimeout), req); err != nil {
		t.Fatal(err)
	}
	files, err := store.ReadFiles("vol-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testkit.VerifyKeyPair(files["tls.key"], files["tls.crt"], files["ca.crt"], time.Now()); err != nil {
		t.Fatalf("published files are not a valid key pair: %v", err)
	}
	meta, err := store.ReadMetadata("vol-1")
	if err != nil || !meta.Mounted || meta.NextIssuanceTime == nil {
		t.Fatalf("metadata after publish: %+v, %v", meta, err)
	}
	mps := mountPoints(t, opts)
	if len(mps) != 1 || mps[0].Path != req.TargetPath || mps[0].Device != store.PathForVolume("vol-1") {
		t.Fatalf("mounts = %+v", mps)
	}
	// Publishing again is an idempotent success with no new request and no second mount.
	if _, err := cl.NodePublishVolume(ctxWithTimeout(t, pollTimeout), req); err != nil {
		t.Fatal(err)
	}
	if n := countRequests(t, opts); n != 1 {
		t.Fatalf("%d CertificateRequests after a second publish, want 1", n)
	}
	if n := len(mountPoints(t, opts)); n != 1 {
		t.Fatalf("%d mounts after a second publish, want 1", n)
	}
}

func TestPublishWithTestUtilHelpers(t *testing.T) {
	ca := newCA(t)
	key, _ := testkit.NewKey()
	csr, _ := testkit.CSR(&x509.CertificateRequest{Subject: pkix.Name{CommonName: "example"}}, key)
	cert, err := ca.Sign(csr, time.Now().Add(-time.Minute), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	opts, cl, _ := testdriver.Run(t, testdriver.Options{GenerateRequest: func(metadata.Metadata) (*manager.CertificateRequestBundle, error) {
		return &manager.CertificateRequestBundle{Namespace: namespace}, nil
	}})
	ctx := ctxWithTimeout(t, pollTimeout)
	go testutil.IssueOneRequest(ctx, t, opts.Client, namespace, cert, ca.CertPEM)
	if _, err := cl.NodePublishVolume(ctx, publishRequest(t, "vol-1")); err != nil {
		t.Fatal(err)
	}
	req, err := testutil.WaitAndGetOneCertificateRequestInNamespace(ctx, opts.Client, namespace)
	if err != nil || string(req.Status.Certificate) != string(cert) {
		t.Fatalf("issued request: %v", err)
	}
}

func TestNotReadyToRequest(t *testing.T) {
	gate := func(open *atomic.Bool) manager.ReadyToRequestFunc {
		return func(metadata.Metadata) (bool, string) {
			if open.Load() {
				return true, ""
			}
			return false, "pod has no IP"
		}
	}
	t.Run("ContinueOnNotReady off fails with upstream's message and leaves nothing", func(t *testing.T) {
		var open atomic.Bool
		store, opts, cl := runWithRealIssuance(t, testdriver.Options{ReadyToRequest: gate(&open)})
		_, err := cl.NodePublishVolume(ctxWithTimeout(t, pollTimeout), publishRequest(t, "vol-1"))
		if status.Code(err) != codes.Unknown || status.Convert(err).Message() != "volume is not yet ready to be setup, will be retried: pod has no IP" {
			t.Fatalf("error = %v", err)
		}
		if ids, _ := store.ListVolumes(); len(ids) != 0 {
			t.Fatalf("volumes left: %v", ids)
		}
		if n := countRequests(t, opts); n != 0 || len(mountPoints(t, opts)) != 0 {
			t.Fatalf("%d requests and %v mounts left", n, mountPoints(t, opts))
		}
	})
	t.Run("ContinueOnNotReady on succeeds at once; the loop issues later", func(t *testing.T) {
		var open atomic.Bool
		store := storage.NewMemoryFS()
		o := testdriver.Options{ReadyToRequest: gate(&open), ContinueOnNotReady: true,
			GateBackoffConfig: &wait.Backoff{Duration: 5 * time.Millisecond, Factor: 1, Steps: 1 << 30}}
		written := realIssuance(&o, store)
		opts, cl, _ := testdriver.Run(t, o)
		startSigner(t, opts, newCA(t))
		if _, err := cl.NodePublishVolume(ctxWithTimeout(t, pollTimeout), publishRequest(t, "vol-1")); err != nil {
			t.Fatal(err)
		}
		meta, _ := store.ReadMetadata("vol-1")
		// As upstream: ContinueOnNotReady registers a zero time, which means "no certificate".
		if !meta.Mounted || meta.NextIssuanceTime == nil || !meta.NextIssuanceTime.IsZero() {
			t.Fatalf("after publish: %+v", meta)
		}
		if n := countRequests(t, opts); n != 0 {
			t.Fatalf("a request was created while the gate was closed")
		}
		open.Store(true)
		waitWritten(t, written, "vol-1")
		if files, _ := store.ReadFiles("vol-1"); len(files["tls.crt"]) == 0 {
			t.Fatal("no certificate in the volume")
		}
	})
}

func TestBadInputIsInvalidArgumentAndWritesNothing(t *testing.T) {
	store, opts, cl := runWithRealIssuance(t, testdriver.Options{})
	tests := []struct {
		name   string
		mutate func(*csi.NodePublishVolumeRequest)
	}{
		{"empty volume ID", func(r *csi.NodePublishVolumeRequest) { r.VolumeId = "" }},
		{"volume ID ..", func(r *csi.NodePublishVolumeRequest) { r.VolumeId = ".." }},
		{"volume ID escaping", func(r *csi.NodePublishVolumeRequest) { r.VolumeId = "../../etc" }},
		{"volume ID with slash", func(r *csi.NodePublishVolumeRequest) { r.VolumeId = "a/b" }},
		{"volume ID too long", func(r *csi.NodePublishVolumeRequest) { r.VolumeId = strings.Repeat("x", 256) }},
		{"no target path", func(r *csi.NodePublishVolumeRequest) { r.TargetPath = "" }},
		{"not ephemeral", func(r *csi.NodePublishVolumeRequest) { delete(r.VolumeContext, "csi.storage.k8s.io/ephemeral") }},
		{"writable", func(r *csi.NodePublishVolumeRequest) { r.Readonly = false }},
		{"block", func(r *csi.NodePublishVolumeRequest) {
			r.VolumeCapability.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := publishRequest(t, "vol-1")
			tc.mutate(req)
			_, err := cl.NodePublishVolume(ctxWithTimeout(t, pollTimeout), req)
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("code = %v (%v), want InvalidArgument", status.Code(err), err)
			}
		})
	}
	for _, bad := range []*csi.NodeUnpublishVolumeRequest{{VolumeId: "../x", TargetPath: "/t"}, {VolumeId: "ok", TargetPath: ""}} {
		if _, err := cl.NodeUnpublishVolume(ctxWithTimeout(t, pollTimeout), bad); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("unpublish %+v: %v, want InvalidArgument", bad, err)
		}
	}
	if ids, _ := store.ListVolumes(); len(ids) != 0 {
		t.Fatalf("bad input wrote volumes: %v", ids)
	}
	if n := countRequests(t, opts); n != 0 || len(mountPoints(t, opts)) != 0 {
		t.Fatal("bad input created requests or mounts")
	}
}

// TestUnparsableFSGroupIsInvalidArgument: a store that validates metadata (the Filesystem)
// refuses an fsGroup its WriteFiles would reject before anything is written or requested.
func TestUnparsableFSGroupIsInvalidArgument(t *testing.T) {
	fs, err := storage.NewFilesystemWithOptions(logr.Discard(), t.TempDir(), storage.FilesystemOptions{PlainDirectory: true, Mounter: mount.NewFakeMounter(nil)})
	if err != nil {
		t.Fatal(err)
	}
	o := testdriver.Options{Store: fs}
	realIssuance(&o, fs)
	opts, cl, _ := testdriver.Run(t, o)
	for _, group := range []string{"wheel", "0", "4294967296"} {
		req := publishRequest(t, "vol-1")
		req.VolumeCapability.GetMount().VolumeMountGroup = group
		if _, err := cl.NodePublishVolume(ctxWithTimeout(t, pollTimeout), req); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("fsGroup %q: %v, want InvalidArgument", group, err)
		}
	}
	if ids, _ := fs.ListVolumes(); len(ids) != 0 || countRequests(t, opts) != 0 {
		t.Fatalf("bad input wrote volumes %v or requests", ids)
	}
}

func TestConcurrentPublishesOfOneVolume(t *testing.T) {
	store, opts, cl := runWithRealIssuance(t, testdriver.Options{})
	req := publishRequest(t, "vol-1")
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := cl.NodePublishVolume(ctxWithTimeout(t, pollTimeout), req)
			if err == nil {
				// Never a success without a certificate.
				if meta, _ := store.ReadMetadata("vol-1"); meta.NextIssuanceTime == nil || !meta.Mounted {
					err = errors.New("publish succeeded without a certificate or mount")
				}
			}
			errs <- err
		}()
	}
	waitForRequest(t, opts)
	startSigner(t, opts, newCA(t))
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := countRequests(t, opts); n != 1 {
		t.Fatalf("%d requests for one volume, want 1", n)
	}
	if n := len(mountPoints(t, opts)); n != 1 {
		t.Fatalf("%d mounts, want 1", n)
	}
}

// TestTimedOutPublishThenRetry is the race upstream loses: the first call's deadline passes and
// its clean-up runs while kubelet's retry arrives. The retry must wait for the clean-up and
// then see a clean slate.
func TestTimedOutPublishThenRetry(t *testing.T) {
	store, opts, cl := runWithRealIssuance(t, testdriver.Options{})
	req := publishRequest(t, "vol-1")
	_, err := cl.NodePublishVolume(ctxWithTimeout(t, 300*time.Millisecond), req)
	if code := status.Code(err); code != codes.DeadlineExceeded {
		t.Fatalf("first publish: %v, want DeadlineExceeded", err)
	}
	startSigner(t, opts, newCA(t))
	if _, err := cl.NodePublishVolume(ctxWithTimeout(t, pollTimeout), req); err != nil {
		t.Fatalf("retry: %v", err)
	}
	meta, err := store.ReadMetadata("vol-1")
	if err != nil || !meta.Mounted || meta.NextIssuanceTime == nil {
		t.Fatalf("after retry: %+v, %v", meta, err)
	}
	files, _ := store.ReadFiles("vol-1")
	if _, err := testkit.VerifyKeyPair(files["tls.key"], files["tls.crt"], files["ca.crt"], time.Now()); err != nil {
		t.Fatal(err)
	}
	// The retry resumed the request of the timed-out publish, with its key.
	if n := testkit.CountActions(opts.Client.(*fake.Clientset), "create"); n != 1 {
		t.Fatalf("%d CertificateRequests created across the retry, want 1", n)
	}
}

// TestDeniedRequestIsUnknownWithTheManagersText: a definite issuance failure reaches kubelet as
// codes.Unknown carrying the manager's error, as upstream (a dead connection never gives
// Unknown), and the failed first publish leaves nothing behind.
func TestDeniedRequestIsUnknownWithTheManagersText(t *testing.T) {
	store, opts, cl := runWithRealIssuance(t, testdriver.Options{})
	ctx := ctxWithTimeout(t, pollTimeout)
	go testutil.SetOneCertificateRequestCondition(ctx, t, opts.Client, namespace, testkit.Denied("no such identity"))
	_, err := cl.NodePublishVolume(ctx, publishRequest(t, "vol-1"))
	if status.Code(err) != codes.Unknown || !strings.HasSuffix(status.Convert(err).Message(), `has been denied by the approval plugin: no such identity`) {
		t.Fatalf("publish = %v; want Unknown with the manager's denial", err)
	}
	if ids, _ := store.ListVolumes(); len(ids) != 0 {
		t.Fatalf("volumes left after a failed first publish: %v", ids)
	}
}

// TestRefusedCreateIsPermissionDenied: when the apiserver refuses the driver's create (its
// account lacks the verb), the publish answers PermissionDenied naming the verb, the resource
// and the account, creates nothing and leaves nothing behind; with the verb granted, kubelet's
// retry succeeds.
func TestRefusedCreateIsPermissionDenied(t *testing.T) {
	fakeClient := fake.NewSimpleClientset()
	rbac := testkit.WithRBAC(fakeClient, testkit.DriverAccount, "watch", "delete", "list")
	store, opts, cl := runWithRealIssuance(t, testdriver.Options{Client: rbac})
	ctx := ctxWithTimeout(t, pollTimeout)
	req := publishRequest(t, "vol-1")
	_, err := cl.NodePublishVolume(ctx, req)
	msg := status.Convert(err).Message()
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("publish = %v; want PermissionDenied", err)
	}
	for _, want := range []string{"create certificaterequests.cert-manager.io", testkit.DriverAccount, `namespace "` + namespace + `"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not name %q", msg, want)
		}
	}
	if ids, _ := store.ListVolumes(); len(ids) != 0 {
		t.Fatalf("volumes left after a refused first publish: %v", ids)
	}
	if list, _ := fakeClient.CertmanagerV1().CertificateRequests(namespace).List(ctx, metav1.ListOptions{}); len(list.Items) != 0 {
		t.Fatalf("%d requests after a refused create", len(list.Items))
	}
	if mounts, _ := opts.Mounter.List(); len(mounts) != 0 {
		t.Fatalf("mounts left after a refused publish: %v", mounts)
	}

	rbac.Grant("create")
	signerOpts := opts
	signerOpts.Client = fakeClient // cert-manager's own account
	startSigner(t, signerOpts, newCA(t))
	if _, err := cl.NodePublishVolume(ctx, req); err != nil {
		t.Fatalf("publish once create is granted: %v", err)
	}
}

// TestRequestDeletedWhilePublishingIsAborted: the request a publish waits for is deleted (the
// garbage collector does so when the pod is gone): the publish ends at once with Aborted, a code
// kubelet takes as "maybe mounted", so that it unpublishes, and the failed first publish leaves
// nothing behind.
func TestRequestDeletedWhilePublishingIsAborted(t *testing.T) {
	store, opts, cl := runWithRealIssuance(t, testdriver.Options{})
	ctx := ctxWithTimeout(t, pollTimeout)
	go func() {
		req, err := testutil.WaitAndGetOneCertificateRequestInNamespace(ctx, opts.Client, namespace)
		if err == nil {
			_ = opts.Client.CertmanagerV1().CertificateRequests(namespace).Delete(ctx, req.Name, metav1.DeleteOptions{})
		}
	}()
	_, err := cl.NodePublishVolume(ctx, publishRequest(t, "vol-1"))
	if status.Code(err) != codes.Aborted || !strings.Contains(status.Convert(err).Message(), "deleted before it was issued") {
		t.Fatalf("publish = %v; want Aborted naming the deleted request", err)
	}
	if ids, _ := store.ListVolumes(); len(ids) != 0 {
		t.Fatalf("volumes left after a failed first publish: %v", ids)
	}
}

func TestUnpublish(t *testing.T) {
	store, opts, cl := runWithRealIssuance(t, testdriver.Options{})
	startSigner(t, opts, newCA(t))
	ctx := ctxWithTimeout(t, pollTimeout)
	if _, err := cl.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "unknown", TargetPath: t.TempDir() + "/nope"}); err != nil {
		t.Fatalf("unpublishing an unknown volume: %v", err)
	}
	req := publishRequest(t, "vol-1")
	if _, err := cl.NodePublishVolume(ctx, req); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if _, err := cl.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "vol-1", TargetPath: req.TargetPath}); err != nil {
			t.Fatalf("unpublish %d: %v", i, err)
		}
	}
	if _, err := store.ReadMetadata("vol-1"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("volume still stored: %v", err)
	}
	if n := len(mountPoints(t, opts)); n != 0 {
		t.Fatalf("%d mounts left", n)
	}
}

func TestNodeInfoAndCapabilities(t *testing.T) {
	_, cl, _ := testdriver.Run(t, testdriver.Options{NodeID: "node-a"})
	info, err := cl.NodeGetInfo(context.Background(), &csi.NodeGetInfoRequest{})
	if err != nil || info.NodeId != "node-a" {
		t.Fatalf("NodeGetInfo = %v, %v", info, err)
	}
	caps, err := cl.NodeGetCapabilities(context.Background(), &csi.NodeGetCapabilitiesRequest{})
	if err != nil || len(caps.Capabilities) != 1 || caps.Capabilities[0].GetRpc().GetType() != csi.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP {
		t.Fatalf("NodeGetCapabilities = %v, %v", caps, err)
	}
}

func TestRequestLogsRedactToken(t *testing.T) {
	const secret = "super-secret-service-account-token"
	var mu sync.Mutex
	var logs strings.Builder
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		logs.WriteString(prefix + " " + args + "\n")
		mu.Unlock()
	}, funcr.Options{Verbosity: 10})
	store := storage.NewMemoryFS()
	o := testdriver.Options{Log: &log}
	realIssuance(&o, store)
	opts, cl, stop := testdriver.Run(t, o)
	startSigner(t, opts, newCA(t))
	req := publishRequest(t, "vol-1")
	req.VolumeContext[metadata.SATokenVolumeContextKey] = `{"":{"token":"` + secret + `"}}`
	if _, err := cl.NodePublishVolume(ctxWithTimeout(t, pollTimeout), req); err != nil {
		t.Fatal(err)
	}
	stop()
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(logs.String(), secret) {
		t.Fatal("the service-account token reached the log")
	}
	if !strings.Contains(logs.String(), "NodePublishVolume") || !strings.Contains(logs.String(), metadata.Redacted) {
		t.Fatal("the call was not logged with the token redacted")
	}
}

// crashableStore wraps a store; after crash() it silently drops every write and removal, so
// the state is what a killed process would have left.
type crashableStore struct {
	*storage.MemoryFS
	crashed atomic.Bool
}

func (c *crashableStore) crash() { c.crashed.Store(true) }
func (c *crashableStore) WriteMetadata(id string, m metadata.Metadata) error {
	if c.crashed.Load() {
		return nil
	}
	return c.MemoryFS.WriteMetadata(id, m)
}
func (c *crashableStore) RegisterMetadata(m metadata.Metadata) (bool, error) {
	if c.crashed.Load() {
		return false, nil
	}
	return c.MemoryFS.RegisterMetadata(m)
}
func (c *crashableStore) WriteFiles(m metadata.Metadata, f map[string][]byte) error {
	if c.crashed.Load() {
		return nil
	}
	return c.MemoryFS.WriteFiles(m, f)
}
func (c *crashableStore) RemoveVolume(id string) error {
	if c.crashed.Load() {
		return nil
	}
	return c.MemoryFS.RemoveVolume(id)
}

func TestRestartDuringFirstIssuanceSweepsTheVolume(t *testing.T) {
	mem := storage.NewMemoryFS()
	crashable := &crashableStore{MemoryFS: mem}
	client := fake.NewClientset()
	o := testdriver.Options{Client: client}
	realIssuance(&o, crashable)
	opts, cl, stop := testdriver.Run(t, o)
	publishDone := make(chan error, 1)
	go func() {
		_, err := cl.NodePublishVolume(ctxWithTimeout(t, pollTimeout), publishRequest(t, "vol-1"))
		publishDone <- err
	}()
	waitForRequest(t, opts)
	crashable.crash() // the process dies here; the pod is deleted while it is down
	stop()
	<-publishDone
	if meta, err := mem.ReadMetadata("vol-1"); err != nil || meta.Mounted {
		t.Fatalf("crash state: %+v, %v", meta, err)
	}

	// Restart on the same store: the driver's store sweeps before it serves (NewFilesystem
	// does; a test sweeps a MemoryFS itself).
	mem.Sweep(logr.Discard())
	var o2 testdriver.Options
	realIssuance(&o2, mem)
	o2.Client = client
	opts2, cl2, _ := testdriver.Run(t, o2)
	if _, err := mem.ReadMetadata("vol-1"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("never-published volume survived the restart: %v", err)
	}
	// A publish of another volume runs to completion; had vol-1 been resumed, its loop (due at
	// once, zero backoff) would have created a request by then.
	startSigner(t, opts2, newCA(t))
	if _, err := cl2.NodePublishVolume(ctxWithTimeout(t, pollTimeout), publishRequest(t, "vol-2")); err != nil {
		t.Fatal(err)
	}
	list, err := opts2.Client.CertmanagerV1().CertificateRequests(namespace).List(context.Background(), metav1.ListOptions{
		LabelSelector: "csi.cert-manager.io/volume-id-hash=" + util.HashIdentifier("vol-1"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("%d requests for vol-1 after restart, want only the one from before the crash", len(list.Items))
	}
}

func TestRestartResumesAndRenewsMountedVolume(t *testing.T) {
	clk := testclock.NewFakeClock(time.Now())
	mem := storage.NewMemoryFS()
	client := fake.NewClientset()
	ca := newCA(t)
	o := testdriver.Options{Client: client, Clock: clk}
	realIssuance(&o, mem)
	opts, cl, stop := testdriver.Run(t, o)
	s := startSigner(t, opts, ca)
	if _, err := cl.NodePublishVolume(ctxWithTimeout(t, pollTimeout), publishRequest(t, "vol-1")); err != nil {
		t.Fatal(err)
	}
	first, _ := mem.ReadMetadata("vol-1")
	stop()
	s.stop()

	var o2 testdriver.Options
	written := realIssuance(&o2, mem)
	o2.Client, o2.Clock = client, clk
	opts2, _, _ := testdriver.Run(t, o2)
	startSigner(t, opts2, ca)
	poll(t, "the resumed loop to wait for the due time", func() bool { return clk.HasWaiters() })
	clk.SetTime(first.NextIssuanceTime.Add(time.Second))
	waitWritten(t, written, "vol-1")
	if meta, _ := mem.ReadMetadata("vol-1"); meta.NextIssuanceTime == nil || !meta.NextIssuanceTime.After(*first.NextIssuanceTime) {
		t.Fatalf("renewal did not advance the next issuance time: %v", meta.NextIssuanceTime)
	}
	if meta, _ := mem.ReadMetadata("vol-1"); !meta.Mounted {
		t.Fatal("renewal cleared mounted")
	}
}

func TestRestartWithUpstreamMetadata(t *testing.T) {
	mem := storage.NewMemoryFS()
	issued := `{"volumeID":"legacy-issued","targetPath":"/t1","nextIssuanceTime":"2020-01-01T00:00:00Z","volumeContext":{"csi.storage.k8s.io/pod.name":"p1","csi.storage.k8s.io/pod.namespace":"certificaterequest-namespace","csi.storage.k8s.io/pod.uid":"u1","csi.storage.k8s.io/ephemeral":"true"}}`
	unissued := `{"volumeID":"legacy-unissued","targetPath":"/t2","volumeContext":{"csi.storage.k8s.io/pod.name":"p2"}}`
	for id, raw := range map[string]string{"legacy-issued": issued, "legacy-unissued": unissued} {
		if err := mem.SetRawMetadata(id, []byte(raw)); err != nil {
			t.Fatal(err)
		}
	}
	mem.Sweep(logr.Discard())
	var o testdriver.Options
	written := realIssuance(&o, mem)
	opts, _, _ := testdriver.Run(t, o)
	startSigner(t, opts, newCA(t))
	if _, err := mem.ReadMetadata("legacy-unissued"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("upstream volume without nextIssuanceTime was not swept: %v", err)
	}
	// The issued one is resumed: it is overdue, so it is renewed at once.
	waitWritten(t, written, "legacy-issued")
	meta, _ := mem.ReadMetadata("legacy-issued")
	if meta.NextIssuanceTime == nil || !meta.NextIssuanceTime.After(time.Now()) || !meta.Mounted {
		t.Fatal("resumed legacy volume not mounted")
	}
}

// busyCallDeadline is the deadline of the calls that find the volume busy.
const busyCallDeadline = 2 * time.Second

// TestBusyVolumeIsAborted: a call that cannot get the volume before its own deadline, because an
// earlier call still holds it, gets Aborted and changes nothing.
func TestBusyVolumeIsAborted(t *testing.T) {
	store, opts, cl := runWithRealIssuance(t, testdriver.Options{})
	req := publishRequest(t, "vol-1")
	first := make(chan error, 1)
	go func() {
		_, err := cl.NodePublishVolume(ctxWithTimeout(t, pollTimeout), req)
		first <- err
	}()
	waitForRequest(t, opts)
	// The deadline is the subject here: 2 s gives the node server's answer a full second to
	// reach the client before the client's own deadline, on a busy machine too.
	_, err := cl.NodePublishVolume(ctxWithTimeout(t, busyCallDeadline), req)
	if status.Code(err) != codes.Aborted {
		t.Fatalf("second call: %v, want Aborted", err)
	}
	_, err = cl.NodeUnpublishVolume(ctxWithTimeout(t, busyCallDeadline), &csi.NodeUnpublishVolumeRequest{VolumeId: "vol-1", TargetPath: req.TargetPath})
	if status.Code(err) != codes.Aborted {
		t.Fatalf("unpublish during publish: %v, want Aborted", err)
	}
	startSigner(t, opts, newCA(t))
	if err := <-first; err != nil {
		t.Fatalf("first call: %v", err)
	}
	if meta, _ := store.ReadMetadata("vol-1"); !meta.Mounted {
		t.Fatal("the aborted calls disturbed the first one")
	}
}

// TestFailedRepublishKeepsLiveVolume: a re-publish of a volume whose earlier publish succeeded
// fails (here: the mount check errors), and the live volume is left exactly as it was.
func TestFailedRepublishKeepsLiveVolume(t *testing.T) {
	store, opts, cl := runWithRealIssuance(t, testdriver.Options{})
	startSigner(t, opts, newCA(t))
	req := publishRequest(t, "vol-1")
	if _, err := cl.NodePublishVolume(ctxWithTimeout(t, pollTimeout), req); err != nil {
		t.Fatal(err)
	}
	before, _ := store.ReadFiles("vol-1")
	opts.Mounter.(*mount.FakeMounter).MountCheckErrors = map[string]error{req.TargetPath: errors.New("stat: transport endpoint is not connected")}
	_, err := cl.NodePublishVolume(ctxWithTimeout(t, pollTimeout), req)
	if status.Code(err) != codes.Internal {
		t.Fatalf("re-publish with a broken mount check: %v, want Internal", err)
	}
	meta, err := store.ReadMetadata("vol-1")
	if err != nil || !meta.Mounted {
		t.Fatalf("live volume torn down by a failed re-publish: %+v, %v", meta, err)
	}
	after, _ := store.ReadFiles("vol-1")
	if string(after["tls.crt"]) != string(before["tls.crt"]) {
		t.Fatal("the live volume's files changed")
	}
	if n := countRequests(t, opts); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
}

// TestStopLeavesNoGoroutines: after the stop function returns, the manager's loops, its
// informer and the gRPC server are gone.
func TestStopLeavesNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	store := storage.NewMemoryFS()
	var o testdriver.Options
	realIssuance(&o, store)
	opts, cl, stop := testdriver.Run(t, o)
	signer := startSigner(t, opts, newCA(t))
	for _, id := range []string{"vol-1", "vol-2", "vol-3"} {
		if _, err := cl.NodePublishVolume(ctxWithTimeout(t, pollTimeout), publishRequest(t, id)); err != nil {
			t.Fatal(err)
		}
	}
	signer.stop()
	stop()
	deadline := time.Now().Add(pollTimeout)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines after stop, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// countingStore counts metadata reads.
type countingStore struct {
	*storage.MemoryFS
	reads atomic.Int32
}

func (c *countingStore) ReadMetadata(id string) (metadata.Metadata, error) {
	c.reads.Add(1)
	return c.MemoryFS.ReadMetadata(id)
}

// TestPublishReadsMetadataOnceAndAsksTheGateOnce: a first publish reads the volume's metadata
// once and asks the readiness gate once before its key pair is written; a publish of a volume
// whose certificate is not due reads once and does not ask the gate.
func TestPublishReadsMetadataOnceAndAsksTheGateOnce(t *testing.T) {
	store := &countingStore{MemoryFS: storage.NewMemoryFS()}
	var gateCalls atomic.Int32
	o := testdriver.Options{ReadyToRequest: func(metadata.Metadata) (bool, string) {
		gateCalls.Add(1)
		return true, ""
	}}
	realIssuance(&o, store)
	var readsAtWrite, gateCallsAtWrite atomic.Int32
	o.WriteKeypair = testkit.KeypairWriter(store, func(metadata.Metadata, crypto.PrivateKey, []byte) {
		readsAtWrite.Store(store.reads.Load())
		gateCallsAtWrite.Store(gateCalls.Load())
	})
	opts, cl, _ := testdriver.Run(t, o)
	startSigner(t, opts, newCA(t))

	req := publishRequest(t, "vol-1")
	store.reads.Store(0)
	if _, err := cl.NodePublishVolume(ctxWithTimeout(t, pollTimeout), req); err != nil {
		t.Fatal(err)
	}
	if r, g := readsAtWrite.Load(), gateCallsAtWrite.Load(); r != 1 || g != 1 {
		t.Errorf("before the key pair was written: %d metadata reads and %d gate calls, want 1 and 1", r, g)
	}
	// The loop starts after the publish's attempt and reads the metadata once before it waits
	// until due: let that read happen before counting the second publish's.
	poll(t, "the loop's first read of the metadata", func() bool { return store.reads.Load() >= 2 })

	store.reads.Store(0)
	gateCalls.Store(0)
	if _, err := cl.NodePublishVolume(ctxWithTimeout(t, pollTimeout), req); err != nil {
		t.Fatal(err)
	}
	if r, g := store.reads.Load(), gateCalls.Load(); r != 1 || g != 0 {
		t.Errorf("publish of a volume whose certificate is not due: %d metadata reads and %d gate calls, want 1 and 0", r, g)
	}
}

// TestPodConditionThroughTheHarness: a driver's test can turn on the pod condition through the
// harness; a publish that issues the certificate leaves the pod's condition True.
func TestPodConditionThroughTheHarness(t *testing.T) {
	const condType = corev1.PodConditionType("csi.example.com/certificate-ready")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-vol-1", Namespace: namespace, UID: "uid-vol-1"}}
	kube := kubefake.NewClientset(pod)
	store, opts, cl := runWithRealIssuance(t, testdriver.Options{PodCondition: &manager.PodCondition{Type: condType, Client: kube.CoreV1()}})
	startSigner(t, opts, newCA(t))
	if _, err := cl.NodePublishVolume(ctxWithTimeout(t, pollTimeout), publishRequest(t, "vol-1")); err != nil {
		t.Fatal(err)
	}
	if files, _ := store.ReadFiles("vol-1"); len(files["tls.crt"]) == 0 {
		t.Fatal("no certificate in the volume")
	}
	poll(t, "the pod's condition", func() bool {
		p, err := kube.CoreV1().Pods(namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, c := range p.Status.Conditions {
			if c.Type == condType {
				return c.Status == corev1.ConditionTrue && c.Reason == manager.PodConditionReasonValid
			}
		}
		return false
	})
}
