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

package testkit

import (
	"sync"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/fake"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"
)

// NewScalableFakeClient returns a fake cert-manager clientset whose CertificateRequest watches
// never overflow. The stock fake gives each watcher a 100-event buffer and panics when a burst of
// thousands of creates outruns a consumer; here creates, updates and deletes of
// CertificateRequests are broadcast to watchers with deep buffers (a full buffer blocks the
// writer instead of panicking). Benchmarks and the demo's load runs use it.
func NewScalableFakeClient() *fake.Clientset {
	client := fake.NewSimpleClientset()
	tracker := client.Tracker()
	gvr := cmapi.SchemeGroupVersion.WithResource("certificaterequests")
	var mu sync.Mutex
	type watcher struct {
		ns string
		w  *watch.FakeWatcher
	}
	var watchers []watcher
	broadcast := func(t watch.EventType, obj runtime.Object) {
		acc, err := meta.Accessor(obj)
		if err != nil {
			return
		}
		mu.Lock()
		ws := append([]watcher(nil), watchers...)
		mu.Unlock()
		for _, w := range ws {
			if w.ns == "" || w.ns == acc.GetNamespace() {
				func() {
					defer func() { _ = recover() }() // a stopped watcher
					w.w.Action(t, obj.DeepCopyObject())
				}()
			}
		}
	}
	client.PrependWatchReactor("certificaterequests", func(a k8stesting.Action) (bool, watch.Interface, error) {
		w := watch.NewFakeWithChanSize(1<<18, false)
		mu.Lock()
		watchers = append(watchers, watcher{ns: a.GetNamespace(), w: w})
		mu.Unlock()
		return true, w, nil
	})
	client.PrependReactor("create", "certificaterequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.CreateAction).GetObject()
		if err := tracker.Create(gvr, obj, a.GetNamespace()); err != nil {
			return true, nil, err
		}
		broadcast(watch.Added, obj)
		return true, obj.DeepCopyObject(), nil
	})
	client.PrependReactor("update", "certificaterequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.UpdateAction).GetObject()
		if err := tracker.Update(gvr, obj, a.GetNamespace()); err != nil {
			return true, nil, err
		}
		broadcast(watch.Modified, obj)
		return true, obj.DeepCopyObject(), nil
	})
	client.PrependReactor("delete", "certificaterequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		da := a.(k8stesting.DeleteAction)
		obj, err := tracker.Get(gvr, da.GetNamespace(), da.GetName())
		if err != nil {
			return true, nil, err
		}
		if err := tracker.Delete(gvr, da.GetNamespace(), da.GetName()); err != nil {
			return true, nil, err
		}
		broadcast(watch.Deleted, obj)
		return true, nil, nil
	})
	return client
}

// StampLikeAPIServer makes client's creates of CertificateRequests get what a real apiserver
// sets: a fresh UID and a CreationTimestamp of now, truncated to the second as the apiserver
// stores it (so requests made within one second compare equal). The default reactors then
// store the object as usual.
func StampLikeAPIServer(client *fake.Clientset, now func() time.Time) {
	client.PrependReactor("create", "certificaterequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if req, ok := a.(k8stesting.CreateAction).GetObject().(*cmapi.CertificateRequest); ok {
			req.UID = uuid.NewUUID()
			req.CreationTimestamp = metav1.NewTime(now().Truncate(time.Second))
		}
		return false, nil, nil
	})
}

// CountActions counts the client's recorded actions of one verb on CertificateRequests.
func CountActions(client *fake.Clientset, verb string) int {
	n := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == "certificaterequests" {
			n++
		}
	}
	return n
}
