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

	admissionv1 "k8s.io/api/admissionregistration/v1"
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
// authenticates as the driver's service account with a token bound to this node (as a
// DaemonSet pod's projected token is bound to its pod, and through it to the node: the
// node-bound admission policy of story 12 reads the node's name from it), for the driver process.
func applyDeploy(ctx context.Context, kube kubernetes.Interface, adminKubeconfig, dir string) (driver, kubeconfig string, err error) {
	objs, err := deployObjects("csidriver.yaml", "rbac.yaml", "pod-condition-rbac.yaml")
	if err != nil {
		return "", "", err
	}
	var sa *corev1.ServiceAccount
	for _, obj := range objs {
		if d, ok := obj.(*storagev1.CSIDriver); ok {
			driver = d.Name
		}
		if a, ok := obj.(*corev1.ServiceAccount); ok {
			sa = a
		}
		if err := createDeployObject(ctx, kube, obj); err != nil {
			return "", "", err
		}
	}
	if driver == "" || sa == nil {
		return "", "", fmt.Errorf("examples/deploy names no CSIDriver or no service account")
	}
	kubeconfig = filepath.Join(dir, "driver-kubeconfig")
	return driver, kubeconfig, writeTokenKubeconfig(ctx, kube, adminKubeconfig, kubeconfig, sa, nodeName)
}

// createDeployObject creates one object of examples/deploy (the kinds the node uses).
func createDeployObject(ctx context.Context, kube kubernetes.Interface, obj runtime.Object) (err error) {
	switch o := obj.(type) {
	case *storagev1.CSIDriver:
		_, err = kube.StorageV1().CSIDrivers().Create(ctx, o, metav1.CreateOptions{})
	case *corev1.Namespace:
		_, err = kube.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{})
	case *corev1.ServiceAccount:
		_, err = kube.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.ClusterRole:
		_, err = kube.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.ClusterRoleBinding:
		_, err = kube.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
	case *admissionv1.ValidatingAdmissionPolicy:
		_, err = kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, o, metav1.CreateOptions{})
	case *admissionv1.ValidatingAdmissionPolicyBinding:
		_, err = kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, o, metav1.CreateOptions{})
	default:
		err = fmt.Errorf("examples/deploy: unexpected %T", obj)
	}
	return err
}

// boundToken is a token of the service account sa bound to the Node node: the apiserver names
// the node in the token's user (authentication.kubernetes.io/node-name).
func boundToken(ctx context.Context, kube kubernetes.Interface, sa *corev1.ServiceAccount, node string) (string, error) {
	n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	token, err := kube.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To[int64](4 * 3600),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: n.Name, UID: n.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("a token for %s/%s bound to node %s: %w", sa.Namespace, sa.Name, node, err)
	}
	return token.Status.Token, nil
}

// writeTokenKubeconfig writes to path the admin kubeconfig with its credentials replaced by a
// token of sa bound to node.
func writeTokenKubeconfig(ctx context.Context, kube kubernetes.Interface, adminKubeconfig, path string, sa *corev1.ServiceAccount, node string) error {
	token, err := boundToken(ctx, kube, sa, node)
	if err != nil {
		return err
	}
	cfg, err := clientcmd.LoadFromFile(adminKubeconfig)
	if err != nil {
		return err
	}
	for name := range cfg.AuthInfos {
		cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	}
	return clientcmd.WriteToFile(*cfg, path)
}
