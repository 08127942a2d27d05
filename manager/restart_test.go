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
	"encoding/pem"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cert-manager/csi-lib/internal/certrequests"
	"github.com/cert-manager/csi-lib/internal/pendingkeys"
	"github.com/cert-manager/csi-lib/storage"
	"github.com/cert-manager/csi-lib/test/testkit"
)

// plainReader hides the MemoryFS's PendingKeyStore: a third-party store.
type plainReader struct{ storage.MetadataReader }

// restartWhilePending makes the mounted volume v1 due, lets manager A create its request and
// stops A before anyone signs; manager B (same store and clientset) takes over; the request is
// then signed. It returns the number of creates the clientset saw and the key pair B wrote.
func restartWhilePending(t *testing.T, hideKeyStore bool) (creates int, e *env) {
	e = newEnv(t, func(o *Options) {
		if hideKeyStore {
			o.MetadataReader = plainReader{o.MetadataReader}
		}
	})
	testkit.StampLikeAPIServer(e.client, e.clock.Now)
	e.register("v1", true)
	a := e.start()
	pending := e.waitForPending()
	e.waitInformerHas(pending)
	a.Stop()

	e.start()
	e.poll("B's attempt to resume or replace the request", func() bool {
		return len(e.logged("Resuming CertificateRequest")) == 1 || len(e.logged("Created CertificateRequest")) == 2
	})
	e.issuePending()
	e.poll("the key pair to be written", func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return len(e.written["v1"]) == 1
	})
	return testkit.CountActions(e.client, "create"), e
}

// TestRestartResumesPendingRequest: with a store that keeps pending keys, a restart while a
// request is pending costs no new request: the restarted manager resumes it with the same key.
// A store without PendingKeyStore keeps the old behaviour (the request is replaced).
func TestRestartResumesPendingRequest(t *testing.T) {
	creates, e := restartWhilePending(t, false)
	if creates != 1 {
		t.Fatalf("%d creates across the restart, want 1", creates)
	}
	reqs := e.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	e.mu.Lock()
	key := e.written["v1"][0]
	e.mu.Unlock()
	if !keyMatches(t, key, reqs[0].Status.Certificate) {
		t.Fatal("the key pair written is not the resumed request's certificate with its key")
	}
	// The key file goes once WriteKeypair has returned, so it is waited for.
	e.poll("the persisted key to be removed after issuance", func() bool {
		_, err := e.store.ReadPendingKey("v1")
		return err == storage.ErrNotFound
	})
	files, _ := e.store.ReadFiles("v1")
	for name, content := range files {
		if block, _ := pem.Decode(content); block != nil && block.Headers[pendingkeys.RequestHeader] != "" {
			t.Fatalf("the persisted key is among the volume's files (%s)", name)
		}
	}

	creates, _ = restartWhilePending(t, true)
	if creates != 2 {
		t.Fatalf("a store without PendingKeyStore: %d creates, want 2 (the request replaced)", creates)
	}
}

// TestPersistedKeyMismatchAndOrphan: a persisted key that does not match the request's CSR, or
// that names a request that is not pending, is removed; the request is replaced.
func TestPersistedKeyMismatchAndOrphan(t *testing.T) {
	e := newEnv(t, nil)
	e.register("v1", true)
	a := e.start()
	pending := e.waitForPending()
	e.waitInformerHas(pending)
	a.Stop()
	// Replace the persisted key with another key for the same request.
	other, _ := testkit.NewKey()
	pendingkeys.New(logr.Discard(), e.store).Remember(logr.Discard(), "v1", certrequests.Key(pending.Namespace, pending.Name), other)

	b, err := NewManager(e.opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	e.m = b
	e.poll("the mismatched request to be replaced", func() bool {
		reqs := e.requests()
		return len(reqs) == 1 && reqs[0].Name != pending.Name
	})
	replacement := e.waitForPending()
	data, err := e.store.ReadPendingKey("v1")
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block.Headers[pendingkeys.RequestHeader] != certrequests.Key(replacement.Namespace, replacement.Name) {
		t.Fatalf("persisted key names %q, want the replacement", block.Headers[pendingkeys.RequestHeader])
	}
	b.Stop()

	// A key without a request: the request is deleted while no manager runs.
	if err := e.client.CertmanagerV1().CertificateRequests("ns").Delete(context.Background(), replacement.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.gateOpen.Store(false) // the next attempt stops at the gate, after looking at the key
	c, err := NewManager(e.opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	e.poll("the orphaned key to be removed", func() bool {
		_, err := e.store.ReadPendingKey("v1")
		return err == storage.ErrNotFound
	})
}

// crashDuringFirstIssuance plays a driver stopped while the publish of v1 waits for its first
// certificate, and the restart's start-up sweep: the never-mounted volume is removed and its
// pending key kept aside. It returns the pending request and the restarted manager, whose
// store is e.store.
func crashDuringFirstIssuance(t *testing.T, e *env) (*cmapi.CertificateRequest, *Manager) {
	t.Helper()
	pending := crashAndSweep(t, e)
	return pending, e.start()
}

// crashAndSweep is crashDuringFirstIssuance up to the restart's sweep: it returns the pending
// request, with no manager running.
func crashAndSweep(t *testing.T, e *env) *cmapi.CertificateRequest {
	t.Helper()
	testkit.StampLikeAPIServer(e.client, e.clock.Now)
	e.register("v1", false)
	a := e.start()
	publishAttempt(t, a, "v1")
	pending := e.waitForPending()
	e.waitInformerHas(pending)
	a.Stop()
	if res := e.store.Sweep(testr.New(t)); len(res.KeptPendingKeys) != 1 || len(res.RemovedNeverMounted) != 1 {
		t.Fatalf("sweep = %+v; want v1 removed and its pending key kept", res)
	}
	return pending
}

// sweptKeyKept reports whether the store still keeps v1's swept pending key.
func (e *env) sweptKeyKept() bool {
	_, err := e.store.ReadSweptPendingKey("v1")
	return err == nil
}

// TestPublishRetryAfterRestartResumesSweptVolume: the driver stops during a first issuance and
// the start-up sweep removes the never-mounted volume; kubelet's retry of the publish (same
// volume ID) resumes the held request with the kept key: one create in all.
func TestPublishRetryAfterRestartResumesSweptVolume(t *testing.T) {
	e := newEnv(t, nil)
	pending, b := crashDuringFirstIssuance(t, e)
	if !e.sweptKeyKept() {
		t.Fatal("the restarted manager removed the kept key of a request that still exists")
	}

	e.register("v1", false)
	_, done := publishAttempt(t, b, "v1")
	issued := e.issuePending()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("publish retry: %v", err)
		}
	case <-time.After(pollTimeout):
		t.Fatalf("the publish retry did not end once %s was issued", issued.Name)
	}
	if issued.Name != pending.Name {
		t.Fatalf("the retry's request is %s, want the held %s", issued.Name, pending.Name)
	}
	if n := testkit.CountActions(e.client, "create"); n != 1 {
		t.Fatalf("%d creates across the restart, want 1", n)
	}
	e.mu.Lock()
	key := e.written["v1"][0]
	e.mu.Unlock()
	if !keyMatches(t, key, issued.Status.Certificate) {
		t.Fatal("the key pair written is not the held request's certificate with its key")
	}
	if e.sweptKeyKept() {
		t.Fatal("the adopted key is still kept aside")
	}
	e.poll("the adopted key to be removed after issuance", func() bool {
		_, err := e.store.ReadPendingKey("v1")
		return err == storage.ErrNotFound
	})
}

// TestSweptKeyExpires: a kept key whose volume is not published again is removed exactly when
// the grace period after start-up ends.
func TestSweptKeyExpires(t *testing.T) {
	e := newEnv(t, nil)
	crashDuringFirstIssuance(t, e)
	e.poll("the grace period's timer", func() bool { return e.clock.HasWaiters() })
	e.clock.Step(pendingkeys.SweptKeyGrace - time.Millisecond)
	if !e.clock.HasWaiters() || !e.sweptKeyKept() {
		t.Fatal("the kept key was removed before the grace period ended")
	}
	e.clock.Step(time.Millisecond)
	e.poll("the kept key's removal at the end of the grace period", func() bool { return !e.sweptKeyKept() })
}

// TestSweptKeyGoesWithItsRequest: a kept key is removed when its request is deleted (the pod's
// garbage collection), and at start-up when its request is already gone.
func TestSweptKeyGoesWithItsRequest(t *testing.T) {
	e := newEnv(t, nil)
	pending, b := crashDuringFirstIssuance(t, e)
	if err := e.client.CertmanagerV1().CertificateRequests(pending.Namespace).Delete(context.Background(), pending.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.poll("the kept key's removal with its request", func() bool { return !e.sweptKeyKept() })
	b.Stop()

	// Gone before the start: a key kept for a request that no longer exists is removed then.
	e2 := newEnv(t, nil)
	pending, b = crashDuringFirstIssuance(t, e2)
	b.Stop()
	if err := e2.client.CertmanagerV1().CertificateRequests(pending.Namespace).Delete(context.Background(), pending.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if !e2.sweptKeyKept() {
		t.Fatal("a stopped manager removed the kept key")
	}
	c, err := NewManager(e2.opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	if e2.sweptKeyKept() {
		t.Fatal("NewManager kept a swept key whose request no longer exists")
	}
}

// TestSweptKeyOutlivesAStartWhoseListIsRefused: the driver restarts after a crash during a first
// issuance, and the apiserver refuses the new informer's list. The key the sweep kept is kept,
// since its request may exist: a cache that never synced holds no request at all.
func TestSweptKeyOutlivesAStartWhoseListIsRefused(t *testing.T) {
	e := newEnv(t, nil)
	crashAndSweep(t, e)
	e.allowRefusals = true
	e.opts.Client = testkit.WithRBAC(e.client, testkit.DriverAccount, "watch", "create", "delete")
	b, err := NewManager(e.opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	if !e.sweptKeyKept() {
		t.Fatal("a start whose list was refused removed the kept key of a request that still exists")
	}
}
