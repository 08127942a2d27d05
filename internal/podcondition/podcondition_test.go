/*
Copyright 2026 The cert-manager Authors.

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

package podcondition

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
)

const condType = corev1.PodConditionType("csi.example.com/certificate-ready")

var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// pod is the reference of the pod the tests' volumes belong to.
var pod = &corev1.ObjectReference{Namespace: "ns", Name: "pod-v1", UID: "uid-v1"}

// testWriter is a running Writer on a fake clock and the fake clientset kube. Refused returns
// err unchanged; ended and refusals record what PodEnding and Refused were told.
type testWriter struct {
	*Writer
	clock *clocktesting.FakeClock

	toldMu   sync.Mutex
	ended    []types.UID
	refusals []string // "verb resource namespace"
}

func newTestWriter(t *testing.T, kube *kubefake.Clientset) *testWriter {
	tw := &testWriter{clock: clocktesting.NewFakeClock(start)}
	tw.Writer = New(Config{
		Type:   condType,
		Client: kube.CoreV1(),
		Clock:  tw.clock,
		Log:    logr.Discard(),
		PodEnding: func(uid types.UID) {
			tw.toldMu.Lock()
			defer tw.toldMu.Unlock()
			tw.ended = append(tw.ended, uid)
		},
		Refused: func(err error, verb, resource, namespace string) error {
			tw.toldMu.Lock()
			defer tw.toldMu.Unlock()
			tw.refusals = append(tw.refusals, fmt.Sprintf("%s %s %s", verb, resource, namespace))
			return err
		},
	})
	go tw.Run()
	t.Cleanup(tw.Stop)
	return tw
}

// poll waits (bounded) until cond holds.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// patches counts the status patches made through kube.
func patches(kube *kubefake.Clientset) int {
	n := 0
	for _, a := range kube.Actions() {
		if a.GetVerb() == "patch" && a.GetResource().Resource == "pods" && a.GetSubresource() == "status" {
			n++
		}
	}
	return n
}

// TestGonePodIsDropped: a pod deleted before its condition is written is given up on the
// patch's NotFound: PodEnding is told, it is not retried, not written again when its volume's
// validity changes, and forgotten with its volume.
func TestGonePodIsDropped(t *testing.T) {
	kube := kubefake.NewClientset() // pod-v1 does not exist
	w := newTestWriter(t, kube)
	w.SetVolume(pod, "v1", ReasonNotIssued, false)
	w.SetVolume(pod, "v1", "", false)
	gone := func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		s := w.pods["uid-v1"]
		return s != nil && s.gone
	}
	poll(t, "the pod to be known gone", gone)
	w.toldMu.Lock()
	if len(w.ended) != 1 || w.ended[0] != "uid-v1" {
		t.Errorf("PodEnding was told %v, want the gone pod once", w.ended)
	}
	w.toldMu.Unlock()

	// Its volume's validity changes: the pod is not queued, so nothing is written, however far
	// the clock moves.
	w.SetVolume(pod, "v1", ReasonExpired, false)
	if n := w.queue.Len(); n != 0 {
		t.Fatalf("the gone pod was queued again (%d in the queue)", n)
	}
	w.clock.Step(time.Hour)
	time.Sleep(100 * time.Millisecond)
	if n := patches(kube); n != 1 {
		t.Fatalf("%d patches for a gone pod, want the one that found it gone", n)
	}
	if n := w.queue.NumRequeues("uid-v1"); n != 0 {
		t.Fatalf("the gone pod was requeued %d times", n)
	}
	w.RemoveVolume(pod, "v1")
	w.mu.Lock()
	left := len(w.pods)
	w.mu.Unlock()
	if left != 0 {
		t.Fatal("the gone pod outlived its volume")
	}
}
