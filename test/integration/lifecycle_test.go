//go:build integration

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

package integration

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	testclock "k8s.io/utils/clock/testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/cert-manager/csi-lib/internal/api"
	"github.com/cert-manager/csi-lib/internal/api/util"
	"github.com/cert-manager/csi-lib/manager"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/storage"
	"github.com/cert-manager/csi-lib/test/testkit"
)

func TestPublishEndToEnd(t *testing.T) {
	ns := newNamespace(t)
	pod := newPod(t, ns, "app-0")
	ca := newCA(t)
	runSigner(t, ns, ca)
	n := startNode(t, nodeConfig{baseDir: t.TempDir()})

	req := publishRequest(t, pod, "csi-e2e-1")
	if _, err := n.client.NodePublishVolume(ctxTimeout(t, pollTimeout), req); err != nil {
		t.Fatal(err)
	}
	reqs := requestsIn(t, cm, ns)
	if len(reqs) != 1 {
		t.Fatalf("%d CertificateRequests, want 1", len(reqs))
	}
	cr := reqs[0]
	if cr.Labels[api.NodeIDHashLabelKey] != util.HashIdentifier("it-node") || cr.Labels[api.VolumeIDHashLabelKey] != util.HashIdentifier("csi-e2e-1") {
		t.Errorf("labels = %v", cr.Labels)
	}
	if len(cr.OwnerReferences) != 1 || cr.OwnerReferences[0].UID != pod.UID || cr.OwnerReferences[0].Kind != "Pod" {
		t.Errorf("owner references = %+v", cr.OwnerReferences)
	}
	var files [3][]byte
	for i, name := range []string{"tls.key", "tls.crt", "ca.crt"} {
		b, err := n.fs.ReadFile("csi-e2e-1", name)
		if err != nil {
			t.Fatal(err)
		}
		files[i] = b
	}
	leaf, err := testkit.VerifyKeyPair(files[0], files[1], files[2], time.Now())
	if err != nil {
		t.Fatalf("files on disk are not a valid key pair: %v", err)
	}
	if leaf.Subject.CommonName != "app-0" {
		t.Errorf("leaf CN = %q", leaf.Subject.CommonName)
	}
	meta, err := n.store.ReadMetadata("csi-e2e-1")
	if err != nil || !meta.Mounted || meta.NextIssuanceTime == nil {
		t.Fatalf("metadata = %+v, %v", meta, err)
	}
	if mps, _ := n.mounter.List(); len(mps) != 1 || mps[0].Path != req.TargetPath {
		t.Fatalf("mounts = %+v", mps)
	}
	if _, err := n.client.NodeUnpublishVolume(ctxTimeout(t, pollTimeout), &csi.NodeUnpublishVolumeRequest{VolumeId: req.VolumeId, TargetPath: req.TargetPath}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.store.ReadMetadata("csi-e2e-1"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("volume left after unpublish: %v", err)
	}
}

func TestRenewalWhenDue(t *testing.T) {
	ns := newNamespace(t)
	pod := newPod(t, ns, "app-0")
	clk := testclock.NewFakeClock(time.Now())
	runSignerAt(t, ns, newCA(t), clk.Now)
	n := startNode(t, nodeConfig{baseDir: t.TempDir(), managerOpts: func(o *manager.Options) { o.Clock = clk }})
	if _, err := n.client.NodePublishVolume(ctxTimeout(t, pollTimeout), publishRequest(t, pod, "csi-renew-1")); err != nil {
		t.Fatal(err)
	}
	first, _ := n.store.ReadMetadata("csi-renew-1")
	firstCert, _ := n.fs.ReadFile("csi-renew-1", "tls.crt")
	poll(t, "the loop to wait for the due time", clk.HasWaiters)
	clk.SetTime(first.NextIssuanceTime.Add(time.Second))
	poll(t, "the renewal", func() bool {
		meta, _ := n.store.ReadMetadata("csi-renew-1")
		return meta.NextIssuanceTime != nil && !meta.NextIssuanceTime.Equal(*first.NextIssuanceTime)
	})
	cert, _ := n.fs.ReadFile("csi-renew-1", "tls.crt")
	if string(cert) == string(firstCert) {
		t.Fatal("certificate not replaced")
	}
	// MaxRequestsPerVolume 1: the old request was deleted before the new one was made.
	if reqs := requestsIn(t, cm, ns); len(reqs) != 1 {
		t.Fatalf("%d requests after renewal, want 1", len(reqs))
	}
}

func TestReadinessGateWithPodInformer(t *testing.T) {
	ns := newNamespace(t)
	pod := newPod(t, ns, "app-0")
	runSigner(t, ns, newCA(t))

	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(ns))
	pods := factory.Core().V1().Pods()
	podLister := pods.Lister()
	gate := func(meta metadata.Metadata) (bool, string) {
		p, err := podLister.Pods(meta.VolumeContext["csi.storage.k8s.io/pod.namespace"]).Get(meta.VolumeContext["csi.storage.k8s.io/pod.name"])
		if err != nil || p.Status.PodIP == "" {
			return false, "pod has no IP yet"
		}
		return true, ""
	}
	// A 30 s gate backoff: only RequeuePod can make issuance start quickly.
	slowGate := wait.Backoff{Duration: 30 * time.Second, Factor: 2, Cap: time.Minute, Steps: math.MaxInt32}
	n := startNode(t, nodeConfig{baseDir: t.TempDir(), continueOnNotReady: true, managerOpts: func(o *manager.Options) {
		o.ReadyToRequest = gate
		o.GateBackoffConfig = &slowGate
	}})
	if _, err := pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { n.m.RequeuePod(obj.(*corev1.Pod).UID) },
	}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	factory.Start(stop)
	factory.WaitForCacheSync(stop)

	if _, err := n.client.NodePublishVolume(ctxTimeout(t, pollTimeout), publishRequest(t, pod, "csi-gate-1")); err != nil {
		t.Fatal(err)
	}
	if reqs := requestsIn(t, cm, ns); len(reqs) != 0 {
		t.Fatal("a request was made before the pod had an IP")
	}
	existing, err := cm.CertmanagerV1().CertificateRequests(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cm.CertmanagerV1().CertificateRequests(ns).Watch(context.Background(), metav1.ListOptions{ResourceVersion: existing.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	pod.Status.PodIP = "10.0.0.7"
	pod.Status.PodIPs = []corev1.PodIP{{IP: "10.0.0.7"}}
	opened := time.Now()
	if _, err := kube.CoreV1().Pods(ns).UpdateStatus(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if ev.Type != watch.Added {
			t.Fatalf("unexpected event %v", ev.Type)
		}
		latency := time.Since(opened)
		t.Logf("gate open (pod IP set) -> CertificateRequest created: %v", latency)
		if latency > 10*time.Second {
			t.Fatalf("request created %v after the gate opened; RequeuePod did not cut the 30 s gate wait", latency)
		}
	case <-time.After(pollTimeout):
		t.Fatal("no CertificateRequest after the pod got its IP")
	}
	poll(t, "the certificate", func() bool {
		b, _ := n.fs.ReadFile("csi-gate-1", "tls.crt")
		return len(b) > 0
	})
}

// crashStore drops all writes after crash(), so the directory keeps what a killed process left.
type crashStore struct {
	*storage.Filesystem
	crashed chan struct{}
}

func (c *crashStore) isCrashed() bool {
	select {
	case <-c.crashed:
		return true
	default:
		return false
	}
}
func (c *crashStore) WriteMetadata(id string, m metadata.Metadata) error {
	if c.isCrashed() {
		return nil
	}
	return c.Filesystem.WriteMetadata(id, m)
}
func (c *crashStore) WriteFiles(m metadata.Metadata, f map[string][]byte) error {
	if c.isCrashed() {
		return nil
	}
	return c.Filesystem.WriteFiles(m, f)
}
func (c *crashStore) RemoveVolume(id string) error {
	if c.isCrashed() {
		return nil
	}
	return c.Filesystem.RemoveVolume(id)
}

func TestRestartDuringFirstIssuance(t *testing.T) {
	ns := newNamespace(t)
	podA := newPod(t, ns, "doomed")
	podB := newPod(t, ns, "survivor")
	ca := newCA(t)
	base := t.TempDir()
	crashed := make(chan struct{})
	n := startNode(t, nodeConfig{baseDir: base, wrapStore: func(fs *storage.Filesystem) storage.Interface {
		return &crashStore{Filesystem: fs, crashed: crashed}
	}})
	// survivor: published and mounted before the crash.
	stopSigner := runSigner(t, ns, ca)
	if _, err := n.client.NodePublishVolume(ctxTimeout(t, pollTimeout), publishRequest(t, podB, "csi-survivor")); err != nil {
		t.Fatal(err)
	}
	stopSigner()
	// doomed: the driver dies during its first issuance (nobody signs).
	go func() { _, _ = n.client.NodePublishVolume(context.Background(), publishRequest(t, podA, "csi-doomed")) }()
	doomedHash := util.HashIdentifier("csi-doomed")
	poll(t, "the doomed volume's request", func() bool {
		for _, r := range requestsIn(t, cm, ns) {
			if r.Labels[api.VolumeIDHashLabelKey] == doomedHash {
				return true
			}
		}
		return false
	})
	close(crashed)
	n.stop()
	// The pod is deleted while the driver is down; kubelet never unpublishes.
	if err := kube.CoreV1().Pods(ns).Delete(context.Background(), podA.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	existing, err := cm.CertmanagerV1().CertificateRequests(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := len(existing.Items)
	// Watch from now on (a watch without a resource version replays existing objects).
	w, err := cm.CertmanagerV1().CertificateRequests(ns).Watch(context.Background(), metav1.ListOptions{ResourceVersion: existing.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	clk := testclock.NewFakeClock(time.Now())
	runSignerAt(t, ns, ca, clk.Now)
	n2 := startNode(t, nodeConfig{baseDir: base, managerOpts: func(o *manager.Options) { o.Clock = clk }})
	res := n2.fs.StartupSweep()
	if len(res.RemovedNeverMounted) != 1 || res.RemovedNeverMounted[0] != "csi-doomed" || res.Kept != 1 {
		t.Fatalf("start-up sweep = %+v", res)
	}
	if _, err := n2.store.ReadMetadata("csi-doomed"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("doomed volume still stored: %v", err)
	}
	// The survivor is resumed: it renews when due, and that is the only request made.
	meta, _ := n2.store.ReadMetadata("csi-survivor")
	// Two timers: the survivor's loop waiting until due, and the end of the grace period of the
	// doomed volume's kept key (armed first, so HasWaiters alone would not say the loop waits).
	poll(t, "the survivor's loop to wait", func() bool { return clk.Waiters() == 2 })
	clk.SetTime(meta.NextIssuanceTime.Add(time.Second))
	deadline := time.After(5 * time.Second)
	survivorRenewed := false
	for !survivorRenewed {
		select {
		case ev := <-w.ResultChan():
			req, ok := ev.Object.(*cmapi.CertificateRequest)
			if ok && ev.Type == watch.Added {
				if req.Labels[api.VolumeIDHashLabelKey] == doomedHash {
					t.Fatal("a CertificateRequest was created for the swept volume")
				}
				survivorRenewed = true
			}
		case <-deadline:
			t.Fatal("the survivor was not renewed")
		}
	}
	// Keep watching a while on the real API: nothing is ever made for the swept volume.
	quiet := time.After(3 * time.Second)
	for {
		select {
		case ev := <-w.ResultChan():
			if req, ok := ev.Object.(*cmapi.CertificateRequest); ok && ev.Type == watch.Added && req.Labels[api.VolumeIDHashLabelKey] == doomedHash {
				t.Fatal("a CertificateRequest was created for the swept volume")
			}
		case <-quiet:
			t.Logf("requests before restart %d, after %d", before, len(requestsIn(t, cm, ns)))
			return
		}
	}
}
