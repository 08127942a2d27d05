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
	"crypto/x509"
	"crypto/x509/pkix"
	"path/filepath"
	"sync"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr/testr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/mount-utils"

	"github.com/cert-manager/csi-lib/driver"
	"github.com/cert-manager/csi-lib/manager"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/storage"
	"github.com/cert-manager/csi-lib/test/testkit"
)

const pollTimeout = 30 * time.Second

// newNamespace creates a namespace with a random name for one test.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "it-" + rand.String(8)}}
	if _, err := kube.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// newPod creates a Pod object (no kubelet runs it) and returns it.
func newPod(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	created, err := kube.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// runSigner approves and signs every CertificateRequest in ns with ca, through the API, until
// the test ends or the returned stop is called.
func runSigner(t *testing.T, ns string, ca *testkit.CA) (stop func()) {
	t.Helper()
	return runSignerAt(t, ns, ca, time.Now)
}

// runSignerAt is runSigner with certificates valid from one minute before now().
func runSignerAt(t *testing.T, ns string, ca *testkit.CA, now func() time.Time) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			w, err := cm.CertmanagerV1().CertificateRequests(ns).Watch(ctx, metav1.ListOptions{})
			if err != nil {
				return
			}
			for ev := range w.ResultChan() {
				req, ok := ev.Object.(*cmapi.CertificateRequest)
				if !ok || (ev.Type != watch.Added && ev.Type != watch.Modified) || testkit.IsFinished(req) || req.DeletionTimestamp != nil {
					continue
				}
				if _, err := testkit.Issue(ctx, cm, ca, req, now().Add(-time.Minute)); err != nil && ctx.Err() == nil {
					t.Logf("signer: %v", err)
				}
			}
			w.Stop()
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// node is a manager and a driver serving CSI on a unix socket, on a real Filesystem store.
type node struct {
	store   storage.Interface
	fs      *storage.Filesystem
	mounter *mount.FakeMounter
	m       *manager.Manager
	client  csi.NodeClient
	stop    func()
}

type nodeConfig struct {
	baseDir            string
	namespace          string
	wrapStore          func(*storage.Filesystem) storage.Interface
	managerOpts        func(*manager.Options)
	continueOnNotReady bool
	duration           time.Duration
}

// startNode builds a node driver from the library's public API only.
func startNode(t *testing.T, cfg nodeConfig) *node {
	t.Helper()
	log := testr.New(t)
	fs, err := storage.NewFilesystemWithOptions(log, cfg.baseDir, storage.FilesystemOptions{PlainDirectory: true, Mounter: mount.NewFakeMounter(nil)})
	if err != nil {
		t.Fatal(err)
	}
	var store storage.Interface = fs
	if cfg.wrapStore != nil {
		store = cfg.wrapStore(fs)
	}
	duration := cfg.duration
	if duration == 0 {
		duration = time.Hour
	}
	opts := manager.Options{
		Client:             cm,
		MetadataReader:     store,
		Log:                &log,
		NodeID:             "it-node",
		GeneratePrivateKey: testkit.GenerateKey,
		GenerateRequest: func(meta metadata.Metadata) (*manager.CertificateRequestBundle, error) {
			return &manager.CertificateRequestBundle{
				Request:   &x509.CertificateRequest{Subject: pkix.Name{CommonName: meta.VolumeContext["csi.storage.k8s.io/pod.name"]}},
				Namespace: meta.VolumeContext["csi.storage.k8s.io/pod.namespace"],
				IssuerRef: cmmeta.IssuerReference{Name: "test-ca", Kind: "Issuer", Group: "cert-manager.io"},
				Duration:  duration,
				Usages:    []cmapi.KeyUsage{cmapi.UsageDigitalSignature, cmapi.UsageServerAuth},
			}, nil
		},
		SignRequest:  testkit.SignCSR,
		WriteKeypair: testkit.KeypairWriter(store),
	}
	if cfg.managerOpts != nil {
		cfg.managerOpts(&opts)
	}
	m, err := manager.NewManager(opts)
	if err != nil {
		t.Fatal(err)
	}
	mounter := mount.NewFakeMounter(nil)
	sock := filepath.Join(t.TempDir(), "csi.sock")
	d, err := driver.New(context.Background(), "unix://"+sock, log, driver.Options{
		DriverName: "csi.example.com", DriverVersion: "v0.0.0-it", NodeID: "it-node",
		Store: store, Manager: m, Mounter: mounter, ContinueOnNotReady: cfg.continueOnNotReady,
	})
	if err != nil {
		m.Stop()
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- d.Run() }()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	n := &node{store: store, fs: fs, mounter: mounter, m: m, client: csi.NewNodeClient(conn)}
	n.stop = func() {
		once.Do(func() {
			_ = conn.Close()
			d.Stop()
			<-served
			m.Stop()
		})
	}
	t.Cleanup(n.stop)
	return n
}

func publishRequest(t *testing.T, pod *corev1.Pod, volumeID string) *csi.NodePublishVolumeRequest {
	return &csi.NodePublishVolumeRequest{
		VolumeId:   volumeID,
		TargetPath: filepath.Join(t.TempDir(), "target"),
		Readonly:   true,
		VolumeCapability: &csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		},
		VolumeContext: map[string]string{
			"csi.storage.k8s.io/ephemeral":     "true",
			"csi.storage.k8s.io/pod.name":      pod.Name,
			"csi.storage.k8s.io/pod.namespace": pod.Namespace,
			"csi.storage.k8s.io/pod.uid":       string(pod.UID),
			// kubelet sends the pod's service account name, empty or not.
			"csi.storage.k8s.io/serviceAccount.name": pod.Spec.ServiceAccountName,
		},
	}
}

func requestsIn(t *testing.T, client cmclient.Interface, ns string) []cmapi.CertificateRequest {
	t.Helper()
	list, err := client.CertmanagerV1().CertificateRequests(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// poll waits for cond with a bound; used only for events that happen on the apiserver or other
// goroutines.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(pollTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func newCA(t *testing.T) *testkit.CA {
	ca, err := testkit.NewCA("integration-ca")
	if err != nil {
		t.Fatal(err)
	}
	return ca
}
