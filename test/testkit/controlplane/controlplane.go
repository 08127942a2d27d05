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

// Package controlplane starts a kube-apiserver and etcd (envtest) with cert-manager's
// CertificateRequest, Issuer and ClusterIssuer CRDs installed, for the integration tests, the
// demo and the fleet benchmark.
// It is a module of its own (test/testkit/controlplane/go.mod) so that what drivers import in
// their tests (test/driver, test/util, through test/testkit) never compiles envtest, and the
// library's go.mod never requires controller-runtime.
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

// CRDs returns the paths of cert-manager's CertificateRequest, Issuer and ClusterIssuer CRDs in
// the cert-manager module that the module of the working directory requires (deploy/crds in the
// module cache), for envtest: the library's version, wherever the test, the benchmark or the
// real node runs (the root, hack, test/integration or test/e2e; all require the same version).
func CRDs() ([]string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/cert-manager/cert-manager").Output()
	if err != nil {
		return nil, fmt.Errorf("locating the cert-manager module: %w", err)
	}
	var paths []string
	for _, kind := range []string{"certificaterequests", "issuers", "clusterissuers"} {
		path := filepath.Join(strings.TrimSpace(string(out)), "deploy", "crds", "cert-manager.io_"+kind+".yaml")
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("cert-manager CRD: %w", err)
		}
		paths = append(paths, path)
	}
	return paths, nil
}

// StartControlPlane starts kube-apiserver and etcd (envtest, binaries from KUBEBUILDER_ASSETS)
// with cert-manager's CRDs installed (see CRDs), and returns an admin configuration and
// the function that stops them.
func StartControlPlane() (cfg *rest.Config, stop func() error, err error) {
	cp, err := Start(Options{})
	if err != nil {
		return nil, nil, err
	}
	return cp.Config, cp.Stop, nil
}

// Options configures Start.
type Options struct {
	// APIServerArgs are set on kube-apiserver's command line, replacing envtest's value of the
	// same flag (name without dashes).
	APIServerArgs map[string]string
}

// ControlPlane is a running kube-apiserver and etcd.
type ControlPlane struct {
	// Config and KubeConfig give an admin (system:masters) access to the apiserver.
	Config     *rest.Config
	KubeConfig []byte
	// Stop stops the apiserver and etcd.
	Stop func() error
}

// Start starts kube-apiserver and etcd (envtest, binaries from KUBEBUILDER_ASSETS), on
// loopback only, with cert-manager's CRDs installed (see CRDs).
func Start(opts Options) (*ControlPlane, error) {
	crds, err := CRDs()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		CRDInstallOptions:        envtest.CRDInstallOptions{Paths: crds, ErrorIfPathMissing: true},
		ControlPlaneStartTimeout: time.Minute,
	}
	args := env.ControlPlane.GetAPIServer().Configure()
	for name, value := range opts.APIServerArgs {
		args.Set(name, value)
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest: %w", err)
	}
	return &ControlPlane{Config: cfg, KubeConfig: env.KubeConfig, Stop: env.Stop}, nil
}
