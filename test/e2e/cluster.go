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
	"context"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/cert-manager/csi-lib/examples/csi-driver/plugin"
	"github.com/cert-manager/csi-lib/test/testkit"
	"github.com/cert-manager/csi-lib/test/testkit/controlplane"
)

const (
	driverName = "csi.example.com" // examples/deploy/csidriver.yaml's
	namespace  = "e2e"
)

// cluster is what the stories share: clients, the namespace, the signer and the driver.
type cluster struct {
	kube       kubernetes.Interface
	cm         cmclient.Interface
	n          *node
	binDir     string
	kubeconfig string
	// driverKubeconfig authenticates as the driver's service account (examples/deploy).
	driverKubeconfig string
	ca               *testkit.CA
	// metricsAddress is where the driver serves /metrics: a free loopback port.
	metricsAddress string
	stopSigner     context.CancelFunc
	signerDone     chan struct{}
	// setAuditFrom is where the apiserver's audit log stood when story 13 began: story 14
	// counts story 13's reviews from there.
	setAuditFrom int64

	mu          sync.Mutex
	certManager bool                       // cert-manager's controllers sign, not the signer below
	held        map[string]bool            // pods whose requests the signer leaves pending
	failing     bool                       // the signer fails every request (an outage)
	seen        map[string]map[string]bool // request names the signer has seen, by owner pod
}

func waitNodeReady(ctx context.Context, kube kubernetes.Interface) error {
	return poll(ctx, "the node to be Ready", 200*time.Millisecond, 2*time.Minute, func() (bool, error) {
		node, err := kube.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
}

// newCluster creates the namespace (with its service account), the example deployment's CSIDriver
// and RBAC, starts the signer and the driver, and waits until kubelet has registered the driver.
func newCluster(ctx context.Context, cp *controlplane.ControlPlane, kube kubernetes.Interface, n *node, binDir string) (*cluster, error) {
	cm, err := cmclient.NewForConfig(cp.Config)
	if err != nil {
		return nil, err
	}
	ca, err := testkit.NewCA("e2e-ca")
	if err != nil {
		return nil, err
	}
	c := &cluster{kube: kube, cm: cm, n: n, binDir: binDir, kubeconfig: filepath.Join(n.dir, "kubeconfig"), ca: ca}
	if c.metricsAddress, err = freeLoopbackAddress(); err != nil {
		return nil, err
	}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	// kube-controller-manager creates it too; whichever comes first.
	if _, err := kube.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	// The CSIDriver and the driver's RBAC are the example deployment's; the driver runs as its
	// service account.
	name, driverKubeconfig, err := applyDeploy(ctx, kube, c.kubeconfig, n.dir)
	if err != nil {
		return nil, err
	}
	if name != driverName {
		return nil, fmt.Errorf("examples/deploy's CSIDriver is %q, the stories expect %q", name, driverName)
	}
	c.driverKubeconfig = driverKubeconfig
	if err := c.createIssuers(ctx); err != nil {
		return nil, err
	}
	c.startSigner()
	if err := c.startDriver(ctx, driverFlags{}); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// driverFlags configures a start of the driver.
type driverFlags struct {
	gateOnPodIP  bool          // readiness gate on the pod's IP, with ContinueOnNotReady
	requeuePods  bool          // RequeuePod from the driver's pod informer
	v012Gate     bool          // v0.12.0's gate settings: the 1–10 s gate backoff, no gate poll
	issueBackoff time.Duration // the issuance backoff's first step (0: the library's)
	podCondition bool          // keep readyCondition on the pods (manager.Options.PodCondition)
	// removeStartupTaint: remove the node's startup taint once registered
	// (driver.Options.RemoveStartupTaint; its RBAC is examples/deploy/startup-taint's)
	removeStartupTaint bool
}

// podConditionType is the driver's --pod-condition: readyCondition, or "" for none.
func (f driverFlags) podConditionType() string {
	if f.podCondition {
		return string(readyCondition)
	}
	return ""
}

// startDriver starts the driver process (testdriver) and waits until kubelet lists it in the CSINode.
func (c *cluster) startDriver(ctx context.Context, f driverFlags) error {
	start := time.Now()
	if err := c.n.startProcess("driver", filepath.Join(c.binDir, "testdriver"),
		"--kubeconfig", c.driverKubeconfig,
		"--driver-name", driverName,
		"--node-id", nodeName,
		"--data-root", filepath.Join(c.n.dir, "driver"),
		"--endpoint", "unix://"+filepath.Join(c.n.dir, "driver.sock"),
		"--plugins-registry", filepath.Join(c.n.kubeletDir(), "plugins_registry"),
		"--journal", c.journalPath(),
		"--metrics-bind-address", c.metricsAddress,
		fmt.Sprintf("--gate-on-pod-ip=%t", f.gateOnPodIP),
		fmt.Sprintf("--requeue-pods=%t", f.requeuePods),
		fmt.Sprintf("--v0.12-gate=%t", f.v012Gate),
		"--issue-backoff", f.issueBackoff.String(),
		"--pod-condition", f.podConditionType(),
		fmt.Sprintf("--remove-startup-taint=%t", f.removeStartupTaint),
		"--v", "4"); err != nil {
		return err
	}
	err := poll(ctx, "kubelet to register the driver", 100*time.Millisecond, time.Minute, func() (bool, error) {
		csiNode, err := c.kube.StorageV1().CSINodes().Get(ctx, nodeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		for _, d := range csiNode.Spec.Drivers {
			if d.Name == driverName {
				return true, nil
			}
		}
		return false, nil
	})
	if err == nil {
		logf("driver started (%+v), registered with kubelet %v after its start", f, time.Since(start).Round(10*time.Millisecond))
	}
	return err
}

// stopDriver stops the driver process: SIGTERM (a graceful stop) or SIGKILL (a crash).
func (c *cluster) stopDriver(sig syscall.Signal) {
	p := c.n.processNamed("driver")
	if p == nil {
		return
	}
	if sig == syscall.SIGKILL {
		_ = p.cmd.Process.Kill()
		<-p.done
		logf("driver killed (pid %d)", p.cmd.Process.Pid)
		return
	}
	c.n.stopProcess(p)
	logf("driver stopped (pid %d)", p.cmd.Process.Pid)
}

func (c *cluster) journalPath() string { return filepath.Join(c.n.dir, "driver-journal.jsonl") }

// startSigner notes every CertificateRequest of the namespace by its owner pod and, unless
// cert-manager's controllers sign (useCertManager), signs it with the e2e CA as it appears,
// except those of a pod the signer holds (see hold).
func (c *cluster) startSigner() {
	ctx, cancel := context.WithCancel(context.Background())
	c.stopSigner, c.signerDone = cancel, make(chan struct{})
	go func() {
		defer close(c.signerDone)
		for ctx.Err() == nil {
			list, err := c.cm.CertmanagerV1().CertificateRequests(namespace).List(ctx, metav1.ListOptions{})
			if err == nil {
				for i := range list.Items {
					c.noteRequest(&list.Items[i])
					req := &list.Items[i]
					switch {
					case c.usesCertManager() || testkit.IsFinished(req) || c.isHeld(req):
					case c.isFailing(req):
						_, _ = testkit.SetConditions(ctx, c.cm, req, testkit.Failed("e2e signer outage: the CA is unreachable"))
					default:
						_, _ = testkit.Issue(ctx, c.cm, c.ca, req, time.Now())
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
}

// hold makes the signer leave the requests of the pod alone until the returned function is
// called (the first call counts). While cert-manager signs, its controllers are stopped
// meanwhile, so every request stays pending (a cert-manager outage).
func (c *cluster) hold(pod string) (release func()) {
	if c.usesCertManager() {
		c.stopCertManager()
		var once sync.Once
		return func() {
			once.Do(func() {
				if err := c.startCertManager(); err != nil {
					logf("restarting cert-manager's controllers: %v", err)
				}
			})
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held == nil {
		c.held = map[string]bool{}
	}
	c.held[pod] = true
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.held, pod)
	}
}

// noteRequest remembers a request by its owner pod (the signer lists every 20 ms, far more
// often than a request lives).
func (c *cluster) noteRequest(req *cmapi.CertificateRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen = map[string]map[string]bool{}
	}
	for _, o := range req.OwnerReferences {
		if c.seen[o.Name] == nil {
			c.seen[o.Name] = map[string]bool{}
		}
		c.seen[o.Name][req.Name] = true
	}
}

// requestsCreatedFor is the number of CertificateRequests ever seen for the pod.
func (c *cluster) requestsCreatedFor(pod string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen[pod])
}

func (c *cluster) isHeld(req *cmapi.CertificateRequest) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, o := range req.OwnerReferences {
		if c.held[o.Name] {
			return true
		}
	}
	return false
}

// failAll makes the signer fail every request until the returned function is called.
func (c *cluster) failAll() (end func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failing = true
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.failing = false
	}
}

func (c *cluster) isFailing(*cmapi.CertificateRequest) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failing
}

func (c *cluster) close() {
	c.stopCertManager()
	if c.stopSigner != nil {
		c.stopSigner()
		<-c.signerDone
	}
	c.stopDriver(syscall.SIGTERM)
}

// certPod is a pod whose checker container reads the driver's inline volume, whose certificates
// live for lifetime.
func certPod(name string, lifetime time.Duration) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PodSpec{
			NodeName:                      nodeName,
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name:            "checker",
				Image:           imageName,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"/checker", "/certs"},
				VolumeMounts:    []corev1.VolumeMount{{Name: "certs", MountPath: "/certs", ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{{Name: "certs", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
				Driver: driverName, ReadOnly: ptr.To(true),
				VolumeAttributes: map[string]string{plugin.DurationAttribute: lifetime.String()},
			}}}},
		},
	}
}

// deletePod deletes a pod gracefully and waits until it is gone: kubelet removes the pod object
// only once it has stopped its containers and unpublished its volumes.
func (c *cluster) deletePod(ctx context.Context, name string) error {
	if err := c.kube.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return poll(ctx, "pod "+name+" to be gone", 100*time.Millisecond, time.Minute, func() (bool, error) {
		_, err := c.kube.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// freeLoopbackAddress returns a loopback address with a port nobody listens on now.
func freeLoopbackAddress() (string, error) {
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
