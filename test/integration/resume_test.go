//go:build integration

package integration

import (
	"bytes"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cert-manager/csi-lib/internal/testkit"
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
		_, err := n.client.NodePublishVolume(ctxTimeout(t, 2*time.Second), req)
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
