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
	"path/filepath"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/cert-manager/csi-lib/test/testkit/manifests"
)

// deployDir holds what an operator applies (examples/deploy); the node applies the CSIDriver
// and the driver's RBAC from there, and runs the driver as that service account.
const deployDir = "examples/deploy"

// deployObjects decodes the Kubernetes objects of examples/deploy files, strictly.
func deployObjects(files ...string) ([]runtime.Object, error) {
	var objs []runtime.Object
	for _, f := range files {
		docs, err := manifests.Documents(filepath.Join(deployDir, f))
		if err != nil {
			return nil, err
		}
		for _, doc := range docs {
			obj, err := manifests.Decode(doc)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			objs = append(objs, obj)
		}
	}
	return objs, nil
}

// applyDeploy creates the example deployment's CSIDriver, namespace, service account and RBAC
// (with the pod condition's), and returns the CSIDriver's name and a kubeconfig that
// authenticates as the driver's service account, for the driver process.
func applyDeploy(ctx context.Context, kube kubernetes.Interface, adminKubeconfig, dir string) (driver, kubeconfig string, err error) {
	objs, err := deployObjects("csidriver.yaml", "rbac.yaml", "pod-condition-rbac.yaml")
	if err != nil {
		return "", "", err
	}
	var sa *corev1.ServiceAccount
	for _, obj := range objs {
		switch o := obj.(type) {
		case *storagev1.CSIDriver:
			driver = o.Name
			_, err = kube.StorageV1().CSIDrivers().Create(ctx, o, metav1.CreateOptions{})
		case *corev1.Namespace:
			_, err = kube.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{})
		case *corev1.ServiceAccount:
			sa = o
			_, err = kube.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			_, err = kube.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = kube.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		default:
			err = fmt.Errorf("examples/deploy: unexpected %T", obj)
		}
		if err != nil {
			return "", "", err
		}
	}
	if driver == "" || sa == nil {
		return "", "", fmt.Errorf("examples/deploy names no CSIDriver or no service account")
	}
	token, err := kube.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](4 * 3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", "", fmt.Errorf("a token for the driver's service account: %w", err)
	}
	cfg, err := clientcmd.LoadFromFile(adminKubeconfig)
	if err != nil {
		return "", "", err
	}
	for name := range cfg.AuthInfos {
		cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token.Status.Token}
	}
	kubeconfig = filepath.Join(dir, "driver-kubeconfig")
	return driver, kubeconfig, clientcmd.WriteToFile(*cfg, kubeconfig)
}
