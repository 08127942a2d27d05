// Package controlplane starts a kube-apiserver and etcd (envtest) with cert-manager's
// CertificateRequest CRD installed, for the integration tests, the demo and the fleet benchmark.
// It is a package of its own so that what drivers import in their tests (test/driver,
// test/util, through internal/testkit) never compiles envtest or controller-runtime.
package controlplane

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// CertificateRequestCRD returns the path of cert-manager's CertificateRequest CRD in the
// cert-manager module this module requires (deploy/crds in the module cache), for envtest.
func CertificateRequestCRD() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/cert-manager/cert-manager").Output()
	if err != nil {
		return "", fmt.Errorf("locating the cert-manager module: %w", err)
	}
	path := filepath.Join(strings.TrimSpace(string(out)), "deploy", "crds", "cert-manager.io_certificaterequests.yaml")
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("cert-manager CRD: %w", err)
	}
	return path, nil
}

// StartControlPlane starts kube-apiserver and etcd (envtest, binaries from KUBEBUILDER_ASSETS)
// with cert-manager's CertificateRequest CRD installed, and returns an admin configuration and
// the function that stops them.
func StartControlPlane() (cfg *rest.Config, stop func() error, err error) {
	crd, err := CertificateRequestCRD()
	if err != nil {
		return nil, nil, err
	}
	env := &envtest.Environment{
		CRDInstallOptions:        envtest.CRDInstallOptions{Paths: []string{crd}, ErrorIfPathMissing: true},
		ControlPlaneStartTimeout: time.Minute,
	}
	if cfg, err = env.Start(); err != nil {
		return nil, nil, fmt.Errorf("starting envtest: %w", err)
	}
	return cfg, env.Stop, nil
}
