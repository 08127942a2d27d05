//go:build integration

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

package integration

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testclock "k8s.io/utils/clock/testing"

	"github.com/cert-manager/csi-lib/manager"
	"github.com/cert-manager/csi-lib/test/testkit"
	"github.com/cert-manager/csi-lib/test/testkit/controlplane"
)

// The tests in this file sign with cert-manager's own controllers (hack/cm-controllers): its
// approver approves each request, a CA Issuer (named test-ca, as startNode's requests ask for)
// signs it from a CA secret, and its Issuer controller decides whether the Issuer is Ready.

// Controller names, as cert-manager registers them.
const (
	approverController = "certificaterequests-approver"
	caController       = "certificaterequests-issuer-ca"
	issuersController  = "issuers"
)

// startCertManager runs cert-manager's controllers (all of them without names) against the
// test apiserver until the test ends or the returned stop is called, by PID.
func startCertManager(t *testing.T, controllers ...string) (stop func()) {
	t.Helper()
	var out bytes.Buffer
	p, err := controlplane.StartCertManager(os.Getenv("CM_CONTROLLERS"), kubeconfigPath, &syncWriter{w: &out}, controllers...)
	if err != nil {
		t.Fatal(err)
	}
	stop = func() {
		p.Stop()
		if t.Failed() {
			t.Logf("cert-manager's controllers (pid %d) said:\n%s", p.PID, out.String())
		}
	}
	t.Cleanup(stop)
	return stop
}

// syncWriter serialises writes to w (the controllers' stdout and stderr share it).
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

// createCASecret stores ca as a cert-manager CA Issuer's secret.
func createCASecret(t *testing.T, ns, name string, ca *testkit.CA) {
	t.Helper()
	secret, err := testkit.CAIssuerSecret(ns, name, ca)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Secrets(ns).Create(context.Background(), secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createCAIssuer creates the CA Issuer test-ca, signing from the secret secretName.
func createCAIssuer(t *testing.T, ns, secretName string) {
	t.Helper()
	issuer := &cmapi.Issuer{
		ObjectMeta: metav1.ObjectMeta{Name: "test-ca", Namespace: ns},
		Spec:       testkit.CAIssuerSpec(secretName),
	}
	if _, err := cm.CertmanagerV1().Issuers(ns).Create(context.Background(), issuer, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// issuerReady reports whether the Issuer test-ca has a Ready condition True.
func issuerReady(t *testing.T, ns string) bool {
	t.Helper()
	issuer, err := cm.CertmanagerV1().Issuers(ns).Get(context.Background(), "test-ca", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return testkit.IssuerReady(issuer.Status.Conditions)
}

// readyCAIssuer creates a CA secret and the Issuer test-ca on it, in that order (a failed sync
// of an Issuer backs off 5 s and more), and waits until cert-manager has it Ready.
func readyCAIssuer(t *testing.T, ns string) *testkit.CA {
	t.Helper()
	ca := newCA(t)
	createCASecret(t, ns, "ca-key-pair", ca)
	createCAIssuer(t, ns, "ca-key-pair")
	poll(t, "cert-manager to have the Issuer Ready", func() bool { return issuerReady(t, ns) })
	return ca
}

// verifyVolume checks that the volume holds a key pair whose chain verifies against ca and
// whose ca.crt is ca's certificate, and returns the leaf.
func verifyVolume(t *testing.T, n *node, volumeID string, ca *testkit.CA, at time.Time) []byte {
	t.Helper()
	read := func(name string) []byte {
		b, err := n.fs.ReadFile(volumeID, name)
		if err != nil {
			t.Fatalf("reading %s: %v", name, err)
		}
		return b
	}
	key, chain, caPEM := read("tls.key"), read("tls.crt"), read("ca.crt")
	if !bytes.Equal(caPEM, ca.CertPEM) {
		t.Fatalf("ca.crt is not the Issuer's CA:\n%s", caPEM)
	}
	if _, err := testkit.VerifyKeyPair(key, chain, ca.CertPEM, at); err != nil {
		t.Fatalf("the volume's key pair: %v", err)
	}
	return chain
}

// TestCertManagerIssuesAndRenews: cert-manager's approver and CA issuer sign the publish's
// request; the volume's chain verifies against the Issuer's CA and ca.crt is that CA; at the
// renewal point (the manager's fake clock stepped there) the renewal is signed by cert-manager
// too and replaces the files; one request per issuance, the old one deleted.
func TestCertManagerIssuesAndRenews(t *testing.T) {
	ns := newNamespace(t)
	startCertManager(t)
	ca := readyCAIssuer(t, ns)
	clk := testclock.NewFakeClock(time.Now())
	n := startNode(t, nodeConfig{baseDir: t.TempDir(), namespace: ns, managerOpts: func(o *manager.Options) { o.Clock = clk }})
	pod := newPod(t, ns, "app")

	start := time.Now()
	if _, err := n.client.NodePublishVolume(ctxTimeout(t, pollTimeout), publishRequest(t, pod, "vol-cm")); err != nil {
		t.Fatalf("publish: %v", err)
	}
	t.Logf("publish -> certificate written, signed by cert-manager: %v", time.Since(start).Round(time.Millisecond))
	first := verifyVolume(t, n, "vol-cm", ca, time.Now())
	reqs := requestsIn(t, cm, ns)
	if len(reqs) != 1 {
		t.Fatalf("%d requests after the publish, want 1", len(reqs))
	}
	for _, cond := range []cmapi.CertificateRequestConditionType{cmapi.CertificateRequestConditionApproved, cmapi.CertificateRequestConditionReady} {
		if !hasCondition(&reqs[0], cond) {
			t.Fatalf("the request lacks %s=True: %+v", cond, reqs[0].Status.Conditions)
		}
	}

	// 1 h certificates renew at 40 min: step the manager's clock there.
	poll(t, "the loop to wait for the renewal point", clk.HasWaiters)
	clk.Step(41 * time.Minute)
	poll(t, "the renewal's new certificate", func() bool {
		chain, err := n.fs.ReadFile("vol-cm", "tls.crt")
		return err == nil && !bytes.Equal(chain, first)
	})
	verifyVolume(t, n, "vol-cm", ca, time.Now())
	poll(t, "one request left, the renewal's", func() bool {
		r := requestsIn(t, cm, ns)
		return len(r) == 1 && r[0].Name != reqs[0].Name && hasCondition(&r[0], cmapi.CertificateRequestConditionReady)
	})
}

// TestCertManagerIssuerNotReadyThenReady: while the Issuer's secret is missing, cert-manager
// keeps the Issuer not Ready and leaves the request pending, so the publish ends with
// DeadlineExceeded and the request stays; once the secret exists the Issuer becomes Ready,
// cert-manager signs the same request, and kubelet's retry of the publish resumes it: one
// request in all.
func TestCertManagerIssuerNotReadyThenReady(t *testing.T) {
	ns := newNamespace(t)
	startCertManager(t)
	createCAIssuer(t, ns, "ca-key-pair")
	n := startNode(t, nodeConfig{baseDir: t.TempDir(), namespace: ns})
	pod := newPod(t, ns, "app")
	req := publishRequest(t, pod, "vol-nr")

	_, err := n.client.NodePublishVolume(ctxTimeout(t, 3*time.Second), req)
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("publish while the Issuer is not Ready: %v, want DeadlineExceeded", err)
	}
	if issuerReady(t, ns) {
		t.Fatal("the Issuer is Ready without its secret")
	}
	pending := requestsIn(t, cm, ns)
	if len(pending) != 1 || hasCondition(&pending[0], cmapi.CertificateRequestConditionReady) {
		t.Fatalf("requests after the timed-out publish: %d (want 1, pending)", len(pending))
	}

	ca := newCA(t)
	createCASecret(t, ns, "ca-key-pair", ca)
	poll(t, "cert-manager to have the Issuer Ready", func() bool { return issuerReady(t, ns) })
	if _, err := n.client.NodePublishVolume(ctxTimeout(t, pollTimeout), req); err != nil {
		t.Fatalf("the retried publish: %v", err)
	}
	verifyVolume(t, n, "vol-nr", ca, time.Now())
	if r := requestsIn(t, cm, ns); len(r) != 1 || r[0].Name != pending[0].Name {
		t.Fatalf("requests after the retry: %d, want the first one only", len(r))
	}
}

// TestCertManagerDenial: without cert-manager's approver, a request denied as an approver denies
// it (a Denied condition through the status subresource, which cert-manager's webhook would
// restrict to approvers) fails the publish with Unknown and upstream's denial text, and
// cert-manager signs nothing.
func TestCertManagerDenial(t *testing.T) {
	ns := newNamespace(t)
	startCertManager(t, caController, issuersController)
	readyCAIssuer(t, ns)
	n := startNode(t, nodeConfig{baseDir: t.TempDir(), namespace: ns})
	pod := newPod(t, ns, "app")

	published := make(chan error, 1)
	go func() {
		_, err := n.client.NodePublishVolume(ctxTimeout(t, pollTimeout), publishRequest(t, pod, "vol-denied"))
		published <- err
	}()
	var req *cmapi.CertificateRequest
	poll(t, "the publish's request", func() bool {
		r := requestsIn(t, cm, ns)
		if len(r) == 1 {
			req = &r[0]
		}
		return req != nil
	})
	req.Status.Conditions = append(req.Status.Conditions, cmapi.CertificateRequestCondition{
		Type: cmapi.CertificateRequestConditionDenied, Status: cmmeta.ConditionTrue,
		Reason: "PolicyDenied", Message: "not for this pod",
	})
	if _, err := cm.CertmanagerV1().CertificateRequests(ns).UpdateStatus(context.Background(), req, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := <-published
	if status.Code(err) != codes.Unknown || !strings.Contains(err.Error(), "has been denied by the approval plugin: not for this pod") {
		t.Fatalf("publish of a denied request: %v", err)
	}
	if r := requestsIn(t, cm, ns); len(r) != 1 || r[0].Status.Certificate != nil {
		t.Fatalf("after the denial: %d requests, certificate %q", len(r), r[0].Status.Certificate)
	}
}

// TestCertManagerResumesAfterRestart: a mounted volume's renewal is pending while cert-manager
// is down (its key persisted beside the metadata); the driver restarts; cert-manager comes back
// and signs the pending request; the restarted driver resumes it with the persisted key: one
// renewal request in all, and the new key pair matches.
func TestCertManagerResumesAfterRestart(t *testing.T) {
	ns := newNamespace(t)
	stopCM := startCertManager(t)
	ca := readyCAIssuer(t, ns)
	dir := t.TempDir()
	clk := testclock.NewFakeClock(time.Now())
	withClock := func(o *manager.Options) { o.Clock = clk }
	n := startNode(t, nodeConfig{baseDir: dir, namespace: ns, managerOpts: withClock})
	pod := newPod(t, ns, "app")
	if _, err := n.client.NodePublishVolume(ctxTimeout(t, pollTimeout), publishRequest(t, pod, "vol-resume")); err != nil {
		t.Fatalf("publish: %v", err)
	}
	first := verifyVolume(t, n, "vol-resume", ca, time.Now())
	issued := requestsIn(t, cm, ns)[0].Name

	// cert-manager goes down; the renewal point passes; the renewal's request waits.
	stopCM()
	poll(t, "the loop to wait for the renewal point", clk.HasWaiters)
	clk.Step(41 * time.Minute)
	var renewal string
	poll(t, "the renewal's request", func() bool {
		r := requestsIn(t, cm, ns)
		if len(r) == 1 && r[0].Name != issued {
			renewal = r[0].Name
		}
		return renewal != ""
	})
	n.stop()

	startCertManager(t)
	poll(t, "cert-manager to sign the pending renewal", func() bool {
		r, err := cm.CertmanagerV1().CertificateRequests(ns).Get(context.Background(), renewal, metav1.GetOptions{})
		return err == nil && hasCondition(r, cmapi.CertificateRequestConditionReady)
	})
	restarted := startNode(t, nodeConfig{baseDir: dir, namespace: ns, managerOpts: withClock})
	poll(t, "the resumed renewal's certificate", func() bool {
		chain, err := restarted.fs.ReadFile("vol-resume", "tls.crt")
		return err == nil && !bytes.Equal(chain, first)
	})
	verifyVolume(t, restarted, "vol-resume", ca, time.Now())
	if r := requestsIn(t, cm, ns); len(r) != 1 || r[0].Name != renewal {
		t.Fatalf("requests after the resume: %d, want the renewal's only", len(r))
	}
}

// hasCondition reports whether req has the condition True.
func hasCondition(req *cmapi.CertificateRequest, cond cmapi.CertificateRequestConditionType) bool {
	for _, c := range req.Status.Conditions {
		if c.Type == cond {
			return c.Status == cmmeta.ConditionTrue
		}
	}
	return false
}
