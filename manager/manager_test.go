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

package manager

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"
	testclock "k8s.io/utils/clock/testing"

	"github.com/cert-manager/csi-lib/internal/api"
	"github.com/cert-manager/csi-lib/internal/api/util"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/storage"
	"github.com/cert-manager/csi-lib/test/testkit"
)

const (
	issueErrors = "certmanager_csi_issue_errors_total"
	gatePending = "certmanager_csi_issue_gate_pending_total"
	issueCalls  = "certmanager_csi_issue_requests_total"
)

func TestBackoffSequenceByErrorClass(t *testing.T) {
	e := newEnv(t, nil)
	e.gateOpen.Store(false)
	e.register("v1", true)
	e.start() // resumes the mounted volume: due at once
	wantErrors, wantPending := 0.0, 0.0

	// Gate pending four times: 1 s after the first turn's attempt (the first step, not taken),
	// then 1 s, 2 s, 4 s.
	for _, d := range []time.Duration{time.Second, time.Second, 2 * time.Second, 4 * time.Second} {
		e.expectAttemptThenWait(d)
		wantPending++
		e.stepWait(d)
	}
	// An issuance error: the renewal backoff's first step.
	e.gateOpen.Store(true)
	e.failKeygen.Store(true)
	e.expectAttemptThenWait(30 * time.Second)
	wantErrors++
	// Gate pending again: the error reset the gate backoff, so 1 s.
	e.gateOpen.Store(false)
	e.stepWait(30 * time.Second)
	e.expectAttemptThenWait(time.Second)
	wantPending++
	// Errors: gate pending reset the renewal backoff, so 30 s, 60 s, ... up to the 5 min cap.
	e.gateOpen.Store(true)
	e.stepWait(time.Second)
	for _, d := range []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 5 * time.Minute, 5 * time.Minute} {
		e.expectAttemptThenWait(d)
		wantErrors++
		e.stepWait(d)
	}
	// Success resets both: the loop waits until the certificate is due (2/3 of 1 h).
	e.failKeygen.Store(false)
	if d := e.nextTimer(); d != issueTimeout {
		t.Fatalf("expected an attempt, got a %v timer", d)
	}
	e.issuePending()
	e.expectWait(40 * time.Minute)
	// The next error starts the renewal backoff from its base again.
	e.failKeygen.Store(true)
	e.stepWait(40 * time.Minute)
	e.expectAttemptThenWait(30 * time.Second)
	wantErrors++

	if got := e.counter(issueErrors, "v1"); got != wantErrors {
		t.Errorf("issue_errors_total = %v, want %v (gate-pending attempts must not count)", got, wantErrors)
	}
	// Upstream's families only (the default): gate-pending attempts are attempts, not errors.
	if n, err := testutil.GatherAndCount(e.registry, gatePending); err != nil || n != 0 {
		t.Errorf("issue_gate_pending_total has %d series without EnableExtendedMetrics (%v)", n, err)
	}
	if got := e.counter(issueCalls, "v1"); got != wantErrors+wantPending+1 {
		t.Errorf("issue_requests_total = %v, want %v", got, wantErrors+wantPending+1)
	}
}

func TestRequeueCutsGateWaitButNotErrorWait(t *testing.T) {
	e := newEnv(t, nil)
	e.gateOpen.Store(false)
	e.register("v1", true)
	m := e.start()
	e.expectAttemptThenWait(time.Second)

	// During a gate wait, Requeue attempts at once (no clock step) and RequeuePod does too. The
	// first turn's refusal did not take the gate backoff's first step, so the waits are 1 s, 2 s.
	m.Requeue("v1")
	e.expectAttemptThenWait(time.Second)
	m.RequeuePod("uid-v1")
	e.expectAttemptThenWait(2 * time.Second)

	// During an error wait, Requeue does nothing: the wait runs its full 30 s. The failing
	// attempt itself calls Requeue, so the Requeue is already pending when the wait begins: a
	// wait that listened to it would return at once, and the loop would spin.
	e.gateOpen.Store(true)
	e.failKeygen.Store(true)
	e.requeueOnError.Store(true)
	m.Requeue("v1")
	e.expectAttemptThenWait(30 * time.Second)
	attemptsBefore := e.counter(issueCalls, "v1")
	m.RequeuePod("uid-v1")
	e.stepNotYet(30 * time.Second)
	if got := e.counter(issueCalls, "v1"); got != attemptsBefore {
		t.Fatalf("Requeue caused an attempt during an error wait (%v attempts, want %v)", got, attemptsBefore)
	}
	e.requeueOnError.Store(false)
	e.clock.Step(time.Millisecond)
	e.expectAttemptThenWait(time.Minute)
	// The attempt answered the Requeues that came before it: they do not cut the next wait
	// either.
	e.stepNotYet(time.Minute)
}

func TestUnmanageAndStopLeaveNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	e := newEnv(t, withExtendedMetrics(nil))
	e.gateOpen.Store(false)
	e.register("v1", true)
	e.register("v2", true)
	m := e.start()
	e.poll("both loops to wait", func() bool {
		return e.clock.Waiters() == 2 && e.counter(gatePending, "v2") == 1 && e.counter(gatePending, "v1") == 1
	})

	m.UnmanageVolume("v1")
	e.poll("v1's loop to stop waiting", func() bool { return e.clock.Waiters() == 1 })
	if n := e.managedCount(); m.IsVolumeReady("v1") || n != 1 {
		t.Fatalf("v1 still managed (%v volumes counted)", n)
	}
	// Series survive UnmanageVolume (kubelet may publish the volume again); they go when the
	// volume is gone for good.
	if e.counter(gatePending, "v1") != 1 {
		t.Fatal("UnmanageVolume deleted the volume's series")
	}
	m.DeleteVolumeMetricSeries("v1")
	if e.counter(gatePending, "v1") != 0 {
		t.Fatal("DeleteVolumeMetricSeries kept the volume's series")
	}
	m.UnmanageVolume("unknown") // no-op
	if alreadyManaged(m, "v1") || !alreadyManaged(m, "v2") {
		t.Fatal("v1 still managed, or v2 no longer")
	}
	m.Stop()
	m.Stop() // safe twice
	if w := e.clock.Waiters(); w != 0 {
		t.Fatalf("after Stop %d timers remain", w)
	}
	if m.ManageVolume("v2") {
		t.Fatal("ManageVolume succeeded after Stop")
	}
	if _, err := m.ManageVolumeImmediate(context.Background(), "v2"); err == nil {
		t.Fatal("ManageVolumeImmediate succeeded after Stop")
	}
	e.poll("goroutines to exit", func() bool { return runtime.NumGoroutine() <= before })
}

// TestWaitingVolumesHoldNoGoroutine: a volume waiting on the work queue costs a timer of the
// clock, and no goroutine: 100 more waiting volumes leave the goroutine count where one left it.
func TestWaitingVolumesHoldNoGoroutine(t *testing.T) {
	e := newEnv(t, nil)
	e.gateOpen.Store(false)
	e.register("v0", true)
	m := e.start()
	e.poll("the first loop to wait", func() bool { return e.clock.Waiters() == 1 && e.gateCalls.Load() == 1 })
	one := runtime.NumGoroutine()
	for i := 1; i <= 100; i++ {
		id := fmt.Sprintf("v%d", i)
		e.register(id, true)
		if !m.ManageVolume(id) {
			t.Fatalf("ManageVolume(%s) = false", id)
		}
	}
	// Each loop has taken its turn (the gate said "not yet") and waits on a timer.
	e.poll("101 loops to wait", func() bool { return e.clock.Waiters() == 101 && e.gateCalls.Load() == 101 })
	e.poll("the workers to end", func() bool { return runtime.NumGoroutine() <= one+5 })
}

func TestRequestLabelsOwnerAndSpec(t *testing.T) {
	e := newEnv(t, nil)
	meta := e.register("v1", false)
	m := e.start()
	done := make(chan error, 1)
	go func() { _, err := m.ManageVolumeImmediate(context.Background(), "v1"); done <- err }()
	req := e.waitForPending()
	if got := req.Labels[api.NodeIDHashLabelKey]; got != "f56fd9f8b" {
		t.Errorf("node hash label = %q, want f56fd9f8b", got)
	}
	if got := req.Labels[api.VolumeIDHashLabelKey]; got != util.HashIdentifier("v1") {
		t.Errorf("volume hash label = %q", got)
	}
	if len(req.OwnerReferences) != 1 {
		t.Fatalf("owner references = %+v", req.OwnerReferences)
	}
	if !req.CreationTimestamp.IsZero() {
		t.Errorf("CreationTimestamp = %v; the manager must leave it to the apiserver", req.CreationTimestamp)
	}
	ref := req.OwnerReferences[0]
	if ref.APIVersion != "v1" || ref.Kind != "Pod" || ref.Name != "pod-v1" || string(ref.UID) != "uid-v1" {
		t.Errorf("owner reference = %+v", ref)
	}
	if req.Annotations["a"] != "b" || req.Spec.IssuerRef.Name != "issuer" || req.Spec.Duration.Duration != time.Hour ||
		len(req.Spec.Usages) != 1 || req.Spec.IsCA || req.Namespace != "ns" {
		t.Errorf("spec not taken from the bundle: %+v %+v", req.Annotations, req.Spec)
	}
	issued, err := testkit.Issue(context.Background(), e.client, e.ca, req, e.clock.Now().Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Default next issuance time: two thirds of the way from NotBefore to NotAfter.
	stored, err := e.store.ReadMetadata("v1")
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(issued.Status.Certificate)
	cert, _ := x509.ParseCertificate(block.Bytes)
	want := cert.NotBefore.Add(40 * time.Minute)
	if stored.NextIssuanceTime == nil || !stored.NextIssuanceTime.Equal(want) {
		t.Errorf("next issuance time = %v, want %v", stored.NextIssuanceTime, want)
	}
	if !m.IsVolumeReady("v1") {
		t.Error("volume with a fresh certificate is not ready")
	}
	files, _ := e.store.ReadFiles("v1")
	if _, err := testkit.VerifyKeyPair(files["tls.key"], files["tls.crt"], files["ca.crt"], e.clock.Now()); err != nil {
		t.Errorf("written key pair does not verify: %v", err)
	}
	_ = meta
}

func TestStaleRequestsAreDeletedOldestFirst(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.MaxRequestsPerVolume = 2 })
	e.register("v1", false)
	for i, age := range []time.Duration{3 * time.Hour, 2 * time.Hour, time.Hour} {
		req := &cmapi.CertificateRequest{ObjectMeta: metav1.ObjectMeta{
			Name: []string{"oldest", "middle", "newest"}[i], Namespace: "ns",
			CreationTimestamp: metav1.NewTime(start.Add(-age)),
			Labels:            map[string]string{api.NodeIDHashLabelKey: "f56fd9f8b", api.VolumeIDHashLabelKey: util.HashIdentifier("v1")},
		}}
		req.Status.Conditions = []cmapi.CertificateRequestCondition{testkit.Failed("old")}
		if _, err := e.client.CertmanagerV1().CertificateRequests("ns").Create(context.Background(), req, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.start()
	e.manageAndIssue("v1")
	var names []string
	for _, r := range e.requests() {
		if r.Name == "oldest" || r.Name == "middle" || r.Name == "newest" {
			names = append(names, r.Name)
		}
	}
	// As upstream: delete down to MaxRequestsPerVolume, oldest first, before anything else;
	// the newest is Failed (not certrequests.Resumable), so it is left and the new one created beside it.
	if len(e.requests()) != 3 || len(names) != 2 || names[0] != "middle" || names[1] != "newest" {
		t.Fatalf("kept %d requests, old ones %v; want middle, newest and the new one", len(e.requests()), names)
	}
}

func TestPendingRequestResumedWhileKeyInMemory(t *testing.T) {
	e := newEnv(t, nil)
	e.register("v1", true)
	e.start()
	if d := e.nextTimer(); d != issueTimeout {
		t.Fatalf("expected an attempt, got %v", d)
	}
	first := e.waitForPending()
	e.waitInformerHas(first)
	// Nobody signs: the attempt times out after 60 s on the injected clock.
	e.poll("the attempt to wait on its deadline", func() bool { return e.clock.Waiters() == 1 })
	e.clock.Step(issueTimeout)
	e.expectWait(30 * time.Second)
	if got := e.counter(issueErrors, "v1"); got != 1 {
		t.Fatalf("timed-out attempt counted %v errors, want 1", got)
	}
	e.stepWait(30 * time.Second)
	if d := e.nextTimer(); d != issueTimeout {
		t.Fatalf("expected a second attempt, got %v", d)
	}
	e.poll("the second attempt to wait", func() bool { return e.clock.Waiters() == 1 })
	if reqs := e.requests(); len(reqs) != 1 || reqs[0].Name != first.Name {
		t.Fatalf("the pending request was not resumed: %d requests", len(reqs))
	}
	issued := e.issuePending()
	e.expectWait(40 * time.Minute)
	// The key written is the one the request was made with.
	e.mu.Lock()
	key := e.written["v1"][0]
	e.mu.Unlock()
	block, _ := pem.Decode(issued.Status.Certificate)
	cert, _ := x509.ParseCertificate(block.Bytes)
	if !key.(crypto.Signer).Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(cert.PublicKey) {
		t.Fatal("written key does not match the resumed request")
	}
	e.expectKeyForgotten("v1")
}

func TestPendingRequestWithoutKeyIsReplaced(t *testing.T) {
	e := newEnv(t, nil)
	e.register("v1", false)
	orphan := &cmapi.CertificateRequest{ObjectMeta: metav1.ObjectMeta{
		Name: "orphan", Namespace: "ns", CreationTimestamp: metav1.NewTime(start),
		Labels: map[string]string{api.NodeIDHashLabelKey: "f56fd9f8b", api.VolumeIDHashLabelKey: util.HashIdentifier("v1")},
	}}
	if _, err := e.client.CertmanagerV1().CertificateRequests("ns").Create(context.Background(), orphan, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m := e.start()
	done := make(chan error, 1)
	go func() { _, err := m.ManageVolumeImmediate(context.Background(), "v1"); done <- err }()
	e.poll("the orphan to be replaced", func() bool {
		reqs := e.requests()
		return len(reqs) == 1 && reqs[0].Name != "orphan"
	})
	e.issuePending()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestDeniedAndFailedEndTheAttempt(t *testing.T) {
	for name, cond := range map[string]cmapi.CertificateRequestCondition{
		"denied": testkit.Denied("policy says nope"),
		"failed": testkit.Failed("policy says nope"),
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, nil)
			e.register("v1", false)
			m := e.start()
			done := make(chan error, 1)
			go func() { _, err := m.ManageVolumeImmediate(context.Background(), "v1"); done <- err }()
			req := e.waitForPending()
			if _, err := testkit.SetConditions(context.Background(), e.client, req, cond); err != nil {
				t.Fatal(err)
			}
			err := <-done
			if err == nil || !strings.Contains(err.Error(), "policy says nope") || !strings.Contains(err.Error(), name) {
				t.Fatalf("error = %v, want one naming %s with the request's message", err, name)
			}
			if errors.Is(err, ErrNotReadyToRequest) {
				t.Fatal("a denied or failed request is not gate-pending")
			}
			if got := e.counter(issueErrors, "v1"); got != 1 {
				t.Fatalf("issue_errors_total = %v, want 1", got)
			}
		})
	}
}

func TestManageVolumeImmediateGateClosed(t *testing.T) {
	e := newEnv(t, withExtendedMetrics(nil))
	e.gateOpen.Store(false)
	e.register("v1", false)
	m := e.start()
	managed, err := m.ManageVolumeImmediate(context.Background(), "v1")
	if !managed || !errors.Is(err, ErrNotReadyToRequest) {
		t.Fatalf("ManageVolumeImmediate = %v, %v; want true, ErrNotReadyToRequest", managed, err)
	}
	var nr *NotReadyToRequestError
	if !errors.As(err, &nr) || nr.Reason != "pod has no IP yet" {
		t.Fatalf("reason lost: %v", err)
	}
	if want := "driver is not ready to request a certificate for this volume: pod has no IP yet"; err.Error() != want {
		t.Fatalf("error = %q, want upstream's %q", err, want)
	}
	// As upstream: the volume stays registered for the caller to unmanage, and no loop starts.
	if !alreadyManaged(m, "v1") {
		t.Fatal("volume not left registered")
	}
	if e.loopsStartedFor("v1") != 0 || e.gateCalls.Load() != 1 {
		t.Fatalf("a loop started after a failed immediate attempt (gate calls %d)", e.gateCalls.Load())
	}
	// An immediate attempt's gate refusal is an issuance error too (upstream counts every error
	// the immediate attempt returns), and a gate-pending attempt.
	if got := e.counter(issueErrors, "v1"); got != 1 {
		t.Errorf("issue_errors_total = %v, want 1", got)
	}
	if got := e.counter(gatePending, "v1"); got != 1 {
		t.Errorf("issue_gate_pending_total = %v, want 1", got)
	}
	if ok, reason := m.IsVolumeReadyToRequest("v1"); ok || reason != "pod has no IP yet" {
		t.Fatalf("IsVolumeReadyToRequest = %v, %q", ok, reason)
	}
	if ok, reason := m.IsVolumeReadyToRequest("missing"); ok || reason != "" {
		t.Fatalf("IsVolumeReadyToRequest(missing) = %v, %q; want false, \"\"", ok, reason)
	}
}

// failingReader fails ReadMetadata for one volume.
type failingReader struct {
	storage.MetadataReader
	fail string
}

func (r failingReader) ReadMetadata(id string) (metadata.Metadata, error) {
	if id == r.fail {
		return metadata.Metadata{}, errors.New("disk on fire")
	}
	return r.MetadataReader.ReadMetadata(id)
}

// TestManageReturnsAsUpstream pins what ManageVolume and ManageVolumeImmediate return and do.
func TestManageReturnsAsUpstream(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.MetadataReader = failingReader{MetadataReader: o.MetadataReader, fail: "broken"} })
	e.register("v1", false)
	e.register("broken", false)
	m := e.start()

	// ManageVolume reads nothing: unreadable metadata still registers, and only the first call
	// reports true.
	if !m.ManageVolume("broken") {
		t.Fatal("ManageVolume(broken) = false; it reads no metadata, so want true")
	}
	if m.ManageVolume("broken") {
		t.Fatal("second ManageVolume = true; want false (already managed)")
	}
	m.UnmanageVolume("broken")

	// ManageVolumeImmediate: a read error leaves the volume registered, no loop.
	loops := e.loopsStartedFor("broken") // ManageVolume's
	managed, err := m.ManageVolumeImmediate(context.Background(), "broken")
	if !managed || err == nil || !strings.HasPrefix(err.Error(), "reading metadata: ") {
		t.Fatalf("ManageVolumeImmediate(broken) = %v, %v; want true, reading metadata: ...", managed, err)
	}
	if !alreadyManaged(m, "broken") || e.loopsStartedFor("broken") != loops {
		t.Fatal("after a read error the volume must stay registered without a loop")
	}

	// A success starts the loop; a second call on a managed volume is (false, nil) with no
	// attempt.
	done := make(chan error, 1)
	go func() {
		managed, err := m.ManageVolumeImmediate(context.Background(), "v1")
		if !managed {
			err = errors.New("not managed")
		}
		done <- err
	}()
	e.issuePending()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := e.loopsStartedFor("v1"); n != 1 {
		t.Fatalf("%d loops started for v1 after its success, want 1", n)
	}
	calls := e.counter(issueCalls, "v1")
	if managed, err := m.ManageVolumeImmediate(context.Background(), "v1"); managed || err != nil {
		t.Fatalf("ManageVolumeImmediate on a managed volume = %v, %v; want false, nil", managed, err)
	}
	if got := e.counter(issueCalls, "v1"); got != calls {
		t.Fatalf("a managed volume got another attempt (%v calls, want %v)", got, calls)
	}
	if n := len(e.requests()); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}

	// IsVolumeReady is true up to and including the next issuance time.
	meta, _ := e.store.ReadMetadata("v1")
	e.clock.SetTime(*meta.NextIssuanceTime)
	if !m.IsVolumeReady("v1") {
		t.Fatal("IsVolumeReady at Now == NextIssuanceTime = false; want true")
	}
	e.clock.SetTime(meta.NextIssuanceTime.Add(time.Nanosecond))
	if m.IsVolumeReady("v1") {
		t.Fatal("IsVolumeReady after NextIssuanceTime = true")
	}

	// After Stop: refusals, and Stop again is harmless.
	m.Stop()
	m.Stop()
	if m.ManageVolume("v2") {
		t.Fatal("ManageVolume after Stop = true")
	}
	if managed, err := m.ManageVolumeImmediate(context.Background(), "v2"); managed || err == nil {
		t.Fatalf("ManageVolumeImmediate after Stop = %v, %v; want false and an error", managed, err)
	}
}

func TestStartupResumesOnlyMountedVolumes(t *testing.T) {
	e := newEnv(t, nil)
	e.gateOpen.Store(false)
	e.register("mounted", true)
	e.register("unmounted", false)
	if err := e.store.SetRawMetadata("corrupt", []byte("{")); err != nil {
		t.Fatal(err)
	}
	legacy := `{"volumeID":"legacy","targetPath":"/t","nextIssuanceTime":"2030-01-01T00:00:00Z"}`
	if err := e.store.SetRawMetadata("legacy", []byte(legacy)); err != nil {
		t.Fatal(err)
	}
	m := e.start()
	for id, want := range map[string]bool{"mounted": true, "legacy": true, "unmounted": false, "corrupt": false} {
		if got := e.loopsStartedFor(id) == 1; got != want {
			t.Errorf("%s's loop started = %v, want %v", id, got, want)
		}
	}
	// The legacy volume is not due until 2030: its loop waits without touching storage.
	e.poll("loops to settle", func() bool { return e.clock.Waiters() == 2 })
	// Only the resumed volumes are managed (ManageVolume registers only one that is not; the
	// others are managed from here on).
	for id, want := range map[string]bool{"mounted": true, "legacy": true, "unmounted": false, "corrupt": false} {
		if got := alreadyManaged(m, id); got != want {
			t.Errorf("%s managed = %v, want %v", id, got, want)
		}
	}
}

func TestWriteKeypairWithoutNextIssuanceTimeDoesNotSpin(t *testing.T) {
	e := newEnv(t, nil)
	e.opts.WriteKeypair = func(metadata.Metadata, crypto.PrivateKey, []byte, []byte) error { return nil }
	e.register("v1", true)
	e.start()
	if d := e.nextTimer(); d != issueTimeout {
		t.Fatalf("expected an attempt, got %v", d)
	}
	e.issuePending()
	e.expectWait(40 * time.Minute)
}

func TestOptionsDefaultsAndValidation(t *testing.T) {
	e := newEnv(t, nil)
	// Upstream's texts, in upstream's order: clear the fields one by one from a complete set.
	o := e.opts
	steps := []struct {
		clear func(*Options)
		want  string
	}{
		{func(o *Options) { o.NodeID = "" }, "NodeID must be set"},
		{func(o *Options) { o.MaxRequestsPerVolume = -1 }, "MaxRequestsPerVolume cannot be less than zero"},
		{func(o *Options) { o.WriteKeypair = nil }, "WriteKeypair must be set"},
		{func(o *Options) { o.SignRequest = nil }, "SignRequest must be set"},
		{func(o *Options) { o.GenerateRequest = nil }, "GenerateRequest must be set"},
		{func(o *Options) { o.GeneratePrivateKey = nil }, "GeneratePrivateKey must be set"},
		{func(o *Options) { o.MetadataReader = nil }, "MetadataReader must be set"},
		{func(o *Options) { o.Log = nil }, "log must be set"},
		{func(o *Options) { o.Client = nil }, "client must be set"},
	}
	for _, step := range steps {
		step.clear(&o)
		if _, err := NewManager(o); err == nil || err.Error() != step.want {
			t.Fatalf("NewManager = %v, want %q", err, step.want)
		}
	}
	o = e.opts
	o.RenewalBackoffConfig, o.GateBackoffConfig, o.ClientForMetadata, o.ReadyToRequest, o.Clock = nil, nil, nil, nil, nil
	c, err := o.complete()
	if err != nil {
		t.Fatal(err)
	}
	if *c.RenewalBackoffConfig != DefaultRenewalBackoff() || *c.GateBackoffConfig != DefaultGateBackoff() {
		t.Fatalf("backoff defaults: %+v %+v", c.RenewalBackoffConfig, c.GateBackoffConfig)
	}
	if g := DefaultGateBackoff(); g.Duration != time.Second || g.Cap != 10*time.Second || g.Factor != 2 || g.Jitter != 0.5 {
		t.Fatalf("gate backoff default %+v", g)
	}
	if r := DefaultRenewalBackoff(); r.Duration != 30*time.Second || r.Cap != 5*time.Minute || r.Factor != 2 || r.Jitter != 0.5 {
		t.Fatalf("renewal backoff default %+v", r)
	}
	if c.MaxRequestsPerVolume != 1 || c.Clock == nil || c.ReadyToRequest == nil {
		t.Fatalf("defaults not filled: %+v", c)
	}
	if cl, _ := c.ClientForMetadata(metadata.Metadata{}); cl != e.client {
		t.Fatal("default ClientForMetadata does not return Client")
	}
}

func TestDefaultNextIssuanceTime(t *testing.T) {
	if _, err := defaultNextIssuanceTime([]byte("not pem")); err == nil {
		t.Fatal("garbage accepted")
	}
}

// TestAttemptDeadlineOnEitherClock: the 60 s attempt deadline runs on the injected clock,
// whether or not it offers AfterFunc; paused (as while waiting for admission) it never fires,
// and restarted it runs a full 60 s again.
func TestAttemptDeadlineOnEitherClock(t *testing.T) {
	type plainClock struct{ clock.Clock } // hides AfterFunc
	for name, wrap := range map[string]func(*testclock.FakeClock) clock.Clock{
		"with AfterFunc":    func(f *testclock.FakeClock) clock.Clock { return f },
		"without AfterFunc": func(f *testclock.FakeClock) clock.Clock { return plainClock{f} },
	} {
		t.Run(name, func(t *testing.T) {
			fc := testclock.NewFakeClock(start)
			ctx, deadline := attemptContext(wrap(fc))
			defer deadline.finish()
			fc.Step(issueTimeout - time.Millisecond)
			if ctx.Err() != nil {
				t.Fatal("attempt ended before its deadline")
			}
			if !deadline.pause() {
				t.Fatal("pause before the deadline reported it passed")
			}
			fc.Step(2 * issueTimeout)
			if ctx.Err() != nil {
				t.Fatal("a paused deadline ended the attempt")
			}
			deadline.restart()
			fc.Step(issueTimeout - time.Millisecond)
			if ctx.Err() != nil {
				t.Fatal("attempt ended before its restarted deadline")
			}
			fc.Step(time.Millisecond)
			select {
			case <-ctx.Done():
			case <-time.After(pollTimeout):
				t.Fatal("attempt did not end at its deadline")
			}
			if !errors.Is(context.Cause(ctx), errAttemptTimeout) {
				t.Fatalf("cause = %v", context.Cause(ctx))
			}
		})
	}
}

// TestADeleteThatFindsTheCacheStaleReadsTheApiserver: a request the informer's cache still
// shows is already gone from the apiserver (its delete answers NotFound), whether deleted as one
// too many (step 1: a Failed request beyond MaxRequestsPerVolume) or as a pending request whose
// key is lost (step 3). The attempt reads the volume's requests from the apiserver once, goes on
// with them, takes a request the apiserver lists but that is gone when deleted as deleted
// meanwhile, and creates the new one.
func TestADeleteThatFindsTheCacheStaleReadsTheApiserver(t *testing.T) {
	for _, tc := range []struct {
		name     string
		requests []string // oldest first, Failed unless pending
		pending  bool     // "gone" is pending (certrequests.Resumable)
		kept     []string
	}{
		{name: "one too many", requests: []string{"gone", "newest"}, kept: []string{"newest"}},
		{name: "pending without its key", requests: []string{"gone"}, pending: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, func(o *Options) { o.MaxRequestsPerVolume = 1 })
			e.register("v1", false)
			for i, name := range tc.requests {
				req := &cmapi.CertificateRequest{ObjectMeta: metav1.ObjectMeta{
					Name: name, Namespace: "ns",
					CreationTimestamp: metav1.NewTime(start.Add(time.Duration(i-len(tc.requests)) * time.Hour)),
					Labels:            map[string]string{api.NodeIDHashLabelKey: "f56fd9f8b", api.VolumeIDHashLabelKey: util.HashIdentifier("v1")},
				}}
				if name != "gone" || !tc.pending {
					req.Status.Conditions = []cmapi.CertificateRequestCondition{testkit.Failed("old")}
				}
				if _, err := e.client.CertmanagerV1().CertificateRequests("ns").Create(context.Background(), req, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			// "gone" stays in the cache and in the apiserver's lists, but a delete finds it gone.
			e.client.PrependReactor("delete", "certificaterequests", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
				if a.(k8stesting.DeleteAction).GetName() != "gone" {
					return false, nil, nil
				}
				return true, nil, apierrors.NewNotFound(cmapi.Resource("certificaterequests"), "gone")
			})
			e.start()
			listsBefore := volumeLists(e, "v1")
			done := e.manageInBackground("v1")
			var created *cmapi.CertificateRequest
			e.poll("the new request", func() bool {
				for _, r := range e.requests() {
					if !slices.Contains(tc.requests, r.Name) {
						created = &r
						return true
					}
				}
				return false
			})
			if _, err := testkit.Issue(context.Background(), e.client, e.ca, created, e.clock.Now()); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if n := len(e.logs.Matching("informer's cache is stale")); n != 1 {
				t.Errorf("%d logs of a stale cache, want 1", n)
			}
			if n := volumeLists(e, "v1") - listsBefore; n != 1 {
				t.Errorf("%d reads of the volume's requests from the apiserver, want 1", n)
			}
			var names []string
			for _, r := range e.requests() {
				names = append(names, r.Name)
			}
			want := len(tc.requests) + 1 // gone (never deleted), the kept ones and the new one
			if len(names) != want || !slices.Contains(names, "gone") {
				t.Fatalf("requests %v; want gone, %v and the new one", names, tc.kept)
			}
			for _, k := range tc.kept {
				if !slices.Contains(names, k) {
					t.Fatalf("requests %v; %s was deleted", names, k)
				}
			}
		})
	}
}

// volumeLists counts the lists of certificaterequests that select the volume's hash label.
func volumeLists(e *env, volumeID string) int {
	n := 0
	for _, a := range e.client.Actions() {
		if l, ok := a.(k8stesting.ListAction); ok && a.GetResource().Resource == "certificaterequests" &&
			strings.Contains(l.GetListRestrictions().Labels.String(), util.HashIdentifier(volumeID)) {
			n++
		}
	}
	return n
}
