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

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/cert-manager/csi-lib/driver"
)

// startupTaintKey is the example driver's startup taint.
const startupTaintKey = driverName + driver.StartupTaintSuffix

// otherWriterTaint is a taint of another writer (a node provisioner's own), which the driver
// must leave alone. PreferNoSchedule: it does not keep the story's pod off the node.
var otherWriterTaint = corev1.Taint{Key: "e2e.example.org/provisioner", Value: "keep", Effect: corev1.TaintEffectPreferNoSchedule}

// taintTimeline is what the story's watches saw: when the CSINode first listed the driver and
// when the node first had no startup taint, with the resource versions of those two writes.
type taintTimeline struct {
	mu                   sync.Mutex
	registered, removed  time.Time
	registeredRV, remRV  string
	taintsAfterRemoval   []corev1.Taint
	removedBeforeRegistr bool
}

// watchTaintTimeline watches the node's CSINode and Node from now until stop.
func (c *cluster) watchTaintTimeline(ctx context.Context) (*taintTimeline, func(), error) {
	tl := &taintTimeline{}
	ctx, cancel := context.WithCancel(ctx)
	byName := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", nodeName).String()}
	cnw, err := c.kube.StorageV1().CSINodes().Watch(ctx, byName)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	nw, err := c.kube.CoreV1().Nodes().Watch(ctx, byName)
	if err != nil {
		cnw.Stop()
		cancel()
		return nil, nil, err
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer cnw.Stop()
		for ev := range cnw.ResultChan() {
			cn, ok := ev.Object.(*storagev1.CSINode)
			if !ok || (ev.Type != watch.Added && ev.Type != watch.Modified) {
				continue
			}
			if slices.ContainsFunc(cn.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == driverName }) {
				tl.mu.Lock()
				if tl.registered.IsZero() {
					tl.registered, tl.registeredRV = time.Now(), cn.ResourceVersion
				}
				tl.mu.Unlock()
			}
		}
	}()
	go func() {
		defer wg.Done()
		defer nw.Stop()
		for ev := range nw.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok || (ev.Type != watch.Added && ev.Type != watch.Modified) {
				continue
			}
			if !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == startupTaintKey }) {
				tl.mu.Lock()
				if tl.removed.IsZero() {
					tl.removed, tl.remRV, tl.taintsAfterRemoval = time.Now(), n.ResourceVersion, n.Spec.Taints
					tl.removedBeforeRegistr = tl.registered.IsZero()
				}
				tl.mu.Unlock()
			}
		}
	}()
	return tl, func() { cancel(); wg.Wait() }, nil
}

func (tl *taintTimeline) snapshot() taintTimeline {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return taintTimeline{registered: tl.registered, removed: tl.removed, registeredRV: tl.registeredRV, remRV: tl.remRV,
		taintsAfterRemoval: tl.taintsAfterRemoval, removedBeforeRegistr: tl.removedBeforeRegistr}
}

// setNodeTaints replaces the node's taints as the administrator, with a JSON patch.
func (c *cluster) setNodeTaints(ctx context.Context, taints []corev1.Taint) error {
	body, err := json.Marshal([]map[string]any{{"op": "add", "path": "/spec/taints", "value": taints}})
	if err != nil {
		return err
	}
	_, err = c.kube.CoreV1().Nodes().Patch(ctx, nodeName, types.JSONPatchType, body, metav1.PatchOptions{})
	return err
}

// applyStartupTaintComponent creates the objects of examples/deploy/startup-taint (the driver's
// RBAC for the removal and the admission policy that confines it) and returns their removal.
func (c *cluster) applyStartupTaintComponent(ctx context.Context) (remove func(), err error) {
	objs, err := deployObjects("startup-taint/rbac.yaml", "startup-taint/policy.yaml")
	if err != nil {
		return func() {}, err
	}
	var undo []func()
	remove = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	bg := context.Background()
	for _, obj := range objs {
		if err := createDeployObject(ctx, c.kube, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return remove, err
		}
		switch o := obj.(type) {
		case *rbacv1.ClusterRole:
			undo = append(undo, func() { _ = c.kube.RbacV1().ClusterRoles().Delete(bg, o.Name, metav1.DeleteOptions{}) })
		case *rbacv1.ClusterRoleBinding:
			undo = append(undo, func() { _ = c.kube.RbacV1().ClusterRoleBindings().Delete(bg, o.Name, metav1.DeleteOptions{}) })
		case *admissionv1.ValidatingAdmissionPolicy:
			undo = append(undo, func() {
				_ = c.kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(bg, o.Name, metav1.DeleteOptions{})
			})
		case *admissionv1.ValidatingAdmissionPolicyBinding:
			undo = append(undo, func() {
				_ = c.kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(bg, o.Name, metav1.DeleteOptions{})
			})
		}
	}
	return remove, nil
}

// csiNodeListsDriver reports whether the node's CSINode lists the driver now.
func (c *cluster) csiNodeListsDriver(ctx context.Context) (bool, error) {
	cn, err := c.kube.StorageV1().CSINodes().Get(ctx, nodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(cn.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == driverName }), nil
}

// unschedulableForTaint reports whether the scheduler has said the pod cannot go anywhere
// because of a taint it does not tolerate.
func unschedulableForTaint(pod *corev1.Pod) bool {
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable &&
			strings.Contains(cond.Message, "taint") {
			return true
		}
	}
	return false
}

// removalLogLine is the driver's line for a removal; since_registration is its own measure.
var removalLogLine = regexp.MustCompile(`Removed the node's startup taint.*since_registration"?="?([0-9.]+[a-zµ]+)`)

// driverSinceRegistration returns the since_registration of the driver's first removal line
// after offset in its log.
func driverSinceRegistration(path string, offset int64) (string, bool) {
	f, err := os.Open(path)
	if err != nil {
		return "", false
	}
	defer f.Close()
	if _, err := f.Seek(offset, 0); err != nil {
		return "", false
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if m := removalLogLine.FindStringSubmatch(sc.Text()); m != nil {
			return m[1], true
		}
	}
	return "", false
}

// storyStartupTaint is story 15: the startup taint (docs/deploying.md). The node starts tainted
// with csi.example.com/agent-not-ready, as a provisioner starts a new node (Karpenter's
// startupTaints, a node group's taints), before the driver has started: the taint is set on the
// Node object, because the stories share one node that registered at the run's start, and
// kubelet applies --register-with-taints only when it creates its Node (the scheduler, and the
// driver, see the Node's taints either way). A pod that mounts the driver's volume stays
// Pending: the scheduler does not place it. The driver starts with --remove-startup-taint, as the
// account of examples/deploy with the component startup-taint's RBAC and policy, and registers
// with kubelet; the taint goes only once the CSINode lists the driver (both watched: the order
// of what the watches saw, and of the two writes' resource versions), another writer's taint
// stays, then the pod is scheduled and runs with its certificate. The time from registration
// to removal is printed.
func (c *cluster) storyStartupTaint(ctx context.Context) (r result) {
	r.story = "15 startup taint removed once the driver is registered"
	const pod = "startup-taint"
	fail := func(err error) result {
		r.detail = err.Error()
		return r
	}
	removeComponent, err := c.applyStartupTaintComponent(ctx)
	defer removeComponent()
	if err != nil {
		return fail(err)
	}

	// The node as a provisioner hands it over: the driver not registered, the taint on.
	before, err := c.kube.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return fail(err)
	}
	c.stopDriver(syscall.SIGTERM)
	defer func() {
		// Whatever happened, the other stories get their node untainted and the driver as it was.
		// The pod goes first, while the driver runs: kubelet unpublishes its volume.
		_ = c.deletePod(context.Background(), pod)
		c.stopDriver(syscall.SIGTERM)
		if err := c.setNodeTaints(context.Background(), before.Spec.Taints); err != nil {
			logf("removing the story's taints: %v", err)
		}
		if err := c.startDriver(context.Background(), driverFlags{}); err != nil {
			r.ok, r.detail = false, r.detail+"; restarting the driver: "+err.Error()
		}
	}()
	if err := poll(ctx, "kubelet to deregister the stopped driver", 100*time.Millisecond, time.Minute, func() (bool, error) {
		listed, err := c.csiNodeListsDriver(ctx)
		return !listed, err
	}); err != nil {
		return fail(err)
	}
	if len(before.Spec.Taints) != 0 {
		return fail(fmt.Errorf("the node has taints before the story: %v", before.Spec.Taints))
	}
	if err := c.setNodeTaints(ctx, []corev1.Taint{{Key: startupTaintKey, Effect: corev1.TaintEffectNoSchedule}, otherWriterTaint}); err != nil {
		return fail(err)
	}
	tainted := time.Now()

	// The pod goes through the scheduler (no nodeName), which does not place it.
	p := certPod(pod, time.Hour)
	p.Spec.NodeName = ""
	if _, err := c.kube.CoreV1().Pods(namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return fail(err)
	}
	if err := poll(ctx, "the scheduler to leave the pod Pending for the taint", 100*time.Millisecond, time.Minute, func() (bool, error) {
		got, err := c.kube.CoreV1().Pods(namespace).Get(ctx, pod, metav1.GetOptions{})
		return err == nil && got.Spec.NodeName == "" && unschedulableForTaint(got), err
	}); err != nil {
		return fail(err)
	}
	logf("story 15: the node is tainted %s:NoSchedule; pod %s is Pending (untolerated taint)", startupTaintKey, pod)

	tl, stopWatch, err := c.watchTaintTimeline(ctx)
	if err != nil {
		return fail(err)
	}
	defer stopWatch()
	driverLog := filepath.Join(c.n.dir, "driver.log")
	logStart := fileSize(driverLog)
	started := time.Now()
	if err := c.startDriver(ctx, driverFlags{removeStartupTaint: true}); err != nil {
		return fail(err)
	}
	if err := poll(ctx, "the driver to remove the startup taint", 50*time.Millisecond, 2*time.Minute, func() (bool, error) {
		return !tl.snapshot().removed.IsZero(), nil
	}); err != nil {
		return fail(err)
	}
	seen := tl.snapshot()
	if seen.removedBeforeRegistr || seen.registered.IsZero() || seen.removed.Before(seen.registered) {
		return fail(fmt.Errorf("the taint went (%v) before the CSINode listed the driver (%v)", seen.removed, seen.registered))
	}
	regRV, err1 := strconv.ParseUint(seen.registeredRV, 10, 64)
	remRV, err2 := strconv.ParseUint(seen.remRV, 10, 64)
	if err := errors.Join(err1, err2); err == nil && remRV <= regRV {
		return fail(fmt.Errorf("the node's write without the taint (resource version %d) is not after the CSINode's listing the driver (%d)", remRV, regRV))
	}
	if len(seen.taintsAfterRemoval) != 1 || seen.taintsAfterRemoval[0] != otherWriterTaint {
		return fail(fmt.Errorf("after the removal the node's taints are %v, want the other writer's %v alone", seen.taintsAfterRemoval, otherWriterTaint))
	}
	logf("story 15: kubelet registered the driver %v after its start; the taint went %v after that",
		seen.registered.Sub(started).Round(time.Millisecond), seen.removed.Sub(seen.registered).Round(time.Millisecond))

	_, serials, bad, err := c.waitSerials(ctx, pod, "the pod's checker to see its certificate", 1, 2*time.Minute)
	if err != nil {
		return fail(err)
	}
	if bad != "" || len(serials) == 0 {
		return fail(fmt.Errorf("the pod's checker: %s", bad))
	}
	got, err := c.kube.CoreV1().Pods(namespace).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return fail(err)
	}
	own, _ := driverSinceRegistration(driverLog, logStart)
	r.ok = got.Spec.NodeName == nodeName
	if own == "" {
		own = "not found"
	}
	r.detail = fmt.Sprintf("pod Pending on the tainted node for %v; registration (CSINode lists the driver, resource version %s) to removal (%s): %v as watched, %s by the driver's log (since_registration); the other writer's taint kept; the pod scheduled on %q and its certificate %s good",
		seen.removed.Sub(tainted).Round(100*time.Millisecond), seen.registeredRV, seen.remRV,
		seen.removed.Sub(seen.registered).Round(time.Millisecond), own, got.Spec.NodeName, serials[0])
	return r
}
