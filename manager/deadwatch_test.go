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
	"sync"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cert-manager/csi-lib/internal/certrequests"
	"github.com/cert-manager/csi-lib/test/testkit"
)

// cuttableInformerWatch serves the informer's first watch from the fake apiserver and lets the
// test end its stream, as a broken connection does. Every later watch of the informer is
// refused: client-go retries a refused watch after its backoff without relisting and without
// calling the informer's watch error handler, so nothing brings the cache up to date.
func cuttableInformerWatch(e *env) (cut func()) {
	var mu sync.Mutex
	var first watch.Interface
	gvr := cmapi.SchemeGroupVersion.WithResource("certificaterequests")
	e.client.PrependWatchReactor("certificaterequests", func(a k8stesting.Action) (bool, watch.Interface, error) {
		if a.(k8stesting.WatchAction).GetWatchRestrictions().Labels.Empty() {
			return false, nil, nil // the test's own watches
		}
		mu.Lock()
		defer mu.Unlock()
		if first != nil {
			return true, nil, connectionRefused
		}
		w, err := e.client.Tracker().Watch(gvr, a.GetNamespace())
		first = w
		return true, w, err
	})
	return func() {
		mu.Lock()
		defer mu.Unlock()
		first.Stop() // the inner stream ends; nobody stopped the informer's watch
	}
}

// A watch stream that ends while no new watch can be opened leaves the informer's cache behind
// without any error reaching the informer's handler. A publish waiting for its request then reads
// it from the apiserver every certrequests.DirectReadInterval, so a certificate signed meanwhile is written
// though no event ever comes.
func TestEndedWatchStreamMakesTheWaitReadDirectly(t *testing.T) {
	e := newEnv(t, nil)
	cut := cuttableInformerWatch(e)
	e.register("v1", false)
	m := e.start()
	done := e.manageInBackground("v1")
	pending := e.waitForPending()
	e.poll("the publish to wait for its request in the cache", func() bool {
		_, err := m.issuance.requests.Lister().CertificateRequests(pending.Namespace).Get(pending.Name)
		return err == nil && m.issuance.requests.Waiting() == 1
	})
	cut()
	if _, err := testkit.Issue(context.Background(), e.client, e.ca, pending, e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	e.stepDirectRead()
	if err := <-done; err != nil {
		t.Fatalf("the publish: %v", err)
	}
	if got, err := m.issuance.requests.Lister().CertificateRequests(pending.Namespace).Get(pending.Name); err != nil || testkit.IsFinished(got) {
		t.Fatal("the informer's cache saw the signature: the test did not keep the watch down")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.written["v1"]) != 1 {
		t.Fatalf("%d key pairs written, want 1", len(e.written["v1"]))
	}
}

// stepDirectRead waits until a wait sets its direct-read timer, the only timer waiting on the
// clock (a ManageVolumeImmediate call's wait), and steps the clock through it.
func (e *env) stepDirectRead() {
	e.t.Helper()
	if d := e.nextTimer(); d != certrequests.DirectReadInterval {
		e.t.Fatalf("the wait set a %v timer, want its %v direct read", d, certrequests.DirectReadInterval)
	}
	e.poll("the direct read's timer", func() bool { return e.clock.Waiters() == 1 })
	e.clock.Step(certrequests.DirectReadInterval)
}

// watchSuspect reports, for a poll, whether the manager's informer watch is suspect.
func watchSuspect(m *Manager) func() bool {
	return func() bool {
		suspect, _ := m.issuance.health.WatchSuspect()
		return suspect
	}
}
