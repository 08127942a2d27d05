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
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cert-manager/csi-lib/internal/certs"
)

// readyCondition is the pod condition the driver keeps in story 8 (manager.Options.PodCondition),
// listed in the pods' readiness gates: the type examples/deploy/pod-condition-policy.yaml lets the
// driver change.
const readyCondition = corev1.PodConditionType("csi.example.com/certificate-ready")

// readinessFigures are story 8's measurements.
type readinessFigures struct {
	pods                        int
	writtenToReady              []time.Duration // first certificate written -> pod Ready
	writtenToCondition          []time.Duration // first certificate written -> readyCondition True seen
	conditionToReady            []time.Duration // readyCondition True seen -> pod Ready (kubelet's part)
	runningNotReady             int             // pods seen running and not Ready before their certificate
	expiryToNotReady            []time.Duration // NotAfter -> pod not Ready, during the outage (negative: before)
	rewrittenToReady            []time.Duration // certificate written after the outage -> Ready again
	samples, readyWithoutCert   int             // samples of Ready pods; of those, without a certificate
	readyAfterExpiry            int             // samples of Ready pods whose certificate had expired
	maxReadyAfterExpiry         time.Duration
	readyBeforeFirstCertificate int // pods Ready before their first certificate was written
}

// readyWatch follows the namespace's pods: the latest object of each, when its Ready
// condition changed (as seen here), and whether it was seen running and not Ready.
type readyWatch struct {
	mu              sync.Mutex
	pods            map[string]*corev1.Pod
	changes         map[string][]readyChange
	runningNotReady map[string]bool
	conditionTrue   map[string]time.Time // first time readyCondition was seen True
}

type readyChange struct {
	at    time.Time
	ready bool
}

func isReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// hasCondition reports whether the pod's condition of type typ is True.
func hasCondition(pod *corev1.Pod, typ corev1.PodConditionType) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == typ {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func isRunning(pod *corev1.Pod) bool {
	for _, s := range pod.Status.ContainerStatuses {
		if s.State.Running != nil {
			return true
		}
	}
	return false
}

// watchReadiness starts following; the returned function stops it.
func (c *cluster) watchReadiness(ctx context.Context) (*readyWatch, func(), error) {
	w := &readyWatch{pods: map[string]*corev1.Pod{}, changes: map[string][]readyChange{}, runningNotReady: map[string]bool{}, conditionTrue: map[string]time.Time{}}
	stop, err := c.watchPods(ctx, func(pod *corev1.Pod) {
		now, ready := time.Now(), isReady(pod)
		w.mu.Lock()
		defer w.mu.Unlock()
		w.pods[pod.Name] = pod
		ch := w.changes[pod.Name]
		if len(ch) == 0 && ready || len(ch) > 0 && ch[len(ch)-1].ready != ready {
			w.changes[pod.Name] = append(ch, readyChange{at: now, ready: ready})
		}
		if isRunning(pod) && !ready {
			w.runningNotReady[pod.Name] = true
		}
		if _, seen := w.conditionTrue[pod.Name]; !seen && hasCondition(pod, readyCondition) {
			w.conditionTrue[pod.Name] = now
		}
	})
	return w, stop, err
}

// readySince returns the first time the pod was seen Ready at or after t.
func (w *readyWatch) readySince(pod string, t time.Time) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ch := range w.changes[pod] {
		if ch.ready && !ch.at.Before(t) {
			return ch.at, true
		}
	}
	return time.Time{}, false
}

// notReadySince returns the first time the pod was seen not Ready at or after t.
func (w *readyWatch) notReadySince(pod string, t time.Time) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ch := range w.changes[pod] {
		if !ch.ready && !ch.at.Before(t) {
			return ch.at, true
		}
	}
	return time.Time{}, false
}

func (w *readyWatch) conditionTrueAt(pod string) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.conditionTrue[pod]
	return t, ok
}

func (w *readyWatch) wasRunningNotReady(pod string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.runningNotReady[pod]
}

func (w *readyWatch) readyPods() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var names []string
	for name, pod := range w.pods {
		if isReady(pod) {
			names = append(names, name)
		}
	}
	return names
}

// sampleReadiness checks, every 100 ms until ctx ends, that every pod seen Ready holds a
// certificate that is not past its NotAfter.
func (c *cluster) sampleReadiness(ctx context.Context, w *readyWatch, f *readinessFigures, mu *sync.Mutex) {
	dirs := map[string]string{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
		for _, pod := range w.readyPods() {
			if dirs[pod] == "" {
				dirs[pod] = c.volumeDirOf(pod)
			}
			now := time.Now()
			chain, err := os.ReadFile(filepath.Join(dirs[pod], "data", "tls.crt"))
			mu.Lock()
			f.samples++
			if leaf, perr := certs.ParseLeaf(chain); err != nil || perr != nil {
				f.readyWithoutCert++
			} else if late := now.Sub(leaf.NotAfter); late > 0 {
				f.readyAfterExpiry++
				f.maxReadyAfterExpiry = max(f.maxReadyAfterExpiry, late)
			}
			mu.Unlock()
		}
	}
}

// createReadyPods creates readiness pods with certificates of the lifetime, and waits until each
// has been seen Ready.
func (c *cluster) createReadyPods(ctx context.Context, w *readyWatch, names []string, lifetime time.Duration) error {
	for _, name := range names {
		if _, err := c.kube.CoreV1().Pods(namespace).Create(ctx, readinessPod(name, lifetime), metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	for _, name := range names {
		if err := poll(ctx, name+" to be Ready", 50*time.Millisecond, 2*time.Minute, func() (bool, error) {
			_, ok := w.readySince(name, time.Time{})
			return ok, nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// readinessPod is certPod with the driver's condition as a readiness gate.
func readinessPod(name string, lifetime time.Duration) *corev1.Pod {
	pod := certPod(name, lifetime)
	pod.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: readyCondition}}
	return pod
}

// storyReadiness is story 8: with the driver keeping readyCondition and a readiness gate on the
// pod's IP (ContinueOnNotReady, RequeuePod), pods with the condition as a readiness gate are
// Ready only once their certificate is written; during a signer outage that outlasts
// short-lived certificates they go not Ready at expiry and Ready again after the next issuance.
// A sampler checks throughout that no Ready pod lacks a valid certificate.
func (c *cluster) storyReadiness(ctx context.Context, pods int) (result, *readinessFigures) {
	r := result{story: "8 Ready only with a valid certificate"}
	f := &readinessFigures{pods: pods}
	fail := func(format string, args ...any) (result, *readinessFigures) {
		r.detail = fmt.Sprintf(format, args...)
		return r, f
	}
	c.stopDriver(syscall.SIGTERM)
	if err := c.startDriver(ctx, driverFlags{gateOnPodIP: true, requeuePods: true, podCondition: true, issueBackoff: 2 * time.Second}); err != nil {
		return fail("%v", err)
	}
	defer func() {
		c.stopDriver(syscall.SIGTERM)
		if err := c.startDriver(ctx, driverFlags{}); err != nil && r.ok {
			r.ok, r.detail = false, err.Error()
		}
	}()
	w, stopWatch, err := c.watchReadiness(ctx)
	if err != nil {
		return fail("%v", err)
	}
	defer stopWatch()
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var mu sync.Mutex
	sampled := make(chan struct{})
	go func() { defer close(sampled); c.sampleReadiness(sampleCtx, w, f, &mu) }()
	defer func() { stopSampling(); <-sampled }()

	// Part one: pods pods with hour-long certificates.
	var names []string
	for i := 0; i < pods; i++ {
		names = append(names, fmt.Sprintf("ready-%02d", i))
	}
	// Part two: three pods whose certificates live 12 s (renewed at 8 s), through an outage.
	short := []string{"expiry-0", "expiry-1", "expiry-2"}
	defer func() {
		for _, name := range append(names, short...) {
			_ = c.kube.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{})
		}
		for _, name := range append(names, short...) {
			_ = c.deletePod(ctx, name)
		}
	}()
	if err := c.createReadyPods(ctx, w, names, time.Hour); err != nil {
		return fail("%v", err)
	}
	j, err := c.journal()
	if err != nil {
		return fail("%v", err)
	}
	for _, name := range names {
		written := j[name]["written"]
		ready, _ := w.readySince(name, time.Time{})
		if written.IsZero() {
			return fail("%s is Ready but the journal has no certificate written for it", name)
		}
		if ready.Before(written) {
			f.readyBeforeFirstCertificate++
		}
		f.writtenToReady = append(f.writtenToReady, ready.Sub(written))
		if cond, ok := w.conditionTrueAt(name); ok {
			f.writtenToCondition = append(f.writtenToCondition, cond.Sub(written))
			f.conditionToReady = append(f.conditionToReady, ready.Sub(cond))
		}
		if w.wasRunningNotReady(name) {
			f.runningNotReady++
		}
	}

	if err := c.createReadyPods(ctx, w, short, 12*time.Second); err != nil {
		return fail("%v", err)
	}
	outage := time.Now()
	endOutage, err := c.signerOutage(ctx)
	if err != nil {
		return fail("%v", err)
	}
	notAfter := map[string]time.Time{}
	for _, name := range short {
		if err := poll(ctx, name+" to go not Ready in the outage", 50*time.Millisecond, time.Minute, func() (bool, error) {
			t, ok := w.notReadySince(name, outage)
			if ok && notAfter[name].IsZero() {
				// The certificate the pod had: the one in its volume (the outage renews nothing).
				chain, err := os.ReadFile(filepath.Join(c.volumeDirOf(name), "data", "tls.crt"))
				leaf, perr := certs.ParseLeaf(chain)
				if err != nil || perr != nil {
					return false, fmt.Errorf("%s: reading its certificate: %v %v", name, err, perr)
				}
				notAfter[name] = leaf.NotAfter
				f.expiryToNotReady = append(f.expiryToNotReady, t.Sub(leaf.NotAfter))
			}
			return ok, nil
		}); err != nil {
			_ = endOutage()
			return fail("%v", err)
		}
	}
	recovered := time.Now()
	if err := endOutage(); err != nil {
		return fail("ending the outage: %v", err)
	}
	writes, err := c.writesAfter(recovered)
	if err != nil {
		return fail("%v", err)
	}
	for _, name := range short {
		if err := poll(ctx, name+" to be Ready again", 50*time.Millisecond, time.Minute, func() (bool, error) {
			_, ok := w.readySince(name, recovered)
			return ok, nil
		}); err != nil {
			return fail("%v", err)
		}
		if writes, err = c.writesAfter(recovered); err != nil {
			return fail("%v", err)
		}
		ready, _ := w.readySince(name, recovered)
		if writes[name].IsZero() || ready.Before(writes[name]) {
			return fail("%s Ready again at %v before a certificate was written after the outage (%v)", name, ready, writes[name])
		}
		f.rewrittenToReady = append(f.rewrittenToReady, ready.Sub(writes[name]))
	}
	stopSampling()
	<-sampled
	mu.Lock()
	defer mu.Unlock()
	switch {
	case f.readyBeforeFirstCertificate > 0:
		return fail("%d pods Ready before their first certificate", f.readyBeforeFirstCertificate)
	case f.readyWithoutCert > 0:
		return fail("%d samples of a Ready pod without a certificate", f.readyWithoutCert)
	case f.readyAfterExpiry > 0:
		return fail("%d samples of a Ready pod whose certificate was past its NotAfter, up to %v", f.readyAfterExpiry, f.maxReadyAfterExpiry)
	}
	r.ok = true
	r.detail = fmt.Sprintf("%d pods: certificate written -> Ready p50 %v; outage: not Ready %v before NotAfter (p50); %d samples, none Ready without a valid certificate (table below)",
		pods, percentile(f.writtenToReady, 50), percentile(negated(f.expiryToNotReady), 50), f.samples)
	return r, f
}

// negated returns -d for every d of ds.
func negated(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = -d
	}
	return out
}

// writesAfter returns, by pod, the first certificate written at or after t (the driver's
// journal).
func (c *cluster) writesAfter(t time.Time) (map[string]time.Time, error) {
	file, err := os.Open(c.journalPath())
	if err != nil {
		return nil, err
	}
	defer file.Close()
	out := map[string]time.Time{}
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		var e journalEntry
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Event != "written" || e.Time.Before(t) {
			continue
		}
		if _, seen := out[e.Pod]; !seen {
			out[e.Pod] = e.Time
		}
	}
	return out, sc.Err()
}

// printReadinessFigures prints story 8's table.
func printReadinessFigures(f *readinessFigures) {
	if f == nil || len(f.writtenToReady) == 0 {
		return
	}
	fmt.Printf("\nstory 8 (p50 / p90 / max):\n")
	row := func(what string, ds []time.Duration) {
		if len(ds) == 0 {
			return
		}
		fmt.Printf("  %-46s %v / %v / %v (%d pods)\n", what, percentile(ds, 50), percentile(ds, 90), percentile(ds, 100), len(ds))
	}
	row("certificate written -> pod Ready", f.writtenToReady)
	row("  written -> the condition True (the library)", f.writtenToCondition)
	row("  the condition True -> Ready (kubelet)", f.conditionToReady)
	row("outage: pod not Ready -> NotAfter", negated(f.expiryToNotReady))
	row("after the outage: certificate written -> Ready", f.rewrittenToReady)
	fmt.Printf("  pods seen running and not Ready before their certificate: %d of %d\n", f.runningNotReady, f.pods)
	fmt.Printf("  samples of Ready pods: %d; without a certificate: %d; past NotAfter: %d (at most %v after it)\n",
		f.samples, f.readyWithoutCert, f.readyAfterExpiry, f.maxReadyAfterExpiry.Round(time.Millisecond))
}
