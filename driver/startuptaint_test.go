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

package driver

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
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

	"github.com/cert-manager/csi-lib/internal/api/util"
	"github.com/cert-manager/csi-lib/metrics"
)

const removalsFamily = "certmanager_csi_startup_taint_removals_total"

// TestStartupTaintBadDriverName: a driver name that makes no valid taint key is an error at
// start-up: New fails before it listens, and a driver from NewWithListener does not serve.
func TestStartupTaintBadDriverName(t *testing.T) {
	client := fake.NewClientset()
	opts := Options{DriverName: "Example_Driver", DriverVersion: "v", NodeID: "node-1",
		RemoveStartupTaint: &StartupTaintOptions{Nodes: client.CoreV1(), CSINodes: client.StorageV1()}}
	sock := filepath.Join(t.TempDir(), "csi.sock")
	if _, err := New(context.Background(), "unix://"+sock, logr.Discard(), opts); err == nil || !strings.Contains(err.Error(), "valid taint key") {
		t.Fatalf("New = %v, want an invalid taint key error", err)
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("New listened before it refused the options: %v", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := NewWithListener(lis, logr.Discard(), opts)
	if err := d.Run(); err == nil || !strings.Contains(err.Error(), "valid taint key") {
		t.Fatalf("Run = %v, want an invalid taint key error", err)
	}
	if len(client.Actions()) != 0 {
		t.Errorf("calls on the cluster: %v", client.Actions())
	}
	// Without the option the same name is upstream's business.
	opts.RemoveStartupTaint = nil
	d, err = New(context.Background(), "unix://"+sock, logr.Discard(), opts)
	if err != nil {
		t.Fatal(err)
	}
	d.server.ForceStop()
}

// serve runs d on a loopback listener and returns a client of its identity service.
func serve(t *testing.T, opts Options) (csi.IdentityClient, *Driver) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := NewWithListener(lis, testr.New(t), opts)
	served := make(chan error, 1)
	go func() { served <- d.Run() }()
	t.Cleanup(func() {
		d.Stop()
		if err := <-served; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return csi.NewIdentityClient(conn), d
}

// signaled returns a channel that holds a token once send has been called since the last
// token was taken, and send.
func signaled() (<-chan struct{}, func()) {
	c := make(chan struct{}, 1)
	return c, func() {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// waitFor waits until cond holds, looking again at each token on signal; false if it does not
// hold within 10 s.
func waitFor(signal <-chan struct{}, cond func() bool) bool {
	limit := time.NewTimer(10 * time.Second)
	defer limit.Stop()
	for !cond() {
		select {
		case <-signal:
		case <-limit.C:
			return false
		}
	}
	return true
}

// TestStartupTaintNeverBlocksServing: a node and a CSINode that cannot be read do not keep the
// driver from serving, nor from stopping.
func TestStartupTaintNeverBlocksServing(t *testing.T) {
	client := fake.NewClientset()
	// Each call signals from its reactor; the fake records a call and runs its reactors under
	// the lock that Actions takes, so Actions read after a signal holds that call.
	called, signal := signaled()
	client.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		signal()
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: a.GetResource().Resource}, "node-1", errors.New("no RBAC"))
	})
	refuseWatch := k8stesting.DefaultWatchReactor(nil, apierrors.NewForbidden(schema.GroupResource{}, "", errors.New("no RBAC")))
	client.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		signal()
		return refuseWatch(a)
	})
	ids, _ := serve(t, Options{DriverName: "csi.example.com", DriverVersion: "v1", NodeID: "node-1",
		RemoveStartupTaint: &StartupTaintOptions{Nodes: client.CoreV1(), CSINodes: client.StorageV1(),
			Backoff: &wait.Backoff{Duration: time.Millisecond, Factor: 2, Cap: 10 * time.Millisecond, Steps: 100}}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := ids.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
	if err != nil || info.GetName() != "csi.example.com" {
		t.Fatalf("GetPluginInfo = %v, %v", info, err)
	}
	waitFor(called, func() bool { return len(client.Actions()) >= 5 })
	if n := len(client.Actions()); n < 5 {
		t.Fatalf("%d reads of the CSINode, want retries", n)
	}
	if _, err := ids.Probe(ctx, &csi.ProbeRequest{}); err != nil {
		t.Fatalf("Probe while the node cannot be read: %v", err)
	}
}

// TestStartupTaintRemovedAndCounted: with metrics, the family is registered at zero when the
// driver is made, and counts the taints removed once the CSINode lists the driver.
func TestStartupTaintRemovedAndCounted(t *testing.T) {
	key := "csi.example.com" + StartupTaintSuffix
	other := corev1.Taint{Key: "example.org/other", Effect: corev1.TaintEffectNoSchedule}
	client := fake.NewClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: key, Effect: corev1.TaintEffectNoSchedule}, other}}},
		&storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}},
	)
	// Each watch signals, then goes on to the fake's own reactor, which registers the watcher
	// while the fake holds the lock that Actions takes.
	watched, signal := signaled()
	client.PrependWatchReactor("*", func(k8stesting.Action) (bool, watch.Interface, error) {
		signal()
		return false, nil, nil
	})
	watching := func(resource string) func() bool {
		return func() bool {
			return slices.ContainsFunc(client.Actions(), func(a k8stesting.Action) bool {
				return a.GetVerb() == "watch" && a.GetResource().Resource == resource
			})
		}
	}
	registry := prometheus.NewRegistry()
	met := metrics.New("node-1", nil, registry, nil, nil)
	text := func(n int) string {
		return "# HELP " + removalsFamily + " The number of startup taints (<driver name>/agent-not-ready) the driver removed from its node.\n# TYPE " + removalsFamily + " counter\n" +
			removalsFamily + `{node="` + util.HashIdentifier("node-1") + `"} ` + strconv.Itoa(n) + "\n"
	}
	serve(t, Options{DriverName: "csi.example.com", DriverVersion: "v1", NodeID: "node-1",
		RemoveStartupTaint: &StartupTaintOptions{Nodes: client.CoreV1(), CSINodes: client.StorageV1(), Metrics: met}})
	if err := testutil.GatherAndCompare(registry, strings.NewReader(text(0)), removalsFamily); err != nil {
		t.Errorf("before any removal: %v", err)
	}
	if !waitFor(watched, watching("csinodes")) {
		t.Fatal("the CSINode is not watched")
	}
	registered := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: "csi.example.com", NodeID: "node-1"}}}}
	if _, err := client.StorageV1().CSINodes().Update(context.Background(), registered, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The remover watches the node once it has removed the taint: after the patch has answered
	// and the removal is counted.
	if !waitFor(watched, watching("nodes")) {
		t.Fatal("the node is not watched after the CSINode lists the driver")
	}
	n, err := client.CoreV1().Nodes().Get(context.Background(), "node-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != other.Key {
		t.Fatalf("taints %v, want the startup taint removed alone", n.Spec.Taints)
	}
	if err := testutil.GatherAndCompare(registry, strings.NewReader(text(1)), removalsFamily); err != nil {
		t.Fatal(err)
	}
}

// TestStartupTaintOffByDefault: without the option the family is not registered and the driver
// serves as upstream.
func TestStartupTaintOffByDefault(t *testing.T) {
	registry := prometheus.NewRegistry()
	metrics.New("node-1", nil, registry, nil, nil)
	ids, _ := serve(t, Options{DriverName: "csi.example.com", DriverVersion: "v1", NodeID: "node-1"})
	if _, err := ids.GetPluginInfo(context.Background(), &csi.GetPluginInfoRequest{}); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(registry, removalsFamily); err != nil || n != 0 {
		t.Errorf("%d series of %s without the option (%v)", n, removalsFamily, err)
	}
}
