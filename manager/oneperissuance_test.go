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
	"errors"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cert-manager/csi-lib/internal/certrequests"
	"github.com/cert-manager/csi-lib/internal/certs"
	"github.com/cert-manager/csi-lib/storage"
	"github.com/cert-manager/csi-lib/test/testkit"
)

// connectionReset is what a client sees when the connection breaks during a request.
var connectionReset = &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}

// loseCreates makes the first n creates of a CertificateRequest fail with a connection reset:
// after the fake apiserver created it (acted) or before (not acted). It returns the first name
// sent.
func loseCreates(e *env, n int, acted bool) func() string {
	var mu sync.Mutex
	var sent string
	lost := 0
	gvr := cmapi.SchemeGroupVersion.WithResource("certificaterequests")
	e.client.PrependReactor("create", "certificaterequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if lost == n {
			return false, nil, nil
		}
		lost++
		req := a.(k8stesting.CreateAction).GetObject().(*cmapi.CertificateRequest)
		if sent == "" {
			sent = req.Name
		}
		if acted {
			// A second create of the same name finds it; the response is lost all the same.
			_ = e.client.Tracker().Create(gvr, req.DeepCopy(), req.Namespace)
		}
		return true, nil, connectionReset
	})
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		return sent
	}
}

// A create whose response is lost is settled (it exists, or is created under the same name) and
// waited for, in the same attempt or, when the apiserver still does not answer, by kubelet's retry
// of the publish: one request for the issuance, and the key written is the one it was made with.
// (A response lost after the create is settled from the cache when the informer has seen the
// request, so only a request lost before it reliably leaves the settling to the next try.)
func TestLostCreateResponseIsSettledNotRepeated(t *testing.T) {
	for name, tc := range map[string]struct {
		acted     bool
		lost      int
		firstFail bool
	}{
		"response lost after the create, settled at once": {acted: true, lost: 1},
		"request lost before it, settled at once":         {acted: false, lost: 1},
		"request lost before it, settled by the next try": {acted: false, lost: 2, firstFail: true},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, nil)
			sentName := loseCreates(e, tc.lost, tc.acted)
			e.register("v1", false)
			m := e.start()
			var issued *cmapi.CertificateRequest
			if tc.firstFail {
				ctx, cancel := context.WithTimeout(context.Background(), pollTimeout)
				defer cancel()
				if _, err := m.ManageVolumeImmediate(ctx, "v1"); err == nil {
					t.Fatal("the attempt whose create and settling broke succeeded")
				}
				if reqKey, ok := e.persistedKey("v1"); !ok || reqKey != "ns/"+sentName() {
					t.Errorf("the key of a create whose outcome is unknown was not kept (%q kept)", reqKey)
				}
				m.UnmanageVolume("v1")
			}
			// Bounded: a second request, which nobody signs, would make the call wait.
			done := e.manageInBackground("v1")
			issued = e.issuePending()
			if err := <-done; err != nil {
				t.Fatalf("the publish after the lost response: %v", err)
			}
			reqs := e.requests()
			if len(reqs) != 1 || reqs[0].Name != sentName() {
				names := []string{}
				for _, r := range reqs {
					names = append(names, r.Name)
				}
				t.Fatalf("requests %v, want only the one first sent, %s", names, sentName())
			}
			e.mu.Lock()
			key := e.written["v1"][0]
			e.mu.Unlock()
			leaf, err := certs.ParseLeaf(issued.Status.Certificate)
			if err != nil {
				t.Fatal(err)
			}
			if !key.(crypto.Signer).Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(leaf.PublicKey) {
				t.Fatal("the key written is not the key the request was made with")
			}
			e.expectKeyForgotten("v1")
		})
	}
}

// A create the apiserver refused for certain forgets its key: the next attempt makes a new
// request.
func TestRefusedCreateForgetsTheKey(t *testing.T) {
	e := newEnv(t, nil)
	refused := false
	e.client.PrependReactor("create", "certificaterequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if refused {
			return false, nil, nil
		}
		refused = true
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "cert-manager.io", Resource: "certificaterequests"}, "x", nil)
	})
	e.register("v1", false)
	m := e.start()
	if _, err := m.ManageVolumeImmediate(context.Background(), "v1"); !apierrors.IsForbidden(err) {
		t.Fatalf("error %v, want the refusal", err)
	}
	// Its key is forgotten on disk as in memory (pendingkeys' TestRequestDeletedForgetsTheKey).
	if reqKey, ok := e.persistedKey("v1"); ok {
		t.Fatalf("a refused create kept its key (%s)", reqKey)
	}
	m.UnmanageVolume("v1")
	e.manageAndIssue("v1")
	if n := len(e.requests()); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
}

// Settling reads the request before it creates it again: a create whose response was lost
// while the informer's watch was down (so the cache cannot show the request) is found by a read,
// and the publish waits for it with one create sent in all.
func TestSettlingReadsBeforeItCreatesAgain(t *testing.T) {
	e := newEnv(t, nil)
	cut := cuttableInformerWatch(e)
	sentName := loseCreates(e, 1, true)
	e.register("v1", false)
	e.start()
	e.cutAndWaitSuspect(cut)
	done := e.manageInBackground("v1")
	pending := e.waitForPending()
	// Signed once the publish waits on what its settling read (the request, not yet signed): the
	// signature reaches it only by a direct read, the watch being down.
	e.waitLogged(resumedUnseen, 1)
	if _, err := testkit.Issue(context.Background(), e.client, e.ca, pending, e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	e.stepDirectRead()
	if err := <-done; err != nil {
		t.Fatalf("the publish after the lost response: %v", err)
	}
	if n := testkit.CountActions(e.client, "create"); n != 1 {
		t.Fatalf("%d creates sent, want 1: settling created again what a read would have found", n)
	}
	if reqs := e.requests(); len(reqs) != 1 || reqs[0].Name != sentName() {
		t.Fatalf("%d requests, want only the one first sent", len(reqs))
	}
}

// A settling whose own create gets no answer either (here a refused connection, which for a
// first create would mean the request never left) leaves the first create's outcome unknown: the
// key stays held, and the next attempt settles the same request.
func TestSettlingWithoutAnAnswerKeepsTheKey(t *testing.T) {
	e := newEnv(t, nil)
	var mu sync.Mutex
	creates := 0
	e.client.PrependReactor("create", "certificaterequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		creates++
		switch creates {
		case 1:
			return true, nil, connectionReset // lost before the apiserver acted
		case 2:
			return true, nil, connectionRefused // the settling's create
		}
		return false, nil, nil
	})
	e.register("v1", false)
	m := e.start()
	ctx, cancel := context.WithTimeout(context.Background(), pollTimeout)
	defer cancel()
	if _, err := m.ManageVolumeImmediate(ctx, "v1"); err == nil {
		t.Fatal("the attempt whose create and settling got no answer succeeded")
	}
	// The key stays: on disk, and held with the request as sent, which the next attempt settles
	// (below). So does the request's place in the creation order (certrequests'
	// TestUnansweredSettlingKeepsTheCreationOrder).
	reqKey, ok := e.persistedKey("v1")
	if !ok {
		t.Fatal("the key was forgotten although the first create's outcome is still unknown")
	}
	_, sentName, _ := strings.Cut(reqKey, "/")
	m.UnmanageVolume("v1")
	e.manageAndIssue("v1")
	if reqs := e.requests(); len(reqs) != 1 || reqs[0].Name != sentName {
		t.Fatalf("%d requests, want only the one first sent", len(reqs))
	}
}

// PodTerminating ends a publish's wait for its request at once, and nothing more is created for
// the pod: a later publish of its volume is refused without a request.
func TestPodTerminatingEndsThePublishAndCreatesNothing(t *testing.T) {
	e := newEnv(t, nil)
	meta := e.register("v1", false)
	m := e.start()
	done := make(chan error, 1)
	go func() { done <- m.ManageVolumeForPublish(context.Background(), meta, false) }()
	e.waitForPending()
	m.PodTerminating("uid-v1")
	select {
	case err := <-done:
		if !errors.Is(err, ErrPodTerminating) {
			t.Fatalf("publish = %v, want ErrPodTerminating", err)
		}
	case <-time.After(pollTimeout):
		t.Fatal("the publish still waits for its request after PodTerminating")
	}
	m.UnmanageVolume("v1")
	if err := m.ManageVolumeForPublish(context.Background(), meta, false); !errors.Is(err, ErrPodTerminating) {
		t.Fatalf("a later publish = %v, want ErrPodTerminating", err)
	}
	if n := len(e.requests()); n != 1 {
		t.Fatalf("%d requests, want only the first publish's", n)
	}
	if got := e.counter(issueErrors, "v1"); got != 0 {
		t.Fatalf("a terminating pod counted %v issuance errors", got)
	}
}

// TestLaggingCacheResumesTheCreatedRequest: a request created for certain that the informer's
// cache has not shown when the attempt's deadline ends (a slow watch: here its events are held)
// is resumed by the next attempt, kubelet's retry, from a read of the apiserver; never a second
// request. Signed before the retry, it is written at once, with the key it was made with;
// signed during it, the retry writes it once the events arrive.
func TestLaggingCacheResumesTheCreatedRequest(t *testing.T) {
	for _, signedBeforeRetry := range []bool{true, false} {
		t.Run(map[bool]string{true: "signed before the retry", false: "signed during the retry"}[signedBeforeRetry], func(t *testing.T) {
			e := newEnv(t, nil)
			_, release, created, endPublish := e.publishUnseen()
			sign := func() {
				if _, err := testkit.Issue(context.Background(), e.client, e.ca, &created, e.clock.Now()); err != nil {
					t.Fatal(err)
				}
			}
			if signedBeforeRetry {
				sign()
			}
			endPublish()

			// kubelet's retry.
			retry := e.manageInBackground("v1")
			if !signedBeforeRetry {
				e.waitLogged(resumedUnseen, 1)
				sign()
				release()
			}
			if err := <-retry; err != nil {
				t.Fatalf("the retry: %v", err)
			}
			if reqs := e.requests(); len(reqs) != 1 {
				t.Fatalf("%d requests for one issuance", len(reqs))
			}
			e.mu.Lock()
			key := e.written["v1"][0]
			e.mu.Unlock()
			leaf, err := certs.ParseLeaf(e.requests()[0].Status.Certificate)
			if err != nil {
				t.Fatal(err)
			}
			if !key.(crypto.Signer).Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(leaf.PublicKey) {
				t.Fatal("the key written is not the key the request was made with")
			}
			release()
			e.expectKeyForgotten("v1")
		})
	}
}

// publishUnseen starts the manager with the informer's watch events held (release delivers
// them) and publishes volume v1 with ManageVolumeImmediate, which creates its request; the cache
// does not show it. endPublish ends that publish, as its deadline would, asserts it failed, and
// unmanages the volume, as the node server does.
func (e *env) publishUnseen() (m *Manager, release func(), created cmapi.CertificateRequest, endPublish func()) {
	e.t.Helper()
	release = testkit.SlowWatches(e.client, cmapi.SchemeGroupVersion.WithResource("certificaterequests"), time.Hour)
	e.register("v1", false)
	m = e.start()
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() { _, err := m.ManageVolumeImmediate(ctx, "v1"); first <- err }()
	e.poll("the request to be created", func() bool { return len(e.requests()) == 1 })
	endPublish = func() {
		e.t.Helper()
		cancel()
		if err := <-first; err == nil {
			e.t.Fatal("the publish succeeded without seeing its request")
		}
		m.UnmanageVolume("v1")
	}
	return m, release, e.requests()[0], endPublish
}

// TestTheCacheCatchingUpDuringALookupNeverCostsASecondRequest: the retry of an attempt whose
// request the informer's cache had not shown reads the volume's requests from the cache before
// the cache shows that request, and the cache shows it (ending the hold on it) just after that
// read: the retry still resumes the request, and never creates a second one.
func TestTheCacheCatchingUpDuringALookupNeverCostsASecondRequest(t *testing.T) {
	e := newEnv(t, nil)
	// The retry, by the volume's loop: its attempt reads the volume's requests from the cache,
	// and the cache catches up just after, before the attempt goes on (the test hook holds it
	// there).
	var catchUp func() bool
	var armed atomic.Bool
	caughtUp := make(chan bool, 1)
	e.opts.testHooks.requestsRead = func(volumeID string) {
		if volumeID == "v1" && armed.CompareAndSwap(true, false) {
			caughtUp <- catchUp()
		}
	}
	m, release, _, endPublish := e.publishUnseen()
	endPublish()
	handled := e.informerBarrier(m)
	catchUp = func() bool {
		release()
		return handled()
	}
	armed.Store(true)
	if !m.ManageVolume("v1") {
		t.Fatal("ManageVolume = false")
	}
	if !<-caughtUp {
		t.Fatal("the informer did not handle the events held back")
	}
	e.waitLogged(resumedUnseen, 1)
	if n := len(e.requests()); n != 1 {
		t.Fatalf("%d requests for one issuance", n)
	}
	e.issuePending()
	e.poll("the key pair to be written", func() bool { e.mu.Lock(); defer e.mu.Unlock(); return len(e.written["v1"]) == 1 })
}

// resumedUnseen is what an attempt logs as it resumes a request it created, or may have
// created, that the informer's cache had not shown.
const resumedUnseen = "Resuming the CertificateRequest created for this volume (its create's outcome was unknown, or the informer's cache had not shown it)"

// informerBarrier readies a way to learn that the manager's informer has handled every event
// up to a point, its handlers included (the cache shows an object before they run): it publishes
// a sentinel volume and ends that publish while its request is pending, so that the manager
// keeps the request's key on disk. The returned handled deletes that request and waits (bounded)
// until the key file is gone, which only the informer's delete handler does, after the handlers
// of every event before the delete; it reports whether that came, and may run on any goroutine.
func (e *env) informerBarrier(m *Manager) (handled func() bool) {
	e.t.Helper()
	e.register("sentinel", false)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := m.ManageVolumeImmediate(ctx, "sentinel"); done <- err }()
	var reqKey string
	e.poll("the sentinel's request", func() bool {
		var ok bool
		reqKey, ok = e.persistedKey("sentinel")
		return ok && len(e.requests()) > 0 && slices.ContainsFunc(e.requests(), func(r cmapi.CertificateRequest) bool {
			return certrequests.Key(r.Namespace, r.Name) == reqKey
		})
	})
	cancel()
	if err := <-done; err == nil {
		e.t.Fatal("the sentinel's publish succeeded without a signer")
	}
	m.UnmanageVolume("sentinel")
	if got, ok := e.persistedKey("sentinel"); !ok || got != reqKey {
		e.t.Fatalf("the sentinel's key is not kept on disk (%q, %v)", got, ok)
	}
	namespace, name, _ := strings.Cut(reqKey, "/")
	return func() bool {
		if err := e.client.CertmanagerV1().CertificateRequests(namespace).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
			return false
		}
		return pollFor(func() bool {
			_, err := e.store.ReadPendingKey("sentinel")
			return errors.Is(err, storage.ErrNotFound)
		})
	}
}

// TestAFailedPublishOfAMountedVolumeLeavesNoRegistration: a mounted volume the manager does not
// manage (the start-up resume did not see it) is published, and its first attempt fails. The
// publish leaves no registration behind, so kubelet's retry attempts again, issues, and starts
// the volume's loop; a registration left without a loop would answer the retry at once and the
// volume would never be renewed.
func TestAFailedPublishOfAMountedVolumeLeavesNoRegistration(t *testing.T) {
	e := newEnv(t, nil)
	m := e.start()
	meta := e.register("v1", true)
	e.failKeygen.Store(true)
	if err := m.ManageVolumeForPublish(context.Background(), meta, false); err == nil || !strings.Contains(err.Error(), "keygen broken") {
		t.Fatalf("first publish: %v, want the key generation's error", err)
	}
	e.failKeygen.Store(false)

	ctx, cancel := context.WithTimeout(context.Background(), pollTimeout)
	defer cancel()
	retried := make(chan error, 1)
	go func() { retried <- m.ManageVolumeForPublish(ctx, meta, false) }()
	req := e.waitForPending()
	if _, err := testkit.Issue(context.Background(), e.client, e.ca, req, e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if err := <-retried; err != nil {
		t.Fatalf("the retried publish: %v", err)
	}
	e.mu.Lock()
	loops, written := e.loopsStarted["v1"], len(e.written["v1"])
	e.mu.Unlock()
	if loops != 1 || written != 1 {
		t.Fatalf("after the retried publish: %d loops started, %d key pairs written; want 1 and 1", loops, written)
	}
}
