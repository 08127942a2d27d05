//go:build integration

// Package integration runs the library against a real kube-apiserver and etcd (envtest) with
// cert-manager's CertificateRequest CRD installed.
//
// The control plane is started once for the package in TestMain. Its binaries come from
// KUBEBUILDER_ASSETS, which `make integration` (and `make test`) points at bin/envtest/<version>,
// built from the Go module proxy by hack/envtest-binaries.sh. Without KUBEBUILDER_ASSETS the
// package fails rather than skips.
//
// Package variables, valid during the tests:
//   - restConfig: an admin client configuration for the apiserver;
//   - kube: a Kubernetes clientset on restConfig;
//   - cm: a cert-manager clientset on restConfig.
package integration

import (
	"fmt"
	"os"
	"testing"
	"time"

	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cert-manager/csi-lib/internal/controlplane"
)

var (
	restConfig *rest.Config
	kube       kubernetes.Interface
	cm         cmclient.Interface
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run these tests with `make integration`")
		return 1
	}
	start := time.Now()
	cfg, stop, err := controlplane.StartControlPlane()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	restConfig = cfg
	fmt.Printf("envtest: kube-apiserver and etcd started with the CertificateRequest CRD in %s\n", time.Since(start).Round(time.Millisecond))
	defer func() {
		if err := stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping envtest:", err)
		}
	}()
	kube = kubernetes.NewForConfigOrDie(restConfig)
	cm = cmclient.NewForConfigOrDie(restConfig)
	return m.Run()
}
