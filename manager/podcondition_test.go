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
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cert-manager/csi-lib/internal/api"
	"github.com/cert-manager/csi-lib/internal/api/util"
	"github.com/cert-manager/csi-lib/internal/podcondition"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/test/testkit"
)

const condType = corev1.PodConditionType("csi.example.com/certificate-ready")

// condEnv is a manager keeping the pod condition, with a fake core clientset holding the pods
// of the given volumes (pod-<id> in "ns", UID uid-<id>, as register names them).
func condEnv(t *testing.T, podsOf ...string) (*env, *kubefake.Clientset) {
	var objs []k8sruntime.Object
	for _, id := range podsOf {
		objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-" + id, Namespace: "ns", UID: types.UID("uid-" + id)}})
	}
	kube := kubefake.NewClientset(objs...)
	e := newEnv(t, func(o *Options) {
		o.PodCondition = &PodCondition{Type: condType, Client: kube.CoreV1()}
	})
	return e, kube
}

// podCondition reads the pod's condition from the fake's tracker (not counted as a call).
func podCondition(t *testing.T, kube *kubefake.Clientset, pod string) *corev1.PodCondition {
	t.Helper()
	obj, err := kube.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), "ns", pod)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range obj.(*corev1.Pod).Status.Conditions {
		if c.Type == condType {
			return &c
		}
	}
	return nil
}

// podCalls counts the pod reads and status patches the manager made, of every pod but those
// named in except.
func podCalls(kube *kubefake.Clientset, except ...string) (gets, patches int) {
	return countPodCalls(kube, func(pod string) bool { return !slices.Contains(except, pod) })
}

// podCallsOf counts the manager's reads and status patches of the named pod.
func podCallsOf(kube *kubefake.Clientset, pod string) (gets, patches int) {
	return countPodCalls(kube, func(name string) bool { return name == pod })
}

// countPodCalls counts the pod reads and status patches of the pods that counted accepts.
func countPodCalls(kube *kubefake.Clientset, counted func(pod string) bool) (gets, patches int) {
	for _, a := range kube.Actions() {
		if a.GetResource().Resource != "pods" || !counted(podName(a)) {
			continue
		}
		switch a.GetVerb() {
		case "get":
			gets++
		case "patch":
			if a.GetSubresource() == "status" {
				patches++
			}
		}
	}
	return gets, patches
}

// podName is the name of the pod a call is made on ("" for a call on no single pod).
func podName(a k8stesting.Action) string {
	if named, ok := a.(interface{ GetName() string }); ok {
		return named.GetName()
	}
	return ""
}

// barrierVolumes are the volumes settleWriter publishes; condEnv must be given them for their
// pods (pod-<id>) to exist, and barrierPods are those pods' names.
var (
	barrierVolumes = []string{"barrier1", "barrier2"}
	barrierPods    = []string{"pod-barrier1", "pod-barrier2"}
)

// settleWriter returns once the pod-condition writer has ended every sync of a pod queued
// before the call, letting no time pass, so that a test can then assert what the writer did not
// do without sleeping. It publishes the barrierVolumes one after the other, each of a pod of its
// own whose first certificate calls for a patch, and waits (bounded) for each patch before it
// publishes the next; a test calls it once.
//
// The writer syncs pods on one goroutine, taking each off its queue in the order it was queued
// and marking it done before it takes the next. When the first barrier's patch is seen, every
// sync of a pod that was in the queue, or in flight, when the first barrier was queued has
// ended. A pod queued again while its sync was in flight goes back on the queue only as that
// sync ends, possibly behind the first barrier, but before the writer took the first barrier:
// the second barrier, queued once the first's patch is seen, is behind it, and its patch is
// seen once that sync has ended too. A retry after a failed call waits for the queue's backoff
// on the fake clock, which this does not move.
func settleWriter(t *testing.T, e *env, m *Manager, kube *kubefake.Clientset) {
	t.Helper()
	for i, id := range barrierVolumes {
		e.register(id, false)
		publishAndIssue(t, e, m, id)
		waitCondition(t, e, kube, barrierPods[i], corev1.ConditionTrue, PodConditionReasonValid)
		if gets, patches := podCallsOf(kube, barrierPods[i]); gets != 0 || patches != 1 {
			t.Fatalf("barrier %s: %d gets and %d patches, want 0 and 1", barrierPods[i], gets, patches)
		}
	}
}

// publishAndIssue makes a publish's attempt for the volume and signs its request.
func publishAndIssue(t *testing.T, e *env, m *Manager, id string) {
	t.Helper()
	_, done := publishAttempt(t, m, id)
	e.issuePending()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// waitCondition waits (bounded) until the pod carries the condition with status and reason.
func waitCondition(t *testing.T, e *env, kube *kubefake.Clientset, pod string, status corev1.ConditionStatus, reason string) *corev1.PodCondition {
	t.Helper()
	var c *corev1.PodCondition
	e.poll("pod condition "+string(status)+"/"+reason, func() bool {
		c = podCondition(t, kube, pod)
		return c != nil && c.Status == status && c.Reason == reason
	})
	return c
}

// waitIssuedAndWaiting waits (bounded) until the volume's loop, after a certificate valid from
// start for 1 h, is blocked on its wait until the certificate is due (40 min), with the
// certificate's timers armed first: overdue (45 min), the expiry margin's (59:58) and expiry
// (1 h). The fake clock then holds five timers, the pod-condition queue's ticker being the fifth.
// Before that the clock must not move: a loop that read it before the move would arm its timer,
// or the certificate's, after it, and wait from the moved clock.
func waitIssuedAndWaiting(e *env) {
	e.t.Helper()
	e.expectLoopWait(40*time.Minute, 5, certificateDeadlines...)
}

// certificateDeadlines are the timers of a certificate valid for 1 h from the clock's now, with
// the pod condition kept: overdue, the expiry margin's and expiry.
var certificateDeadlines = []time.Duration{45 * time.Minute, time.Hour - DefaultPodConditionExpiryMargin, time.Hour}

// TestPodConditionLifecycle: a pod's first certificate makes its condition True in one write
// (nothing is written while it is only waiting for it); a failing renewal of a valid certificate
// writes nothing; expiry makes it False naming the volume; the next issuance makes it True.
func TestPodConditionLifecycle(t *testing.T) {
	e, kube := condEnv(t, append([]string{"v1"}, barrierVolumes...)...)
	// Only v1's key generation breaks, so that settleWriter's volumes are issued meanwhile.
	var failKeygen atomic.Bool
	keygen := e.opts.GeneratePrivateKey
	e.opts.GeneratePrivateKey = func(meta metadata.Metadata) (crypto.PrivateKey, error) {
		if meta.VolumeID == "v1" && failKeygen.Load() {
			return nil, errors.New("keygen broken")
		}
		return keygen(meta)
	}
	e.register("v1", false)
	m := e.start()
	_, done := publishAttempt(t, m, "v1")
	e.waitForPending()
	if _, patches := podCalls(kube); patches != 0 {
		t.Fatalf("%d patches before the certificate", patches)
	}
	if c := podCondition(t, kube, "pod-v1"); c != nil {
		t.Fatalf("condition written before the certificate: %+v", c)
	}
	e.issuePending()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	c := waitCondition(t, e, kube, "pod-v1", corev1.ConditionTrue, PodConditionReasonValid)
	if !c.LastTransitionTime.Time.Equal(start) {
		t.Errorf("lastTransitionTime %v, want the clock's %v", c.LastTransitionTime, start)
	}
	if gets, patches := podCalls(kube); gets != 0 || patches != 1 {
		t.Fatalf("%d gets and %d patches for one issuance, want 0 and 1", gets, patches)
	}
	waitIssuedAndWaiting(e)

	// Renewal fails from its due time (40 min) on: the certificate is still valid, so the
	// condition stays True and nothing is written. Each time the clock passes the loop's wait,
	// the test waits for the attempt that starts to fail and for the loop to block on its next
	// backoff step (four timers: the loop's, the expiry margin's, the expiry's and the queue's;
	// the overdue one has fired) before the clock moves again: a move while the attempt is in
	// flight would pass its 60 s deadline, and one before the loop arms its next step would not
	// count towards it.
	loopBackingOff := func(what string, failures float64) {
		t.Helper()
		e.poll(what, func() bool { return e.counter(issueErrors, "v1") == failures && e.clock.Waiters() == 4 })
	}
	failKeygen.Store(true)
	e.clock.SetTime(start.Add(50 * time.Minute))
	loopBackingOff("a failed renewal, and the loop's 30 s backoff", 1)
	if _, patches := podCalls(kube); patches != 1 {
		t.Fatalf("a failing renewal of a valid certificate wrote the condition (%d patches)", patches)
	}

	// Expiry (1 h) less the margin (2 s): False, naming the volume; not a millisecond before.
	// The failed renewal a millisecond before shows the volume, as still valid: once the writer
	// has ended every sync queued so far, pod-v1 still carries True, written once.
	invalidAt := start.Add(time.Hour - DefaultPodConditionExpiryMargin)
	e.clock.SetTime(invalidAt.Add(-time.Millisecond))
	loopBackingOff("a second failed renewal, past the 30 s step, and the loop's 1 min backoff", 2)
	settleWriter(t, e, m, kube)
	if c := podCondition(t, kube, "pod-v1"); c == nil || c.Status != corev1.ConditionTrue {
		t.Fatalf("condition a millisecond before the margin: %+v", c)
	}
	if _, patches := podCallsOf(kube, "pod-v1"); patches != 1 {
		t.Fatalf("%d patches of pod-v1 a millisecond before the margin, want 1", patches)
	}
	// The margin's own timer writes the condition: nothing else shows the volume while its loop
	// waits out its backoff step.
	e.clock.SetTime(invalidAt)
	c = waitCondition(t, e, kube, "pod-v1", corev1.ConditionFalse, PodConditionReasonExpired)
	if !c.LastTransitionTime.Time.Equal(invalidAt) {
		t.Errorf("lastTransitionTime %v, want the margin's %v", c.LastTransitionTime, invalidAt)
	}
	if !strings.Contains(c.Message, "v1") {
		t.Errorf("message %q does not name the volume", c.Message)
	}
	// The next issuance: True again. The loop is blocked on its 1 min backoff step (nothing
	// ends it early), which the step passes.
	failKeygen.Store(false)
	e.clock.Step(10 * time.Minute)
	e.issuePending()
	waitCondition(t, e, kube, "pod-v1", corev1.ConditionTrue, PodConditionReasonValid)
	if _, patches := podCallsOf(kube, "pod-v1"); patches != 3 {
		t.Fatalf("%d patches, want 3 (True, expired, True)", patches)
	}
}

// TestPodConditionTwoVolumes: a pod with two volumes is True only once both hold a
// certificate, and False naming the one that expired.
func TestPodConditionTwoVolumes(t *testing.T) {
	e, kube := condEnv(t, "pod")
	for _, id := range []string{"a", "b"} {
		meta := e.register(id, false)
		meta.VolumeContext["csi.storage.k8s.io/pod.name"] = "pod-pod"
		meta.VolumeContext["csi.storage.k8s.io/pod.uid"] = "uid-pod"
		if _, err := e.store.RegisterMetadata(meta); err != nil {
			t.Fatal(err)
		}
	}
	m := e.start()
	_, doneA := publishAttempt(t, m, "a")
	_, doneB := publishAttempt(t, m, "b")
	e.poll("both requests", func() bool { return len(e.requests()) == 2 })
	e.issuePending()
	// One volume has its certificate, the other not yet: nothing written.
	e.poll("one key pair written", func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return len(e.written) == 1
	})
	if c := podCondition(t, kube, "pod-pod"); c != nil {
		t.Fatalf("condition written with one volume of two issued: %+v", c)
	}
	e.issuePending()
	for _, done := range []<-chan error{doneA, doneB} {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	waitCondition(t, e, kube, "pod-pod", corev1.ConditionTrue, PodConditionReasonValid)

	// At the renewal time both create a request; only b's is signed, and a's certificate
	// expires. The clock moves once both loops wait with their certificates' timers (each its
	// wait and three, and the queue's ticker), whose reports are then forgotten.
	e.poll("both loops to wait until due", func() bool { return e.clock.Waiters() == 9 })
	e.drainTimers()
	e.clock.SetTime(start.Add(40 * time.Minute))
	e.poll("both renewal requests", func() bool {
		pending := 0
		for _, r := range e.requests() {
			if !testkit.IsFinished(&r) {
				pending++
			}
		}
		return pending == 2
	})
	for _, r := range e.requests() {
		if r.Labels[api.VolumeIDHashLabelKey] == util.HashIdentifier("b") && !testkit.IsFinished(&r) {
			if _, err := testkit.Issue(context.Background(), e.client, e.ca, &r, e.clock.Now()); err != nil {
				t.Fatal(err)
			}
		}
	}
	// b's renewal is shown once its loop has armed the timers of its new certificate (valid for
	// 1 h from now) and waits until it is due. a's attempt waits on its request meanwhile, under
	// its deadline, with its certificate's three timers.
	e.expectLoopWait(40*time.Minute, 9, certificateDeadlines...)
	e.clock.SetTime(start.Add(time.Hour))
	c := waitCondition(t, e, kube, "pod-pod", corev1.ConditionFalse, PodConditionReasonExpired)
	if !strings.Contains(c.Message, "Volume a ") {
		t.Errorf("message %q does not name volume a", c.Message)
	}
}

// TestPodConditionRetriesOnConflict: a refused patch is retried after the queue's backoff on the
// injected clock.
func TestPodConditionRetriesOnConflict(t *testing.T) {
	e, kube := condEnv(t, "v1")
	var refused atomic.Int32
	kube.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
		if refused.Add(1) == 1 {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, "pod-v1", nil)
		}
		return false, nil, nil
	})
	e.register("v1", false)
	m := e.start()
	publishAndIssue(t, e, m, "v1")
	e.poll("the refused patch", func() bool { return refused.Load() == 1 })
	if c := podCondition(t, kube, "pod-v1"); c != nil {
		t.Fatalf("condition present after a refused patch: %+v", c)
	}
	// The retry waits the queue's first backoff step, 100 ms, on the injected clock: its timer
	// is made there. Step the clock (again, in case a step comes before the timer is
	// registered) until the retry lands.
	e.awaitTimer(100 * time.Millisecond)
	e.poll("the retry", func() bool {
		e.clock.Step(100 * time.Millisecond)
		c := podCondition(t, kube, "pod-v1")
		return c != nil && c.Status == corev1.ConditionTrue
	})
	if refused.Load() != 2 {
		t.Fatalf("%d patches, want the refused one and its retry", refused.Load())
	}
	if e.clock.Now().Sub(start) >= 40*time.Minute {
		t.Fatal("the retry took as long as a renewal")
	}
}

// TestPodConditionSurvivesRestart: a restarted manager reads each pod once and writes nothing
// when the pod already carries the condition its volumes call for.
func TestPodConditionSurvivesRestart(t *testing.T) {
	e, kube := condEnv(t, append([]string{"v1"}, barrierVolumes...)...)
	e.register("v1", false)
	a := e.start()
	publishAndIssue(t, e, a, "v1")
	waitCondition(t, e, kube, "pod-v1", corev1.ConditionTrue, PodConditionReasonValid)
	a.Stop()
	meta, err := e.store.ReadMetadata("v1")
	if err != nil {
		t.Fatal(err)
	}
	meta.Mounted = true
	if err := e.store.WriteMetadata("v1", meta); err != nil {
		t.Fatal(err)
	}
	kube.ClearActions()

	e.drainTimers()
	b := e.start()
	e.poll("the restarted manager's read of the pod", func() bool { gets, _ := podCallsOf(kube, "pod-v1"); return gets >= 1 })
	// The restarted loop waits for the renewal, 40 minutes on, with the certificate's timers
	// armed (as waitIssuedAndWaiting has it, with one more timer on the clock: the first
	// manager's queue ticker, which the fake clock keeps, as a fake ticker's Stop does nothing).
	// Nothing shows the volume again until the clock moves, and the clock does not move: once
	// the writer has ended every sync of the pods queued so far, nothing else is done for pod-v1.
	e.expectLoopWait(40*time.Minute, 6, certificateDeadlines...)
	settleWriter(t, e, b, kube)
	if gets, patches := podCallsOf(kube, "pod-v1"); gets != 1 || patches != 0 {
		t.Fatalf("restart: %d gets and %d patches of pod-v1, want 1 and 0", gets, patches)
	}
	if gets, patches := podCalls(kube, barrierPods...); gets != 1 || patches != 0 {
		t.Fatalf("restart: %d gets and %d patches, want 1 and 0", gets, patches)
	}
}

// TestPodConditionNothingWithoutPodOrAfterUnpublish: a volume without pod information is never
// written, and a pod whose volume is unmanaged before its certificate is forgotten.
func TestPodConditionNothingWithoutPodOrAfterUnpublish(t *testing.T) {
	e, kube := condEnv(t, append([]string{"v1"}, barrierVolumes...)...)
	meta := e.register("anon", false)
	delete(meta.VolumeContext, "csi.storage.k8s.io/pod.namespace")
	if err := e.store.WriteMetadata("anon", meta); err != nil {
		t.Fatal(err)
	}
	e.register("v1", false)
	m := e.start()
	publishAndIssue(t, e, m, "anon")
	e.gateOpen.Store(false)
	if _, err := m.ManageVolumeImmediate(context.Background(), "v1"); err == nil {
		t.Fatal("the closed gate did not refuse")
	}
	m.UnmanageVolume("v1")
	// Each publish shows its outcome (anon's certificate, v1's refusal) before it returns, and
	// UnmanageVolume removes v1 before it returns; until the clock moves, which it does not,
	// anon's loop shows it again with the same certificate if at all. Once the writer has ended
	// every sync of the pods queued so far, nothing else is done for either.
	e.gateOpen.Store(true) // for the barriers' volumes
	settleWriter(t, e, m, kube)
	if gets, patches := podCallsOf(kube, "pod-v1"); gets+patches != 0 {
		t.Fatalf("%d gets and %d patches of a pod unpublished while pending", gets, patches)
	}
	if gets, patches := podCalls(kube, barrierPods...); gets+patches != 0 {
		t.Fatalf("%d gets and %d patches for a volume without pod information and a pod unpublished while pending", gets, patches)
	}
}

func TestPodConditionOptionIsValidated(t *testing.T) {
	kube := kubefake.NewClientset()
	for name, pc := range map[string]*PodCondition{
		"no type":          {Client: kube.CoreV1()},
		"not a name":       {Type: "not a name!", Client: kube.CoreV1()},
		"no client":        {Type: condType},
		"too many slashes": {Type: "a/b/c", Client: kube.CoreV1()},
		"negative margin":  {Type: condType, Client: kube.CoreV1(), ExpiryMargin: -time.Second},
	} {
		e := newEnv(t, func(o *Options) { o.PodCondition = pc })
		if _, err := NewManager(e.opts); err == nil || err.Error() != "PodCondition must have a Type that is a qualified name, a Client and an ExpiryMargin not below zero" {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestPodConditionStopLeavesNoGoroutines: Stop ends the condition's writer and its queue.
func TestPodConditionStopLeavesNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	e, kube := condEnv(t, "v1")
	e.register("v1", false)
	m := e.start()
	publishAndIssue(t, e, m, "v1")
	waitCondition(t, e, kube, "pod-v1", corev1.ConditionTrue, PodConditionReasonValid)
	m.Stop()
	e.poll("the goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
}

// TestNoPodConditionWithoutTheOption: without PodCondition the manager keeps no pod state, no
// queue and no timer for it, and issuance is unchanged.
func TestNoPodConditionWithoutTheOption(t *testing.T) {
	e := newEnv(t, nil)
	e.register("v1", false)
	m := e.start()
	publishAndIssue(t, e, m, "v1")
	// The loop arms no timer for the certificate's deadlines before it waits until due, and
	// that wait is the only timer on the clock: no condition queue's ticker either.
	e.expectLoopWait(40*time.Minute, 1)
}

// TestPodConditionDropsAGonePod: a pod deleted before its condition is written is given up on
// the patch's NotFound: its volume makes no attempt any more, and the pod is not written again
// when its volume's state is shown again. (That the writer does not retry it, and forgets it
// with its volume, internal/podcondition's TestGonePodIsDropped checks.)
func TestPodConditionDropsAGonePod(t *testing.T) {
	e, kube := condEnv(t, append([]string{"v1"}, barrierVolumes...)...)
	e.opts.Metrics.EnableVolumeStateGauge()
	if err := kube.CoreV1().Pods("ns").Delete(context.Background(), "pod-v1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.register("v1", false)
	m := e.start()
	publishAndIssue(t, e, m, "v1")
	// The writer tells the manager the pod is gone (PodTerminating) while it handles the pod, and
	// marks it gone before it takes the pod off its queue: a change shown from then on queues
	// the pod again only after that, and finds it gone.
	e.waitLogged("Pod is terminating: ending its volumes' issuance", 1)
	// A gone pod's volume makes no further attempt (nothing is created for it): its renewal
	// point passes without one. Its state is shown again when its certificate expires, and
	// nothing is written.
	waitIssuedAndWaiting(e)
	calls := e.counter(issueCalls, "v1")
	e.clock.SetTime(start.Add(time.Hour))
	e.poll("the certificate shown expired", func() bool { return e.states()["expired"] == 1 })
	if got := e.counter(issueCalls, "v1"); got != calls {
		t.Fatalf("%v attempts for a gone pod's volume, want none", got-calls)
	}
	settleWriter(t, e, m, kube)
	if _, patches := podCalls(kube, barrierPods...); patches != 1 {
		t.Fatalf("%d patches for a gone pod, want the one that found it gone", patches)
	}
}

// TestPodConditionReasonsAreTheWritersOwn: the exported reasons, written out as strings so that
// the documentation shows them, are the ones the condition's writer puts on pods.
func TestPodConditionReasonsAreTheWritersOwn(t *testing.T) {
	for exported, written := range map[string]string{
		PodConditionReasonValid:       podcondition.ReasonValid,
		PodConditionReasonNotIssued:   podcondition.ReasonNotIssued,
		PodConditionReasonGatePending: podcondition.ReasonGatePending,
		PodConditionReasonFailing:     podcondition.ReasonFailing,
		PodConditionReasonExpired:     podcondition.ReasonExpired,
	} {
		if exported != written {
			t.Errorf("manager's reason %q, the writer's %q", exported, written)
		}
	}
}

// TestPodConditionFollowsAVolumeToAnotherPod: a volume whose metadata comes to name another pod
// is taken off its first pod's condition: the first pod, left with a volume that holds a valid
// certificate, becomes True.
func TestPodConditionFollowsAVolumeToAnotherPod(t *testing.T) {
	e, kube := condEnv(t, append([]string{"a", "b"}, barrierVolumes...)...)
	metas := map[string]metadata.Metadata{}
	for _, id := range []string{"v1", "v2"} {
		meta := e.register(id, false)
		meta.VolumeContext["csi.storage.k8s.io/pod.name"] = "pod-a"
		meta.VolumeContext["csi.storage.k8s.io/pod.uid"] = "uid-a"
		if err := e.store.WriteMetadata(id, meta); err != nil {
			t.Fatal(err)
		}
		metas[id] = meta
	}
	// v1's gate stays closed: it has no certificate, so pod-a is not True while it counts.
	e.opts.ReadyToRequest = func(meta metadata.Metadata) (bool, string) {
		return meta.VolumeID != "v1", "pod has no IP yet"
	}
	m := e.start()
	if err := m.ManageVolumeForPublish(context.Background(), metas["v1"], true); err != nil {
		t.Fatal(err)
	}
	publishAndIssue(t, e, m, "v2")
	settleWriter(t, e, m, kube)
	if c := podCondition(t, kube, "pod-a"); c != nil && c.Status == corev1.ConditionTrue {
		t.Fatalf("pod-a's condition is True while v1 has no certificate: %+v", c)
	}

	moved := metas["v1"]
	moved.VolumeContext = map[string]string{
		"csi.storage.k8s.io/pod.name":      "pod-b",
		"csi.storage.k8s.io/pod.namespace": "ns",
		"csi.storage.k8s.io/pod.uid":       "uid-b",
	}
	if err := e.store.WriteMetadata("v1", moved); err != nil {
		t.Fatal(err)
	}
	m.Requeue("v1") // its next turn reads the metadata naming pod-b
	waitCondition(t, e, kube, "pod-a", corev1.ConditionTrue, PodConditionReasonValid)
}
