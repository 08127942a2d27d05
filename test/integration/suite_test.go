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

// Package integration runs the library against a real kube-apiserver and etcd (envtest) with
// cert-manager's CertificateRequest, Issuer and ClusterIssuer CRDs installed, and, in the tests
// of certmanager_test.go, against cert-manager's own signing controllers.
//
// The control plane is started once for the package in TestMain. Its binaries come from
// KUBEBUILDER_ASSETS, which `make integration` (and `make test`) points at bin/envtest/<version>,
// built from the Go module proxy by hack/envtest-binaries.sh; the controllers' binary comes from
// CM_CONTROLLERS, which they point at bin/cm-controllers/<version>/cm-controllers, built by
// hack/cm-controllers.sh. Without either the package fails rather than skips.
//
// Package variables, valid during the tests:
//   - restConfig: an admin client configuration for the apiserver;
//   - kubeconfigPath: the same as a kubeconfig file;
//   - kube: a Kubernetes clientset on restConfig;
//   - cm: a cert-manager clientset on restConfig.
package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cert-manager/csi-lib/internal/csilibdebug"
	"github.com/cert-manager/csi-lib/test/testkit/controlplane"
)

var (
	restConfig     *rest.Config
	kubeconfigPath string
	kube           kubernetes.Interface
	cm             cmclient.Interface
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// The tests set the CSILIBDEBUG settings they need; none comes from the environment.
	os.Unsetenv(csilibdebug.EnvironmentVariable)
	for _, env := range []string{"KUBEBUILDER_ASSETS", "CM_CONTROLLERS"} {
		if os.Getenv(env) == "" {
			fmt.Fprintln(os.Stderr, env, "is not set: run these tests with `make integration`")
			return 1
		}
	}
	start := time.Now()
	cp, err := controlplane.Start(controlplane.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	restConfig = cp.Config
	fmt.Printf("envtest: kube-apiserver and etcd started with cert-manager's CRDs in %s\n", time.Since(start).Round(time.Millisecond))
	defer func() {
		if err := cp.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping envtest:", err)
		}
	}()
	dir, err := os.MkdirTemp("", "csi-lib-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	kubeconfigPath = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfigPath, cp.KubeConfig, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	kube = kubernetes.NewForConfigOrDie(restConfig)
	cm = cmclient.NewForConfigOrDie(restConfig)
	return m.Run()
}
