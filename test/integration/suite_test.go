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
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
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
	crdDir, err := certManagerCRDDir()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env := &envtest.Environment{
		CRDInstallOptions: envtest.CRDInstallOptions{
			Paths:              []string{filepath.Join(crdDir, "cert-manager.io_certificaterequests.yaml")},
			ErrorIfPathMissing: true,
		},
		ControlPlaneStartTimeout: 60 * time.Second,
	}
	start := time.Now()
	restConfig, err = env.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting envtest:", err)
		return 1
	}
	fmt.Printf("envtest: kube-apiserver and etcd started with the CertificateRequest CRD in %s\n", time.Since(start).Round(time.Millisecond))
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping envtest:", err)
		}
	}()
	kube = kubernetes.NewForConfigOrDie(restConfig)
	cm = cmclient.NewForConfigOrDie(restConfig)
	return m.Run()
}

// certManagerCRDDir finds deploy/crds in the cert-manager module this module requires.
func certManagerCRDDir() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/cert-manager/cert-manager").Output()
	if err != nil {
		return "", fmt.Errorf("locating the cert-manager module: %w", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "deploy", "crds")
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("cert-manager CRDs: %w", err)
	}
	return dir, nil
}
