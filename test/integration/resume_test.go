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
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	testclock "k8s.io/utils/clock/testing"

	"github.com/cert-manager/csi-lib/manager"
	"github.com/cert-manager/csi-lib/storage"
	"github.com/cert-manager/csi-lib/test/testkit"
)

// TestPublishRetryResumesPendingRequest: a signer slower than kubelet's publish deadline. Each
// publish times out with DeadlineExceeded while the request is pending; the retries resume the
// same request with the same key; once it is signed, the next retry succeeds with it. Exactly
// one CertificateRequest exists throughout.
func TestPublishRetryResumesPendingRequest(t *testing.T) {
	ns := newNamespace(t)
	pod := newPod(t, ns, "slow-signer")
	n := startNode(t, nodeConfig{baseDir: t.TempDir()})
	req := publishRequest(t, pod, "csi-resume")

	var first string
	for i := 0; i < 2; i++ {
		// Long enough for the create to reach a cold apiserver (this may be the suite's first).
		_, err := n.client.NodePublishVolume(ctxTimeout(t, 5*time.Second), req)
		if status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("publish %d: %v, want DeadlineExceeded", i+1, err)
		}
		reqs := requestsIn(t, cm, ns)
		if len(reqs) != 1 || (first != "" && reqs[0].Name != first) {
			t.Fatalf("after publish %d: %d requests (%v), want the one request %q", i+1, len(reqs), reqs, first)
		}
		first = reqs[0].Name
	}

	runSigner(t, ns, newCA(t))
	if _, err := n.client.NodePublishVolume(ctxTimeout(t, pollTimeout), req); err != nil {
		t.Fatalf("publish after signing: %v", err)
	}
	reqs := requestsIn(t, cm, ns)
	if len(reqs) != 1 || reqs[0].Name != first {
		t.Fatalf("%d requests after success, want only %q", len(reqs), first)
	}
	chain, err := n.fs.ReadFile("csi-resume", "tls.crt")
	if err != nil || !bytes.Equal(chain, reqs[0].Status.Certificate) {
		t.Fatalf("the volume's certificate is not the resumed request's: %v", err)
	}
	key, _ := n.fs.ReadFile("csi-resume", "tls.key")
	ca, _ := n.fs.ReadFile("csi-resume", "ca.crt")
	if _, err := testkit.VerifyKeyPair(key, chain, ca, time.Now()); err != nil {
		t.Fatalf("the key written is not the request's: %v", err)
	}
}

// TestRestartResumesPendingRenewal: the driver restarts while a renewal's request is pending.
// The restarted node (same directory, so the start-up sweep runs) resumes that request with the
// key persisted beside the metadata; no new request is created. The key file is never under
// the bind-mounted data directory and is gone once the key pair is written.
func TestRestartResumesPendingRenewal(t *testing.T) {
	ns := newNamespace(t)
	pod := newPod(t, ns, "restart-renewal")
	base := t.TempDir()
	clk := testclock.NewFakeClock(time.Now())
	onClock := func(o *manager.Options) { o.Clock = clk }
	a := startNode(t, nodeConfig{baseDir: base, managerOpts: onClock})
	stopSigner := runSigner(t, ns, newCA(t))
	req := publishRequest(t, pod, "csi-renew")
	if _, err := a.client.NodePublishVolume(ctxTimeout(t, pollTimeout), req); err != nil {
		t.Fatal(err)
	}
	stopSigner()
	first := requestsIn(t, cm, ns)[0].Name

	// The renewal falls due with no signer running: its request stays pending.
	meta, _ := a.store.ReadMetadata("csi-renew")
	clk.SetTime(meta.NextIssuanceTime.Add(time.Second))
	var pending string
	poll(t, "the renewal's request", func() bool {
		reqs := requestsIn(t, cm, ns)
		if len(reqs) == 1 && reqs[0].Name != first {
			pending = reqs[0].Name
		}
		return pending != ""
	})
	keyFile := filepath.Join(base, "inmemfs", "csi-renew", "pending-key.pem")
	poll(t, "the pending key file", func() bool { _, err := os.Stat(keyFile); return err == nil })
	if strings.HasPrefix(keyFile, a.fs.PathForVolume("csi-renew")) {
		t.Fatal("the pending key is under the bind-mounted data directory")
	}
	a.stop()

	// Restart on the same directory; then the signer comes back.
	b := startNode(t, nodeConfig{baseDir: base, managerOpts: onClock})
	if res := b.fs.StartupSweep(); res.Kept != 1 {
		t.Fatalf("start-up sweep = %+v, want the mounted volume kept", res)
	}
	runSigner(t, ns, newCA(t))
	// Certificates have one-second precision, so the renewal is recognised by its bytes: the
	// volume ends up with the resumed request's certificate.
	poll(t, "the resumed renewal to be written", func() bool {
		reqs := requestsIn(t, cm, ns)
		if len(reqs) != 1 || len(reqs[0].Status.Certificate) == 0 {
			return false
		}
		chain, _ := b.fs.ReadFile("csi-renew", "tls.crt")
		return bytes.Equal(chain, reqs[0].Status.Certificate)
	})
	if reqs := requestsIn(t, cm, ns); len(reqs) != 1 || reqs[0].Name != pending {
		t.Fatalf("after the restart: %d requests, want only the resumed %q", len(reqs), pending)
	}
	// The key file is removed once WriteKeypair has returned, a moment after the chain the
	// poll above saw.
	poll(t, "the pending key file's removal after the issuance", func() bool {
		_, err := os.Stat(keyFile)
		return errors.Is(err, fs.ErrNotExist)
	})
}

// TestPublishRetryAfterRestartResumesSweptVolume: the driver stops while a publish waits for its
// first certificate, and the pod lives on. The restarted node's start-up sweep removes the
// never-mounted volume but keeps its pending key aside; kubelet's retry of the publish resumes
// the held request with it. One CertificateRequest is created in all.
func TestPublishRetryAfterRestartResumesSweptVolume(t *testing.T) {
	ns := newNamespace(t)
	pod := newPod(t, ns, "restart-first-issuance")
	base := t.TempDir()
	crashed := make(chan struct{})
	a := startNode(t, nodeConfig{baseDir: base, wrapStore: func(fs *storage.Filesystem) storage.Interface {
		return &crashStore{Filesystem: fs, crashed: crashed}
	}})
	req := publishRequest(t, pod, "csi-swept")
	go func() { _, _ = a.client.NodePublishVolume(context.Background(), req) }()
	var held string
	poll(t, "the first issuance's request", func() bool {
		if reqs := requestsIn(t, cm, ns); len(reqs) == 1 {
			held = reqs[0].Name
		}
		return held != ""
	})
	keyFile := filepath.Join(base, "inmemfs", "csi-swept", "pending-key.pem")
	poll(t, "the pending key file", func() bool { _, err := os.Stat(keyFile); return err == nil })
	close(crashed)
	a.stop()

	b := startNode(t, nodeConfig{baseDir: base})
	res := b.fs.StartupSweep()
	if len(res.RemovedNeverMounted) != 1 || len(res.KeptPendingKeys) != 1 || res.KeptPendingKeys[0] != "csi-swept" {
		t.Fatalf("start-up sweep = %+v; want csi-swept removed and its pending key kept", res)
	}
	runSigner(t, ns, newCA(t))
	if _, err := b.client.NodePublishVolume(ctxTimeout(t, pollTimeout), req); err != nil {
		t.Fatalf("publish retry after the restart: %v", err)
	}
	reqs := requestsIn(t, cm, ns)
	if len(reqs) != 1 || reqs[0].Name != held {
		t.Fatalf("%d requests after the retry, want only the held %q", len(reqs), held)
	}
	chain, err := b.fs.ReadFile("csi-swept", "tls.crt")
	if err != nil || !bytes.Equal(chain, reqs[0].Status.Certificate) {
		t.Fatalf("the volume's certificate is not the held request's: %v", err)
	}
	if ids, _ := b.fs.SweptPendingKeys(); len(ids) != 0 {
		t.Fatalf("swept keys left after the retry adopted its key: %v", ids)
	}
}
