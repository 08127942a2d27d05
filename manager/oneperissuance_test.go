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
	"sync"
	"syscall"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cert-manager/csi-lib/internal/certrequests"
	"github.com/cert-manager/csi-lib/internal/certs"
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
				if _, ok := m.issuance.keys.UnseenRequest("v1"); !ok {
					t.Error("the key of a create whose outcome is unknown was not kept")
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
			if _, ok := m.issuance.keys.UnseenRequest("v1"); ok || m.issuance.keys.Count() != 0 {
				t.Fatalf("keys left after the issuance: %d", m.issuance.keys.Count())
			}
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
	if _, ok := m.issuance.keys.UnseenRequest("v1"); ok || m.issuance.keys.Count() != 0 {
		t.Fatalf("a refused create kept its key (%d keys)", m.issuance.keys.Count())
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
	m := e.start()
	cut()
	e.poll("the watch to be suspect", watchSuspect(m))
	done := e.manageInBackground("v1")
	pending := e.waitForPending()
	// Signed once the publish waits on what its settling read (the request, not yet signed): the
	// signature reaches it only by a direct read, the watch being down.
	e.poll("the publish to wait on the request", func() bool { return m.issuance.requests.Waiting() == 1 })
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
	held, ok := m.issuance.keys.UnseenRequest("v1")
	sent := held.Request
	if !ok {
		t.Fatal("the key was forgotten although the first create's outcome is still unknown")
	}
	if !m.issuance.requests.CreatedHere(certrequests.Key(sent.Namespace, sent.Name)) {
		t.Fatal("the request's place in the creation order was forgotten")
	}
	m.UnmanageVolume("v1")
	e.manageAndIssue("v1")
	if reqs := e.requests(); len(reqs) != 1 || reqs[0].Name != sent.Name {
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
			m, release, created, endPublish := e.publishUnseen()
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
				e.poll("the retry to wait on the request", func() bool { return m.issuance.requests.Waiting() == 1 })
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
			e.poll("the cache to show the request", func() bool { _, held := m.issuance.keys.UnseenRequest("v1"); return !held })
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
	m, release, _, endPublish := e.publishUnseen()
	endPublish()

	// The retry, by the volume's loop: its attempt reads the volume's requests from the cache,
	// and the cache catches up just after.
	caughtUp := make(chan bool, 1)
	var once sync.Once
	m.issuance.requestsRead = func() {
		once.Do(func() {
			release()
			caughtUp <- pollFor(func() bool { _, held := m.issuance.keys.UnseenRequest("v1"); return !held })
		})
	}
	if !m.ManageVolume("v1") {
		t.Fatal("ManageVolume = false")
	}
	if !<-caughtUp {
		t.Fatal("the cache did not show the request")
	}
	e.poll("the retry to wait on a request", func() bool { return m.issuance.requests.Waiting() == 1 })
	if n := len(e.requests()); n != 1 {
		t.Fatalf("%d requests for one issuance", n)
	}
	e.issuePending()
	e.poll("the key pair to be written", func() bool { e.mu.Lock(); defer e.mu.Unlock(); return len(e.written["v1"]) == 1 })
}
