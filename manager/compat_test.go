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
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/test/testkit"
)

// publishAttempt runs ManageVolumeImmediate as the node server does and returns a function
// that plays kubelet's deadline: it cancels the call and returns its error (once; later calls
// return the same error), and a channel that receives the error when the call ends by itself.
// The call ends, at the latest, as the test's clean-up begins, so it never logs after the test.
func publishAttempt(t *testing.T, m *Manager, id string) (deadline func() error, done <-chan error) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	result := make(chan error, 1)
	go func() {
		_, err := m.ManageVolumeImmediate(ctx, id)
		ch <- err
		result <- err
	}()
	var once sync.Once
	var err error
	deadline = func() error {
		once.Do(func() { cancel(); err = <-result })
		return err
	}
	t.Cleanup(func() { deadline() })
	return deadline, ch
}

// waitInformerHas waits until the manager's informer holds the request.
func (e *env) waitInformerHas(req *cmapi.CertificateRequest) {
	e.t.Helper()
	e.poll("the informer to see "+req.Name, func() bool {
		_, err := e.m.CertificateRequestLister().CertificateRequests(req.Namespace).Get(req.Name)
		return err == nil
	})
}

func keyMatches(t *testing.T, key crypto.PrivateKey, chain []byte) bool {
	t.Helper()
	block, _ := pem.Decode(chain)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return key.(crypto.Signer).Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(cert.PublicKey)
}

// TestResumeAcrossPublishRetries is upstream's supported scenario: a publish times out while its
// request is pending and is cleaned up; kubelet's retry finds the same request and waits on it
// with the same key; the signer issues it; the next retry takes that certificate. One create.
func TestResumeAcrossPublishRetries(t *testing.T) {
	e := newEnv(t, nil)
	testkit.StampLikeAPIServer(e.client, e.clock.Now)
	e.register("v1", false)
	m := e.start()

	// Publish #1: creates R and hits its deadline; the node server's clean-up unmanages.
	deadline, _ := publishAttempt(t, m, "v1")
	r := e.waitForPending()
	if r.UID == "" || r.CreationTimestamp.IsZero() {
		t.Fatalf("the fake did not stamp the request like an apiserver: %+v", r.ObjectMeta)
	}
	err := deadline()
	if err == nil || !strings.HasPrefix(err.Error(), "waiting for request: ") || !errors.Is(err, context.Canceled) {
		t.Fatalf("publish #1 = %v; want upstream's \"waiting for request: ...\" wrapping the cause", err)
	}
	m.UnmanageVolume("v1")
	e.waitInformerHas(r)

	// Publish #2: resumes R, creates nothing, times out again while it waits on R. The informer's
	// cache shows R before its event handler ends the hold on R, the request this process
	// created; the attempt resumes R from the cache, or, if it reads the hold first, as the
	// request held.
	deadline, _ = publishAttempt(t, m, "v1")
	var resumed []string
	e.poll("publish #2 to resume a request", func() bool {
		resumed = append(e.logged("Resuming CertificateRequest"), e.logged(resumedUnseen)...)
		return len(resumed) > 0
	})
	if len(resumed) != 1 || !strings.Contains(resumed[0], r.Name) {
		t.Fatalf("publish #2 resumed another request, or more than one: %q", resumed)
	}
	if err := deadline(); err == nil || !strings.Contains(err.Error(), `waiting for request: request "`+r.Name+`"`) {
		t.Fatalf("publish #2 = %v; want its wait on R to end", err)
	}
	m.UnmanageVolume("v1")
	if n := testkit.CountActions(e.client, "create"); n != 1 {
		t.Fatalf("%d creates after two publishes, want 1", n)
	}

	// The signer issues R; publish #3 takes R's certificate with the original key.
	issued, err := testkit.Issue(context.Background(), e.client, e.ca, r, e.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	e.poll("the informer to see R issued", func() bool {
		got, err := m.CertificateRequestLister().CertificateRequests("ns").Get(r.Name)
		return err == nil && len(got.Status.Certificate) > 0
	})
	if managed, err := m.ManageVolumeImmediate(context.Background(), "v1"); !managed || err != nil {
		t.Fatalf("publish #3 = %v, %v", managed, err)
	}
	if n := testkit.CountActions(e.client, "create"); n != 1 {
		t.Fatalf("%d creates in all, want exactly 1", n)
	}
	e.mu.Lock()
	written := e.written["v1"]
	e.mu.Unlock()
	if len(written) != 1 || !keyMatches(t, written[0], issued.Status.Certificate) {
		t.Fatal("the key pair written is not R's certificate with R's key")
	}
	e.expectKeyForgotten("v1")
}

// TestLoneDeniedConditionIsResumedAndFails: a request with only a Denied condition is still
// the one to wait on (upstream's rule); the wait fails with upstream's denial text and the key is
// dropped, so the next attempt replaces the request.
func TestLoneDeniedConditionIsResumedAndFails(t *testing.T) {
	e := newEnv(t, nil)
	e.register("v1", false)
	m := e.start()
	deadline, _ := publishAttempt(t, m, "v1")
	r := e.waitForPending()
	_ = deadline()
	m.UnmanageVolume("v1")
	r.Status.Conditions = []cmapi.CertificateRequestCondition{testkit.Denied("policy says no")}
	if _, err := e.client.CertmanagerV1().CertificateRequests("ns").UpdateStatus(context.Background(), r, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.poll("the informer to see the denial", func() bool {
		got, _ := m.CertificateRequestLister().CertificateRequests("ns").Get(r.Name)
		return got != nil && len(got.Status.Conditions) > 0
	})
	_, err := m.ManageVolumeImmediate(context.Background(), "v1")
	want := `request "` + r.Name + `" has been denied by the approval plugin: policy says no`
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v, want %q", err, want)
	}
	if n := testkit.CountActions(e.client, "create"); n != 1 {
		t.Fatalf("%d creates, want 1 (the denied request was waited on, not replaced)", n)
	}
	m.UnmanageVolume("v1")
	// Now the key is gone: the next attempt deletes the request and creates a new one.
	deadline, _ = publishAttempt(t, m, "v1")
	e.poll("a replacement request", func() bool {
		reqs := e.requests()
		return len(reqs) == 1 && reqs[0].Name != r.Name
	})
	_ = deadline()
}

func TestFailedRequestText(t *testing.T) {
	e := newEnv(t, nil)
	e.register("v1", false)
	m := e.start()
	deadline, done := publishAttempt(t, m, "v1")
	defer deadline()
	r := e.waitForPending()
	r.Status.Conditions = []cmapi.CertificateRequestCondition{testkit.Failed("issuer exploded")}
	if _, err := e.client.CertmanagerV1().CertificateRequests("ns").UpdateStatus(context.Background(), r, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := `request "` + r.Name + `" has failed: issuer exploded`
	if err := <-done; err == nil || err.Error() != want {
		t.Fatalf("error = %v, want %q", err, want)
	}
}

// TestRequestShapeForAZeroBundle: Duration is always set (0s) and the owner reference is always
// there, even with an empty pod name and UID.
func TestRequestShapeForAZeroBundle(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.GenerateRequest = func(meta metadata.Metadata) (*CertificateRequestBundle, error) {
			return &CertificateRequestBundle{Request: &x509.CertificateRequest{Subject: pkix.Name{CommonName: "x"}}, Namespace: "ns"}, nil
		}
	})
	if _, err := e.store.RegisterMetadata(metadata.Metadata{VolumeID: "v1"}); err != nil {
		t.Fatal(err)
	}
	m := e.start()
	deadline, _ := publishAttempt(t, m, "v1")
	defer deadline()
	r := e.waitForPending()
	if r.Spec.Duration == nil || r.Spec.Duration.Duration != 0 {
		t.Errorf("Duration = %v, want 0s set", r.Spec.Duration)
	}
	if len(r.OwnerReferences) != 1 || r.OwnerReferences[0].Kind != "Pod" || r.OwnerReferences[0].Name != "" || r.OwnerReferences[0].UID != "" {
		t.Errorf("owner references = %+v, want one empty Pod reference", r.OwnerReferences)
	}
}

// TestDefaultNextIssuanceTimeIsUpstreams: NotAfter − (NotAfter − NotBefore)/3, which differs
// from NotBefore + 2/3 of the life by a nanosecond when the life in seconds is not a multiple
// of 3.
func TestDefaultNextIssuanceTimeIsUpstreams(t *testing.T) {
	ca, err := testkit.NewCA("ca")
	if err != nil {
		t.Fatal(err)
	}
	key, _ := testkit.NewKey()
	csr, _ := testkit.CSR(&x509.CertificateRequest{Subject: pkix.Name{CommonName: "x"}}, key)
	chain, err := ca.Sign(csr, start, 3601*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got, err := defaultNextIssuanceTime(chain)
	if err != nil {
		t.Fatal(err)
	}
	notAfter := start.Add(3601 * time.Second)
	if want := notAfter.Add(-3601 * time.Second / 3); !got.Equal(want) {
		t.Fatalf("next issuance = %v, want %v", got, want)
	}
	if twoThirds := start.Add(3601 * time.Second * 2 / 3); got.Equal(twoThirds) {
		t.Fatal("computed NotBefore + 2/3 life, not upstream's NotAfter − life/3")
	}
}

// issueAlreadyDue signs the pending request with a certificate valid from 2 h ago for 1 h: its
// renewal point passed 80 minutes ago.
func (e *env) issueAlreadyDue() {
	e.t.Helper()
	req := e.waitForPending()
	if _, err := testkit.Issue(context.Background(), e.client, e.ca, req, e.clock.Now().Add(-2*time.Hour)); err != nil {
		e.t.Fatal(err)
	}
}

// expectRenewalAfter steps through a wait of exactly d, after which the loop attempts a
// renewal (its 60 s deadline timer).
func (e *env) expectRenewalAfter(d time.Duration) {
	e.t.Helper()
	e.stepWait(d)
	if got := e.nextTimer(); got != issueTimeout {
		e.t.Fatalf("after %v, expected a renewal attempt, got a %v timer", d, got)
	}
}

// TestAlreadyDueCertificateWaitsASecond: a certificate already past its renewal point when it
// is written must not turn the loop into a hot loop: the volume is not attempted again until
// the clock has moved 1 s, with a clock that is never stepped, exactly one issuance. It holds
// whichever attempt wrote the certificate (the background loop's, or the publish's: drivers'
// tests sign with certificates from 1970 and never step the clock, and upstream's loop, which
// waits for its next tick, gives them one request), and a Requeue within the second does not
// cut it short (a driver requeueing on every pod update).
func TestAlreadyDueCertificateWaitsASecond(t *testing.T) {
	for _, tc := range []struct {
		name    string
		publish bool
		requeue bool
	}{
		{name: "loop"},
		{name: "publish", publish: true},
		{name: "loop, requeued within the second", requeue: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			e.register("v1", !tc.publish)
			m := e.start()
			if tc.publish {
				_, done := publishAttempt(t, m, "v1")
				e.issueAlreadyDue()
				if err := <-done; err != nil {
					t.Fatalf("publish: %v", err)
				}
			} else {
				if d := e.nextTimer(); d != issueTimeout {
					t.Fatalf("expected an attempt, got %v", d)
				}
				e.issueAlreadyDue()
			}
			e.expectWait(minWaitAfterSuccess)
			rest := minWaitAfterSuccess
			if tc.requeue {
				e.clock.Step(400 * time.Millisecond)
				m.Requeue("v1")
				rest -= 400 * time.Millisecond
				e.expectWait(rest)
			}
			if got, n := e.counter(issueCalls, "v1"), len(e.requests()); got != 1 || n != 1 {
				t.Fatalf("%v attempts and %d requests before the clock moved 1 s, want 1 and 1", got, n)
			}
			e.expectRenewalAfter(rest)
		})
	}
}

// TestUnmanageWaitsOnlyForWriteKeypair: UnmanageVolume returns at once while a driver function
// other than WriteKeypair hangs, waits while WriteKeypair runs, and after it returns nothing of
// that attempt is written. The same holds for an attempt of ManageVolumeImmediate.
func TestUnmanageWaitsOnlyForWriteKeypair(t *testing.T) {
	for _, immediate := range []bool{false, true} {
		name := "loop"
		if immediate {
			name = "immediate"
		}
		t.Run(name, func(t *testing.T) {
			keygenEntered, keygenRelease := make(chan struct{}), make(chan struct{})
			writeEntered, writeRelease := make(chan struct{}), make(chan struct{})
			hangKeygen := true
			e := newEnv(t, nil)
			base := e.opts.GeneratePrivateKey
			e.opts.GeneratePrivateKey = func(meta metadata.Metadata) (crypto.PrivateKey, error) {
				if hangKeygen {
					hangKeygen = false
					close(keygenEntered)
					<-keygenRelease
				}
				return base(meta)
			}
			baseWrite := e.opts.WriteKeypair
			e.opts.WriteKeypair = func(meta metadata.Metadata, key crypto.PrivateKey, chain, ca []byte) error {
				close(writeEntered)
				<-writeRelease
				return baseWrite(meta, key, chain, ca)
			}
			e.register("v1", !immediate)
			m := e.start()
			if immediate {
				go func() { _, _ = m.ManageVolumeImmediate(context.Background(), "v1") }()
			}
			<-keygenEntered
			// A hanging GeneratePrivateKey does not hold up UnmanageVolume.
			m.UnmanageVolume("v1")
			close(keygenRelease)
			if n := testkit.CountActions(e.client, "create"); n != 0 {
				t.Fatalf("an unmanaged volume's attempt created %d requests", n)
			}

			// Manage again; this time WriteKeypair hangs.
			if immediate {
				go func() { _, _ = m.ManageVolumeImmediate(context.Background(), "v1") }()
			} else if !m.ManageVolume("v1") {
				t.Fatal("ManageVolume = false")
			}
			e.issuePending()
			<-writeEntered
			unmanaged := make(chan struct{})
			go func() { m.UnmanageVolume("v1"); close(unmanaged) }()
			select {
			case <-unmanaged:
				t.Fatal("UnmanageVolume returned while WriteKeypair was running")
			case <-time.After(50 * time.Millisecond):
			}
			close(writeRelease)
			<-unmanaged
			e.mu.Lock()
			n := len(e.written["v1"])
			e.mu.Unlock()
			if n != 1 {
				t.Fatalf("%d key pairs written, want the one in flight", n)
			}
		})
	}
}

// TestStopDoesNotWaitForDriverFunctions: Stop returns while GeneratePrivateKey hangs; when it
// returns, the loop exits without creating anything.
func TestStopDoesNotWaitForDriverFunctions(t *testing.T) {
	before := runtime.NumGoroutine()
	entered, release := make(chan struct{}), make(chan struct{})
	e := newEnv(t, nil)
	e.opts.GeneratePrivateKey = func(metadata.Metadata) (crypto.PrivateKey, error) {
		close(entered)
		<-release
		return testkit.NewKey()
	}
	e.register("v1", true)
	m := e.start()
	<-entered
	stopped := make(chan struct{})
	go func() { m.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(pollTimeout):
		t.Fatal("Stop waited for a driver function")
	}
	close(release)
	// The loop's goroutine, the last of the manager's, leaves once the function returns.
	e.poll("the loop to leave", func() bool { return runtime.NumGoroutine() <= before })
	if n := testkit.CountActions(e.client, "create"); n != 0 {
		t.Fatalf("%d requests created after Stop", n)
	}
}

// TestClosedGateIsAskedOnlyByItsBackoffByDefault: without GatePollInterval, as upstream, a closed
// gate is asked once per GateBackoffConfig step and at no time between: a driver's gate backoff
// bounds how often its gate is asked.
func TestClosedGateIsAskedOnlyByItsBackoffByDefault(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.GateBackoffConfig = noJitter(8*time.Second, 10*time.Second) })
	e.gateOpen.Store(false)
	e.register("v1", true)
	e.start()
	e.expectAttemptThenWait(8 * time.Second) // one timer for the whole step
	if n := e.gateCalls.Load(); n != 1 {
		t.Fatalf("the gate was asked %d times by the first attempt, want 1", n)
	}
	e.stepNotYet(8 * time.Second)
	if n := e.gateCalls.Load(); n != 1 {
		t.Fatalf("the gate was asked %d times within the 8 s step, want 1", n)
	}
	e.clock.Step(time.Millisecond)
	e.expectAttemptThenWait(8 * time.Second) // the first step, which the first turn did not take
	if n := e.gateCalls.Load(); n != 2 {
		t.Fatalf("the gate was asked %d times after the step, want 2", n)
	}
	e.stepWait(8 * time.Second)
	e.expectAttemptThenWait(10 * time.Second) // the next step, capped
	if n := e.gateCalls.Load(); n != 3 {
		t.Fatalf("the gate was asked %d times after two steps, want 3", n)
	}
}

// gatePolling starts a manager whose gate backoff's first step, 8 s, is polled every second,
// with the gate closed, and returns once v1's first attempt was refused by the gate and its loop
// waits for the first poll. configure, if not nil, changes the options further.
func gatePolling(t *testing.T, configure func(*Options)) *env {
	t.Helper()
	e := newEnv(t, func(o *Options) {
		o.GatePollInterval = time.Second
		o.GateBackoffConfig = noJitter(8*time.Second, 10*time.Second)
		if configure != nil {
			configure(o)
		}
	})
	e.gateOpen.Store(false)
	e.register("v1", true)
	e.start()
	e.expectAttemptThenWait(time.Second) // the first attempt asks the gate: closed
	return e
}

// TestGatePollEndsALongGateWait: a driver that never calls Requeue still starts issuing within
// GatePollInterval of its gate opening, however long the gate backoff's step.
func TestGatePollEndsALongGateWait(t *testing.T) {
	e := gatePolling(t, withExtendedMetrics(nil))
	e.stepWait(time.Second)
	e.expectWait(time.Second) // gate still closed: keep waiting
	e.gateOpen.Store(true)
	e.stepWait(time.Second)
	if d := e.nextTimer(); d != issueTimeout {
		t.Fatalf("the gate opened but no attempt followed (got a %v timer)", d)
	}
	if got := e.counter(gatePending, "v1"); got != 1 {
		t.Fatalf("gate polls counted as attempts: gate_pending_total = %v, want 1", got)
	}
}

// TestGatePollEndsWithTheSuccess: the attempt after a poll that found the gate open takes the
// poll's yes (a poll costs one ask, as GatePollInterval's doc says), and once it has led to a
// certificate the loop waits until the certificate is due without asking the gate again.
func TestGatePollEndsWithTheSuccess(t *testing.T) {
	e := gatePolling(t, nil)
	e.gateOpen.Store(true)
	e.stepWait(time.Second) // the poll asks the gate: open
	if d := e.nextTimer(); d != issueTimeout {
		t.Fatalf("the gate opened but no attempt followed (got a %v timer)", d)
	}
	e.issuePending() // the attempt takes the poll's answer, and issues
	e.expectWait(40 * time.Minute)
	if n := e.gateCalls.Load(); n != 2 {
		t.Fatalf("the gate was asked %d times, want 2 (the first attempt, the poll whose yes the attempt takes)", n)
	}
}

// TestEmptyNamespaceRequestIsSeenIssued: waiters and informer events use the same key for a
// request in namespace "" (fake clientsets accept one).
func TestEmptyNamespaceRequestIsSeenIssued(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		base := o.GenerateRequest
		o.GenerateRequest = func(meta metadata.Metadata) (*CertificateRequestBundle, error) {
			b, err := base(meta)
			b.Namespace = ""
			return b, err
		}
	})
	e.register("v1", false)
	e.start()
	done := e.manageInBackground("v1")
	var req *cmapi.CertificateRequest
	e.poll("a request in namespace \"\"", func() bool {
		list, _ := e.client.CertmanagerV1().CertificateRequests("").List(context.Background(), metav1.ListOptions{})
		if len(list.Items) == 1 {
			req = &list.Items[0]
		}
		return req != nil
	})
	if _, err := testkit.Issue(context.Background(), e.client, e.ca, req, e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the issued request was never seen: %v", err)
	}
}

// TestDueCheckReadFailureIsNotAnIssueError: a metadata read failing in the due check is
// logged and retried on the renewal backoff, not counted.
func TestDueCheckReadFailureIsNotAnIssueError(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.MetadataReader = failingReader{MetadataReader: o.MetadataReader, fail: "v1"} })
	m := e.start()
	if !m.ManageVolume("v1") {
		t.Fatal("ManageVolume = false")
	}
	e.expectWait(30 * time.Second)
	if got := e.counter(issueErrors, "v1"); got != 0 {
		t.Fatalf("issue_errors_total = %v, want 0", got)
	}
	if got := e.counter(issueCalls, "v1"); got != 0 {
		t.Fatalf("issue_requests_total = %v, want 0 (no attempt was made)", got)
	}
}

// TestNotDueVolumeIsNotPolled: with the gate poll on, a volume whose certificate
// is not due waits on one timer for the whole time: no poll, no metadata read, no gate call.
func TestNotDueVolumeIsNotPolled(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.GatePollInterval = time.Second })
	meta := e.register("v1", true)
	nit := start.Add(time.Hour)
	meta.NextIssuanceTime = &nit
	if err := e.store.WriteMetadata("v1", meta); err != nil {
		t.Fatal(err)
	}
	e.start()
	e.expectWait(time.Hour)
	e.stepNotYet(time.Hour)
	if n := e.gateCalls.Load(); n != 0 {
		t.Fatalf("a volume that is not due asked its gate %d times", n)
	}
}

// upstreamFamilies are the metric families upstream csi-lib registers.
var upstreamFamilies = map[string]bool{
	"certmanager_csi_issue_requests_total":                             true,
	"certmanager_csi_issue_errors_total":                               true,
	"certmanager_csi_managed_certificate_request_count":                true,
	"certmanager_csi_managed_volume_count":                             true,
	"certmanager_csi_certificate_request_ready_status":                 true,
	"certmanager_csi_certificate_request_expiration_timestamp_seconds": true,
	"certmanager_csi_certificate_request_renewal_timestamp_seconds":    true,
}

// TestFamiliesUpstreamLacksNeedTheSwitch: a manager that meets everything the families upstream
// lacks record (a closed gate, an attempt waiting for admission, first certificates, states)
// prints only upstream's families, unless EnableExtendedMetrics was called; with it, all five.
func TestFamiliesUpstreamLacksNeedTheSwitch(t *testing.T) {
	for _, extended := range []bool{false, true} {
		t.Run(fmt.Sprint("extended ", extended), func(t *testing.T) {
			e := newEnv(t, func(o *Options) {
				o.MaxConcurrentIssuances = 1
				if extended {
					o.Metrics.EnableExtendedMetrics()
				}
			})
			e.start()
			e.gateOpen.Store(false)
			e.register("closed", false)
			if _, err := e.m.ManageVolumeImmediate(context.Background(), "closed"); !errors.Is(err, ErrNotReadyToRequest) {
				t.Fatalf("closed gate: %v", err)
			}
			e.gateOpen.Store(true)
			for _, id := range []string{"first", "second"} {
				e.register(id, false)
				e.m.ManageVolume(id)
			}
			// One attempt holds the only place while its request waits; the other waits for it.
			e.waitForPending()
			e.waitLogged("Waiting for issuance admission (node-wide limit on concurrent issuances or CertificateRequest creations)", 1)
			e.issuePending()
			e.issuePending()
			e.poll("both key pairs", func() bool {
				e.mu.Lock()
				defer e.mu.Unlock()
				return len(e.written["first"]) == 1 && len(e.written["second"]) == 1
			})

			families, err := e.registry.Gather()
			if err != nil {
				t.Fatal(err)
			}
			var extra []string
			for _, f := range families {
				if !upstreamFamilies[f.GetName()] {
					extra = append(extra, f.GetName())
				}
			}
			if want := map[bool]int{false: 0, true: 5}[extended]; len(extra) != want {
				t.Fatalf("families upstream lacks: %v, want %d of them", extra, want)
			}
		})
	}
}

// TestGatePollOnGoneMetadataEndsTheLoop: a gate poll that finds the volume's metadata gone ends
// the volume's registration at once, as a turn does, instead of waiting out the gate backoff.
func TestGatePollOnGoneMetadataEndsTheLoop(t *testing.T) {
	e := gatePolling(t, nil)
	if err := e.store.RemoveVolume("v1"); err != nil {
		t.Fatal(err)
	}
	e.stepWait(time.Second) // the poll finds no metadata
	e.poll("the loop to end on gone metadata", func() bool {
		return len(e.logs.Matching("Volume metadata is gone; no longer managing the volume")) == 1
	})
	if e.m.IsVolumeReady("v1") || e.clock.HasWaiters() {
		t.Fatalf("the volume is still managed or waits (waiters %d)", e.clock.Waiters())
	}
}
