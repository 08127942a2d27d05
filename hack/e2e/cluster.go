package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/cert-manager/csi-lib/internal/controlplane"
	"github.com/cert-manager/csi-lib/internal/testkit"
)

const (
	driverName = "csi.e2e.csi-lib.example"
	namespace  = "e2e"
)

// cluster is what the stories share: clients, the namespace, the signer and the driver.
type cluster struct {
	kube       kubernetes.Interface
	cm         cmclient.Interface
	n          *node
	binDir     string
	kubeconfig string
	ca         *testkit.CA
	stopSigner context.CancelFunc
	signerDone chan struct{}
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

// newCluster creates the namespace (with its service account), the CSIDriver object, starts the
// signer and the driver, and waits until kubelet has registered the driver.
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
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	// kube-controller-manager creates it too; whichever comes first.
	if _, err := kube.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	if _, err := kube.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: driverName},
		Spec: storagev1.CSIDriverSpec{
			AttachRequired:       ptr.To(false),
			PodInfoOnMount:       ptr.To(true),
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecycleEphemeral},
		},
	}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	c.startSigner()
	if err := c.startDriver(ctx); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// startDriver starts the driver process and waits until kubelet lists it in the CSINode.
func (c *cluster) startDriver(ctx context.Context) error {
	start := time.Now()
	if err := c.n.startProcess("driver", filepath.Join(c.binDir, "driver"),
		"--kubeconfig", c.kubeconfig,
		"--node-id", nodeName,
		"--data-root", filepath.Join(c.n.dir, "driver"),
		"--csi-socket", filepath.Join(c.n.dir, "driver.sock"),
		"--plugins-registry", filepath.Join(c.n.kubeletDir(), "plugins_registry"),
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
		logf("driver registered with kubelet %v after its start", time.Since(start).Round(10*time.Millisecond))
	}
	return err
}

// startSigner signs every CertificateRequest of the namespace with the e2e CA, as it appears.
func (c *cluster) startSigner() {
	ctx, cancel := context.WithCancel(context.Background())
	c.stopSigner, c.signerDone = cancel, make(chan struct{})
	go func() {
		defer close(c.signerDone)
		for ctx.Err() == nil {
			list, err := c.cm.CertmanagerV1().CertificateRequests(namespace).List(ctx, metav1.ListOptions{})
			if err == nil {
				for i := range list.Items {
					if !testkit.IsFinished(&list.Items[i]) {
						_, _ = testkit.Issue(ctx, c.cm, c.ca, &list.Items[i], time.Now())
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
}

func (c *cluster) close() {
	if c.stopSigner != nil {
		c.stopSigner()
		<-c.signerDone
	}
	if p := c.n.processNamed("driver"); p != nil {
		c.n.stopProcess(p)
	}
}

// certPod is a pod whose checker container reads the driver's inline volume.
func certPod(name string) *corev1.Pod {
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
			}}}},
		},
	}
}

// containerLog returns the checker container's log, read through the API (pods/log).
func (c *cluster) containerLog(ctx context.Context, pod string) (string, error) {
	raw, err := c.kube.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{Container: "checker"}).DoRaw(ctx)
	return string(raw), err
}

// deletePod deletes a pod and waits until it is gone (kubelet unpublished its volumes).
func (c *cluster) deletePod(ctx context.Context, name string) error {
	if err := c.kube.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return poll(ctx, "pod "+name+" to be gone", 100*time.Millisecond, time.Minute, func() (bool, error) {
		_, err := c.kube.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// storyCertificateInContainer: a pod with an inline volume of the driver; its container checks
// that tls.key matches tls.crt and that the chain verifies to ca.crt, and says so in its log.
func (c *cluster) storyCertificateInContainer(ctx context.Context) result {
	const name = "cert-in-container"
	r := result{story: "1 certificate in a real container"}
	start := time.Now()
	if _, err := c.kube.CoreV1().Pods(namespace).Create(ctx, certPod(name), metav1.CreateOptions{}); err != nil {
		r.detail = err.Error()
		return r
	}
	defer func() {
		if err := c.deletePod(ctx, name); err != nil {
			r.ok, r.detail = false, err.Error()
		}
	}()
	var line string
	err := poll(ctx, "the container's verdict", 100*time.Millisecond, 2*time.Minute, func() (bool, error) {
		log, err := c.containerLog(ctx, name)
		if err != nil {
			return false, nil // not started yet
		}
		line = firstLine(log)
		return line != "", nil
	})
	if err != nil {
		r.detail = err.Error()
		return r
	}
	r.ok = strings.HasPrefix(line, "certificate ok")
	r.detail = fmt.Sprintf("%q %v after the pod's creation", line, time.Since(start).Round(10*time.Millisecond))
	return r
}
