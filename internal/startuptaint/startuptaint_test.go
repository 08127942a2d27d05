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

package startuptaint

import (
	"context"
	"encoding/json"
	"errors"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"

	"github.com/cert-manager/csi-lib/test/testkit"
)

const (
	driverName = "csi.example.com"
	key        = driverName + Suffix
	window     = 10 * time.Minute
)

var (
	nodesGVR    = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	csiNodesGVR = schema.GroupVersionResource{Group: "storage.k8s.io", Version: "v1", Resource: "csinodes"}
	backoff     = wait.Backoff{Duration: time.Second, Factor: 2, Cap: 8 * time.Second, Steps: 100}
	startup     = corev1.Taint{Key: key, Effect: corev1.TaintEffectNoSchedule}
	keep        = corev1.Taint{Key: "example.org/keep", Value: "v", Effect: corev1.TaintEffectNoExecute}
)

func node(name string, taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{Taints: taints}}
}

func csiNode(name string, drivers ...string) *storagev1.CSINode {
	cn := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, d := range drivers {
		cn.Spec.Drivers = append(cn.Spec.Drivers, storagev1.CSINodeDriver{Name: d, NodeID: name})
	}
	return cn
}

type env struct {
	t       *testing.T
	client  *fake.Clientset
	clk     *testkit.RecordingClock
	removed atomic.Int64
	done    chan struct{}
	cancel  context.CancelFunc
	// progress holds a token once something a wait looks at may have changed: a call on the
	// client answered, a watch opened or stopped, an event taken by the remover, a timer
	// registered on the clock, a removal counted. A wait takes the token and looks again.
	progress chan struct{}

	mu        sync.Mutex
	open      map[string]int // the remover's watches not yet stopped, by resource
	delivered []watch.Event  // the events the remover has taken from its watches, in order
	barriers  int            // the harmless CSINode changes made so far
}

// newEnv returns a fake clientset holding objs whose answers, watches and events are reported
// on the env's progress channel, and a fake clock. Its reactors are the first prepended, so a
// test's own reactors run before them.
func newEnv(t *testing.T, objs ...runtime.Object) *env {
	t.Helper()
	e := &env{t: t, client: fake.NewClientset(objs...), clk: testkit.NewRecordingClock(time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)),
		done: make(chan struct{}), progress: make(chan struct{}, 1), open: map[string]int{}}
	tracker := e.client.Tracker()
	answer := k8stesting.ObjectReaction(tracker)
	e.client.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		handled, obj, err := answer(a)
		e.notify()
		return handled, obj, err
	})
	e.client.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if wa, ok := a.(k8stesting.WatchActionImpl); ok {
			opts = wa.ListOptions
		}
		w, err := tracker.Watch(a.GetResource(), a.GetNamespace(), opts)
		if err != nil {
			return true, nil, err
		}
		return true, e.relay(a.GetResource().Resource, w), nil
	})
	return e
}

// notify leaves a token on progress unless one is there already.
func (e *env) notify() {
	select {
	case e.progress <- struct{}{}:
	default:
	}
}

// relayedWatch hands the events of a tracker's watch to the remover through an unbuffered
// channel: once an event is handed over the remover has taken it, and as it reads its watch in
// one loop, it has finished with every event before it.
type relayedWatch struct {
	e        *env
	resource string
	inner    watch.Interface
	out      chan watch.Event
	stop     chan struct{}
	once     sync.Once
}

// relay returns inner relayed, counted open until the remover stops it.
func (e *env) relay(resource string, inner watch.Interface) watch.Interface {
	w := &relayedWatch{e: e, resource: resource, inner: inner, out: make(chan watch.Event), stop: make(chan struct{})}
	e.mu.Lock()
	e.open[resource]++
	e.mu.Unlock()
	go func() {
		defer close(w.out)
		for ev := range inner.ResultChan() {
			select {
			case w.out <- ev:
				e.mu.Lock()
				e.delivered = append(e.delivered, ev)
				e.mu.Unlock()
				e.notify()
			case <-w.stop:
				return
			}
		}
	}()
	e.notify()
	return w
}

func (w *relayedWatch) ResultChan() <-chan watch.Event { return w.out }

func (w *relayedWatch) Stop() {
	w.once.Do(func() {
		close(w.stop)
		w.inner.Stop()
		w.e.mu.Lock()
		w.e.open[w.resource]--
		w.e.mu.Unlock()
		w.e.notify()
	})
}

// signalClock is the remover's clock: the env's fake clock, which reports each timer on the
// env's progress channel once the timer is registered.
type signalClock struct {
	*testkit.RecordingClock
	e *env
}

func (c signalClock) NewTimer(d time.Duration) clock.Timer {
	t := c.RecordingClock.NewTimer(d)
	c.e.notify()
	return t
}

// start runs a Remover for node-1 until the test ends.
func (e *env) start() {
	e.t.Helper()
	r, err := New(Config{
		DriverName: driverName, NodeName: "node-1",
		Nodes: e.client.CoreV1().Nodes(), CSINodes: e.client.StorageV1().CSINodes(),
		Window: window, Backoff: backoff, Clock: signalClock{e.clk, e}, Log: testr.New(e.t),
		Removed: func(n int) {
			e.removed.Add(int64(n))
			e.notify()
		},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	go func() {
		defer close(e.done)
		r.Run(ctx)
	}()
	e.t.Cleanup(func() {
		cancel()
		<-e.done
	})
}

// eventually waits until cond holds, looking again at each token on progress, and fails the
// test if it does not hold within 10 s.
func (e *env) eventually(what string, cond func() bool) {
	e.t.Helper()
	limit := time.NewTimer(10 * time.Second)
	defer limit.Stop()
	for !cond() {
		select {
		case <-e.progress:
		case <-limit.C:
			e.t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// counted waits until Removed has counted n taints (it is called once the patch has answered,
// after the node changed).
func (e *env) counted(n int64) {
	e.t.Helper()
	e.eventually("the removals counted", func() bool { return e.removed.Load() >= n })
	if got := e.removed.Load(); got != n {
		e.t.Errorf("Removed counted %d taints, want %d", got, n)
	}
}

// caughtUpOnCSINode makes a harmless change to node-1's CSINode (an annotation) and waits until
// the remover has taken its event from its watch: by then it has finished with every change to
// the CSINode made before.
func (e *env) caughtUpOnCSINode() {
	e.t.Helper()
	obj, err := e.client.Tracker().Get(csiNodesGVR, "", "node-1")
	if err != nil {
		e.t.Fatal(err)
	}
	cn := obj.(*storagev1.CSINode)
	e.barriers++
	mark := strconv.Itoa(e.barriers)
	metav1.SetMetaDataAnnotation(&cn.ObjectMeta, "example.org/barrier", mark)
	e.updateCSINode(cn)
	e.eventually("the remover to take the harmless change of the CSINode", func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return slices.ContainsFunc(e.delivered, func(ev watch.Event) bool {
			cn, ok := ev.Object.(*storagev1.CSINode)
			return ok && cn.Annotations["example.org/barrier"] == mark
		})
	})
}

// count returns the number of actions of verb on resource so far.
func (e *env) count(verb, resource string) int {
	n := 0
	for _, a := range e.client.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == resource {
			n++
		}
	}
	return n
}

// waitWatches waits until the remover has opened n watches on resource: the fake holds the lock
// that Actions takes while its watch reactor registers the watcher, so a watch counted is one
// that receives the changes made after.
func (e *env) waitWatches(resource string, n int) {
	e.t.Helper()
	e.eventually(resource+" watch", func() bool { return e.count("watch", resource) >= n })
}

func (e *env) node(name string) *corev1.Node {
	e.t.Helper()
	n, err := e.client.Tracker().Get(nodesGVR, "", name)
	if err != nil {
		e.t.Fatal(err)
	}
	return n.(*corev1.Node)
}

func (e *env) taints(name string) []corev1.Taint { return e.node(name).Spec.Taints }

// setTaints changes a node's taints as another writer does.
func (e *env) setTaints(name string, taints ...corev1.Taint) {
	e.t.Helper()
	n := e.node(name)
	n.Spec.Taints = taints
	if err := e.client.Tracker().Update(nodesGVR, n, ""); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) updateCSINode(cn *storagev1.CSINode) {
	e.t.Helper()
	if err := e.client.Tracker().Update(csiNodesGVR, cn, ""); err != nil {
		e.t.Fatal(err)
	}
}

// finished waits for Run to return, then checks that the remover left nothing that could act
// after it: no watch it opened is still open, and no goroutine runs the Remover's code.
func (e *env) finished() {
	e.t.Helper()
	select {
	case <-e.done:
	case <-time.After(10 * time.Second):
		e.t.Fatal("Run did not return")
	}
	e.mu.Lock()
	for resource, n := range e.open {
		if n != 0 {
			e.t.Errorf("%d watches of %s still open after Run returned", n, resource)
		}
	}
	e.mu.Unlock()
	// The component's RBAC grants get, watch and patch: the remover never lists.
	if n := e.count("list", "nodes") + e.count("list", "csinodes"); n != 0 {
		e.t.Errorf("%d lists of nodes or CSINodes; the RBAC grants no list", n)
	}
	stacks := make([]byte, 1<<16)
	for {
		n := goruntime.Stack(stacks, true)
		if n < len(stacks) {
			stacks = stacks[:n]
			break
		}
		stacks = make([]byte, 2*len(stacks))
	}
	for _, g := range strings.Split(string(stacks), "\n\n") {
		if strings.Contains(g, "startuptaint.(*Remover)") {
			e.t.Errorf("a goroutine runs the remover's code after Run returned:\n%s", g)
		}
	}
}

// stepWhenWaiting waits until a timer is registered on the clock, then moves the clock by d.
func (e *env) stepWhenWaiting(d time.Duration) {
	e.t.Helper()
	e.eventually("a timer", e.clk.HasWaiters)
	e.clk.Step(d)
}

func sameTaints(got []corev1.Taint, want ...corev1.Taint) bool {
	return slices.EqualFunc(got, want, func(a, b corev1.Taint) bool { return a.MatchTaint(&b) && a.Value == b.Value })
}

func TestKey(t *testing.T) {
	if k, err := Key("csi.cert-manager.io"); err != nil || k != "csi.cert-manager.io/agent-not-ready" {
		t.Errorf("Key(csi.cert-manager.io) = %q, %v", k, err)
	}
	for _, bad := range []string{"", "Csi_Driver", "csi driver", "a/b", strings.Repeat("a", 254)} {
		if _, err := Key(bad); err == nil {
			t.Errorf("Key(%q) accepted", bad)
		}
		_, err := New(Config{DriverName: bad, NodeName: "n", Nodes: fake.NewClientset().CoreV1().Nodes(), CSINodes: fake.NewClientset().StorageV1().CSINodes(), Window: time.Minute, Backoff: backoff, Clock: testkit.NewRecordingClock(time.Now())})
		if err == nil || !strings.Contains(err.Error(), "valid taint key") {
			t.Errorf("New with driver name %q: %v, want an invalid taint key error", bad, err)
		}
	}
	if _, err := New(Config{DriverName: driverName}); err == nil || !strings.Contains(err.Error(), "node name is empty") {
		t.Errorf("New without a node or clients: %v", err)
	}
}

// TestRemovesOnlyOnceCSINodeListsTheDriver: nothing reads or writes the node until the CSINode
// lists the driver; then every startup taint of the node goes, whatever its effect and value,
// in one patch that tests the taint list first, and the other taints and the other node stay.
func TestRemovesOnlyOnceCSINodeListsTheDriver(t *testing.T) {
	late := corev1.Taint{Key: key, Value: "late", Effect: corev1.TaintEffectNoExecute}
	e := newEnv(t,
		node("node-1", startup, keep, late),
		node("node-2", startup),
		csiNode("node-1", "other.csi.example.org"),
	)
	e.start()
	e.waitWatches("csinodes", 1)
	// Another driver registers: still not this one.
	e.updateCSINode(csiNode("node-1", "other.csi.example.org", "third.example.org"))
	e.caughtUpOnCSINode()
	if n := e.count("get", "nodes") + e.count("patch", "nodes") + e.count("watch", "nodes"); n != 0 {
		t.Fatalf("%d calls on nodes before the CSINode lists the driver", n)
	}
	if !sameTaints(e.taints("node-1"), startup, keep, late) {
		t.Fatalf("node-1's taints changed before registration: %v", e.taints("node-1"))
	}

	e.updateCSINode(csiNode("node-1", "other.csi.example.org", driverName))
	e.eventually("node-1's startup taints removed", func() bool { return sameTaints(e.taints("node-1"), keep) })
	e.counted(2)
	if !sameTaints(e.taints("node-2"), startup) {
		t.Errorf("node-2's taints changed: %v", e.taints("node-2"))
	}
	var patches []k8stesting.PatchAction
	for _, a := range e.client.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok {
			patches = append(patches, p)
		}
	}
	if len(patches) != 1 || patches[0].GetName() != "node-1" {
		t.Fatalf("patches: %v, want one of node-1", patches)
	}
	var ops []struct {
		Op   string          `json:"op"`
		Path string          `json:"path"`
		Val  json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(patches[0].GetPatch(), &ops); err != nil || len(ops) != 2 || ops[0].Op != "test" || ops[0].Path != "/spec/taints" || ops[1].Path != "/spec/taints" {
		t.Errorf("the patch is %s, want a test of /spec/taints then its replacement", patches[0].GetPatch())
	}
}

// TestWaitsForTheCSINodeToBeCreated: a CSINode that does not exist yet is watched for.
func TestWaitsForTheCSINodeToBeCreated(t *testing.T) {
	e := newEnv(t, node("node-1", startup))
	e.start()
	e.waitWatches("csinodes", 1)
	if err := e.client.Tracker().Create(csiNodesGVR, csiNode("node-1", driverName), ""); err != nil {
		t.Fatal(err)
	}
	e.eventually("the startup taint removed", func() bool { return len(e.taints("node-1")) == 0 })
}

// TestLateTaintRemovedWithinTheWindowOnly: a startup taint added after the driver started is
// removed while the window lasts; once it has ended Run has returned and the node is no longer
// watched.
func TestLateTaintRemovedWithinTheWindowOnly(t *testing.T) {
	e := newEnv(t, node("node-1"), node("node-2"), csiNode("node-1", driverName))
	e.start()
	e.waitWatches("nodes", 1)
	if n := e.count("patch", "nodes"); n != 0 {
		t.Fatalf("%d patches of a node without the taint", n)
	}
	e.stepWhenWaiting(window / 2)
	e.setTaints("node-1", keep, startup)
	e.setTaints("node-2", startup) // another node's: not this driver's business
	e.eventually("the late taint removed", func() bool { return sameTaints(e.taints("node-1"), keep) })
	e.waitWatches("nodes", 2)
	e.stepWhenWaiting(window/2 - time.Second)
	e.setTaints("node-1", startup, keep)
	e.eventually("the second late taint removed", func() bool { return sameTaints(e.taints("node-1"), keep) })
	e.counted(2)
	e.waitWatches("nodes", 3)
	e.stepWhenWaiting(time.Second)
	// Run has returned and left no watch open nor any goroutine (finished checks both), so the
	// remover can no longer act: what follows needs no wait.
	e.finished()
	calls := len(e.client.Actions())
	e.setTaints("node-1", startup)
	if len(e.client.Actions()) != calls || !sameTaints(e.taints("node-1"), startup) {
		t.Errorf("a taint added after the window was touched: %v", e.taints("node-1"))
	}
	if !sameTaints(e.taints("node-2"), startup) {
		t.Errorf("node-2's taints changed: %v", e.taints("node-2"))
	}
}

// TestConflictingWriterSurvives: another writer changes the taints between the driver's read
// and its patch; the patch's test fails, the driver reads again at once (no backoff step) and
// removes its taint alone: the other writer's taint stays.
func TestConflictingWriterSurvives(t *testing.T) {
	added := corev1.Taint{Key: "other.example.org/added", Effect: corev1.TaintEffectNoSchedule}
	e := newEnv(t, node("node-1", startup, keep), csiNode("node-1", driverName))
	var once sync.Once
	e.client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		once.Do(func() { e.setTaints("node-1", startup, keep, added) })
		return false, nil, nil // the tracker applies the patch to what is there now
	})
	e.start()
	e.eventually("the startup taint removed", func() bool { return sameTaints(e.taints("node-1"), keep, added) })
	if p := e.count("patch", "nodes"); p != 2 {
		t.Errorf("%d patches, want 2 (the first one's test failed)", p)
	}
	if g := e.count("get", "nodes"); g < 2 {
		t.Errorf("%d reads of the node, want a read again after the failed patch", g)
	}
	e.counted(1)
	for len(e.clk.Timers) > 0 {
		if d := <-e.clk.Timers; d < time.Minute {
			t.Errorf("a %v timer: a conflict waited a backoff step", d)
		}
	}
}

// TestConcurrentRemovalIsNotAnError: another writer removes the startup taint first; the driver's
// patch fails, it reads again and has nothing left to do.
func TestConcurrentRemovalIsNotAnError(t *testing.T) {
	e := newEnv(t, node("node-1", startup, keep), csiNode("node-1", driverName))
	var once sync.Once
	e.client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		once.Do(func() { e.setTaints("node-1", keep) })
		return false, nil, nil
	})
	e.start()
	e.waitWatches("nodes", 1)
	if !sameTaints(e.taints("node-1"), keep) || e.count("patch", "nodes") != 1 || e.removed.Load() != 0 {
		t.Errorf("taints %v, %d patches, %d counted; want the other writer's removal alone", e.taints("node-1"), e.count("patch", "nodes"), e.removed.Load())
	}
}

// TestFailuresBackOff: a CSINode or node that cannot be read and a patch that is refused are
// retried on the backoff, each failure waiting its next step, until they succeed.
func TestFailuresBackOff(t *testing.T) {
	e := newEnv(t, node("node-1", startup, keep), csiNode("node-1", driverName))
	var csiGets, nodeGets, patches atomic.Int32
	e.client.PrependReactor("get", "csinodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if csiGets.Add(1) == 1 {
			return true, nil, apierrors.NewServiceUnavailable("the apiserver is starting")
		}
		return false, nil, nil
	})
	e.client.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if nodeGets.Add(1) <= 2 {
			return true, nil, apierrors.NewForbidden(nodesGVR.GroupResource(), "node-1", errors.New("no RBAC yet"))
		}
		return false, nil, nil
	})
	e.client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if patches.Add(1) <= 2 {
			return true, nil, apierrors.NewForbidden(nodesGVR.GroupResource(), "node-1", errors.New("denied by policy"))
		}
		return false, nil, nil
	})
	e.start()
	// CSINode read: 1 s. Node reads: 1 s, 2 s (the node's own backoff). Patches: 4 s, 8 s.
	for i, want := range []time.Duration{time.Second, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second} {
		if d := e.clk.NextTimer(t, 10*time.Second); d != want {
			t.Fatalf("wait %d is %v, want %v", i+1, d, want)
		}
		if sameTaints(e.taints("node-1"), keep) {
			t.Fatalf("the taint went before wait %d", i+1)
		}
		e.stepWhenWaiting(want)
	}
	e.eventually("the startup taint removed", func() bool { return sameTaints(e.taints("node-1"), keep) })
	if p := patches.Load(); p != 3 {
		t.Errorf("%d patches, want 3", p)
	}
}

// TestPresentTaintOutlivesTheWindow: the window ends only once the node has been seen without
// the taint: a patch refused past the window is still retried, and Run returns once it succeeds.
func TestPresentTaintOutlivesTheWindow(t *testing.T) {
	e := newEnv(t, node("node-1", startup), csiNode("node-1", driverName))
	var refuse atomic.Bool
	refuse.Store(true)
	e.client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if refuse.Load() {
			return true, nil, apierrors.NewForbidden(nodesGVR.GroupResource(), "node-1", errors.New("denied"))
		}
		return false, nil, nil
	})
	e.start()
	var waited time.Duration
	for waited <= window+time.Minute {
		d := e.clk.NextTimer(t, 10*time.Second)
		waited += d
		if waited > window+time.Minute {
			refuse.Store(false) // before the step that lets the next patch go
		}
		e.stepWhenWaiting(d)
	}
	e.eventually("the startup taint removed", func() bool { return len(e.taints("node-1")) == 0 })
	e.finished()
	if e.count("watch", "nodes") != 0 {
		t.Errorf("the node was watched after its window")
	}
}

// TestNoTaintNoPatch: a node without the taint is watched for the window and never patched.
func TestNoTaintNoPatch(t *testing.T) {
	e := newEnv(t, node("node-1", keep), csiNode("node-1", driverName))
	e.start()
	e.waitWatches("nodes", 1)
	e.stepWhenWaiting(window)
	e.finished()
	if n := e.count("patch", "nodes"); n != 0 {
		t.Errorf("%d patches", n)
	}
}
