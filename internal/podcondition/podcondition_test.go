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

package podcondition

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

const condType = corev1.PodConditionType("csi.example.com/certificate-ready")

var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// pod is the reference of the pod the tests' volumes belong to.
var pod = &corev1.ObjectReference{Namespace: "ns", Name: "pod-v1", UID: "uid-v1"}

// testWriter is a running Writer on a fake clock and the fake clientset kube. ended records what
// PodEnding was told, refusals the text of every error the Writer logged that matches
// apicall.ErrPermissionDenied.
type testWriter struct {
	*Writer
	clock *clocktesting.FakeClock

	toldMu   sync.Mutex
	ended    []types.UID
	refusals []string
}

func newTestWriter(t *testing.T, kube *kubefake.Clientset) *testWriter {
	tw := &testWriter{clock: clocktesting.NewFakeClock(start)}
	tw.Writer = New(Config{
		Type:   condType,
		Client: kube.CoreV1(),
		Clock:  tw.clock,
		Log: funcr.New(func(_, args string) {
			if strings.Contains(args, "permission denied") {
				tw.toldMu.Lock()
				defer tw.toldMu.Unlock()
				tw.refusals = append(tw.refusals, args)
			}
		}, funcr.Options{}),
		PodEnding: func(uid types.UID) {
			tw.toldMu.Lock()
			defer tw.toldMu.Unlock()
			tw.ended = append(tw.ended, uid)
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

// patches counts the status patches of the named pod made through kube.
func patches(kube *kubefake.Clientset, name string) int {
	n := 0
	for _, a := range kube.Actions() {
		if a.GetVerb() == "patch" && a.GetResource().Resource == "pods" && a.GetSubresource() == "status" &&
			a.(k8stesting.PatchAction).GetName() == name {
			n++
		}
	}
	return n
}

// barrierPod is a pod of its own whose condition a test has the Writer write, to learn that the
// Writer is done with what was queued before it (see settle).
var barrierPod = &corev1.ObjectReference{Namespace: "ns", Name: "pod-barrier", UID: "uid-barrier"}

// settle sets barrierPod's only volume to validity, a change that calls for a patch of that
// pod, and waits (bounded) for the patch, the pod's wantPatches-th. Run syncs pods on one
// goroutine, taking each off the queue in the order it was queued and marking it done before
// it takes the next: once the patch is seen, every sync of a pod that was in the queue, or in
// flight, when the barrier pod was queued has ended. Not covered: a pod queued again while its
// sync was in flight, which goes back on the queue only as that sync ends, possibly behind the
// barrier pod; and a retry after a failed call, which waits for the queue's backoff on the
// fake clock.
func (w *testWriter) settle(t *testing.T, kube *kubefake.Clientset, validity Validity, wantPatches int) {
	t.Helper()
	w.SetVolume(barrierPod, "barrier", validity, false)
	poll(t, "the barrier pod's patch", func() bool { return patches(kube, barrierPod.Name) == wantPatches })
}

// TestGonePodIsDropped: a pod deleted before its condition is written is given up on the
// patch's NotFound: PodEnding is told, it is not retried, not written again when its volume's
// validity changes, and forgotten with its volume.
func TestGonePodIsDropped(t *testing.T) {
	// pod-v1 does not exist; the barrier pod does.
	kube := kubefake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: barrierPod.Name, Namespace: barrierPod.Namespace, UID: barrierPod.UID}})
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
	// The sync that found the pod gone has ended once the barrier pod's first patch is seen.
	// A pod waits on the clock only for a retry (Run's AddRateLimited), which NumRequeues
	// counts until the pod's next sync succeeds; the clock has not moved, so a retry asked for
	// would still be waiting, and counted.
	w.settle(t, kube, "", 1)
	if n := w.queue.NumRequeues("uid-v1"); n != 0 {
		t.Fatalf("the gone pod was requeued %d times", n)
	}

	// Its volume's validity changes: the pod is not queued, so nothing is written, however far
	// the clock moves. The step fires no retry of it (none waits, above, and the clock holds no
	// timer but the queue's ticker); had the change queued it, its sync would end before the
	// barrier pod's second patch (for an expired certificate), queued after it.
	w.SetVolume(pod, "v1", ReasonExpired, false)
	if n := w.queue.Len(); n != 0 {
		t.Fatalf("the gone pod was queued again (%d in the queue)", n)
	}
	if n := w.clock.Waiters(); n != 1 {
		t.Fatalf("%d timers on the clock, want only the queue's ticker", n)
	}
	w.clock.Step(time.Hour)
	w.settle(t, kube, ReasonExpired, 2)
	if n := patches(kube, pod.Name); n != 1 {
		t.Fatalf("%d patches for a gone pod, want the one that found it gone", n)
	}
	if n := w.queue.NumRequeues("uid-v1"); n != 0 {
		t.Fatalf("the gone pod was requeued %d times", n)
	}
	w.RemoveVolume(pod, "v1")
	w.mu.Lock()
	_, left := w.pods[pod.UID]
	w.mu.Unlock()
	if left {
		t.Fatal("the gone pod outlived its volume")
	}
}

// TestQueuedOnlyForACall: a change that leaves the pod nothing to call for (it only waits for a
// first certificate, a validity is not known yet, or it carries the condition already) does not
// queue the pod; one that calls for a write does, and so does any change to the pod whose sync
// is in flight, as what that sync read may be out of date.
func TestQueuedOnlyForACall(t *testing.T) {
	w := New(Config{Type: condType, Client: kubefake.NewClientset().CoreV1(), Clock: clocktesting.NewFakeClock(start),
		Log: funcr.New(func(_, _ string) {}, funcr.Options{}), PodEnding: func(types.UID) {}})
	// Run is not started: the queue keeps what is added.
	t.Cleanup(w.queue.ShutDown)
	queued := func(what string, want int) {
		t.Helper()
		if n := w.queue.Len(); n != want {
			t.Fatalf("%s: %d in the queue, want %d", what, n, want)
		}
		for ; want > 0; want-- {
			uid, _ := w.queue.Get()
			w.queue.Done(uid)
		}
	}
	w.SetVolume(pod, "v1", ReasonNotIssued, false)
	queued("waiting for a first certificate", 0)
	w.SetVolume(pod, "v1", ReasonGatePending, false)
	queued("waiting for the gate", 0)
	w.SetVolume(pod, "v2", ValidityUnknown, false)
	queued("a validity not known", 0)
	w.SetVolume(pod, "v2", "", false)
	queued("one of two volumes with a certificate", 0)
	w.SetVolume(pod, "v1", "", false)
	queued("both with a certificate", 1)
	w.learn(pod.UID, &corev1.PodCondition{Type: condType, Status: corev1.ConditionTrue, Reason: ReasonValid,
		Message: "Every certificate volume holds a valid certificate"})
	w.SetVolume(pod, "v1", ReasonExpired, false)
	queued("expired, carrying True", 1)
	w.SetVolume(pod, "v1", "", false)
	queued("valid again, carrying True", 0)
	w.mu.Lock()
	w.syncing = pod.UID // as sync sets it once it has read the pod's state
	w.mu.Unlock()
	w.SetVolume(pod, "v3", "", false)
	queued("a third valid volume while the pod's sync is in flight", 1)
}

// TestRefusedNamesTheCall: a refused read and a refused patch are logged as refusals naming the
// call's verb, resource and namespace, and the pod is retried after the queue's backoff.
func TestRefusedNamesTheCall(t *testing.T) {
	kube := kubefake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-v1", Namespace: "ns", UID: "uid-v1"}})
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "pod-v1", errors.New("no"))
	var mu sync.Mutex
	calls := map[string]int{}
	for _, verb := range []string{"get", "patch"} {
		kube.PrependReactor(verb, "pods", func(k8stesting.Action) (bool, k8sruntime.Object, error) {
			mu.Lock()
			defer mu.Unlock()
			if calls[verb]++; calls[verb] == 1 {
				return true, nil, forbidden
			}
			return false, nil, nil
		})
	}
	w := newTestWriter(t, kube)
	// A resumed volume: the pod is read before it is written.
	w.SetVolume(pod, "v1", "", true)
	refused := func() []string {
		w.toldMu.Lock()
		defer w.toldMu.Unlock()
		return append([]string(nil), w.refusals...)
	}
	// Each refusal is retried after the queue's backoff on the fake clock: step it until both
	// calls have been refused once.
	poll(t, "the refused read and patch", func() bool {
		w.clock.Step(time.Second)
		return len(refused()) == 2
	})
	if got := refused(); !strings.Contains(got[0], `get pods in namespace \"ns\"`) || !strings.Contains(got[1], `patch pods/status in namespace \"ns\"`) {
		t.Errorf("refusals logged %q, want the read of pods and the patch of pods/status in ns", got)
	}
	poll(t, "the condition written", func() bool {
		w.clock.Step(time.Second)
		obj, err := kube.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), "ns", "pod-v1")
		if err != nil {
			t.Fatal(err)
		}
		c := findCondition(obj.(*corev1.Pod).Status.Conditions, condType)
		return c != nil && c.Status == corev1.ConditionTrue && c.Reason == ReasonValid
	})
}

// TestDesired: a pod shows the worst of its volumes, naming it, True when every volume is
// valid, and nothing while a volume's validity is unknown.
func TestDesired(t *testing.T) {
	for name, tc := range map[string]struct {
		volumes map[string]Validity
		ok      bool
		status  corev1.ConditionStatus
		reason  string
		message string
	}{
		"all valid": {map[string]Validity{"a": "", "b": ""}, true, corev1.ConditionTrue, ReasonValid,
			"Every certificate volume holds a valid certificate"},
		"one not issued": {map[string]Validity{"a": "", "b": ReasonNotIssued}, true, corev1.ConditionFalse, ReasonNotIssued,
			"Volume b has no certificate yet"},
		"the worst wins": {map[string]Validity{"a": ReasonFailing, "b": ReasonExpired, "c": ReasonGatePending}, true,
			corev1.ConditionFalse, ReasonExpired, "Volume b holds a certificate that has expired or is about to"},
		"gate pending over not issued": {map[string]Validity{"a": ReasonNotIssued, "b": ReasonGatePending}, true,
			corev1.ConditionFalse, ReasonGatePending, "Volume b has no certificate yet: the driver's readiness gate says not yet"},
		"failing over gate pending": {map[string]Validity{"a": ReasonFailing, "b": ReasonGatePending}, true,
			corev1.ConditionFalse, ReasonFailing, "Volume a has no certificate: issuing it fails"},
		"a tie names the first by ID": {map[string]Validity{"b": ReasonExpired, "a": ReasonExpired}, true,
			corev1.ConditionFalse, ReasonExpired, "Volume a holds a certificate that has expired or is about to"},
		"unknown holds back": {map[string]Validity{"a": ReasonExpired, "b": ValidityUnknown}, false, "", "", ""},
	} {
		c, ok := desired(condType, tc.volumes)
		if ok != tc.ok {
			t.Errorf("%s: ok %v, want %v", name, ok, tc.ok)
			continue
		}
		if !ok {
			continue
		}
		if c.Type != condType || c.Status != tc.status || c.Reason != tc.reason || c.Message != tc.message {
			t.Errorf("%s: %s %s %s %q, want %s %s %s %q", name, c.Type, c.Status, c.Reason, c.Message,
				condType, tc.status, tc.reason, tc.message)
		}
	}
}
