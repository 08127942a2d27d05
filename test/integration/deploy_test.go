//go:build integration

/*
Copyright 2026 The cert-manager Authors.

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
	"cmp"
	"context"
	"path/filepath"
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/cert-manager/csi-lib/test/testkit/manifests"
)

// TestDeployManifestsAccepted: the real kube-apiserver accepts every Kubernetes object of
// examples/deploy (a server-side dry run with strict field validation: validation and admission
// run, nothing is stored), after creating their namespaces. The PodMonitor and the
// PrometheusRule are left out: their CRDs belong to the Prometheus operator (make e2e installs
// them and applies the set whole); the deploy package's tests decode them and Prometheus's
// parser parses the alerts' expressions.
func TestDeployManifestsAccepted(t *testing.T) {
	ctx := context.Background()
	dyn := dynamic.NewForConfigOrDie(restConfig)
	groups, err := restmapper.GetAPIGroupResources(discovery.NewDiscoveryClientForConfigOrDie(restConfig))
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDiscoveryRESTMapper(groups)
	var objs []*unstructured.Unstructured
	files, _ := filepath.Glob("../../examples/deploy/*.yaml")
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		docs, err := manifests.Documents(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range docs {
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal(doc, &u.Object); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if u.GroupVersionKind().Group == "monitoring.coreos.com" {
				continue
			}
			objs = append(objs, u)
		}
	}
	if len(objs) < 12 {
		t.Fatalf("%d objects in examples/deploy", len(objs))
	}
	// Namespaces first: the objects in them need them to exist, even in a dry run.
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int {
		return cmp.Compare(kindOrder(b), kindOrder(a))
	})
	accepted := 0
	for _, u := range objs {
		mapping, err := mapper.RESTMapping(u.GroupVersionKind().GroupKind(), u.GroupVersionKind().Version)
		if err != nil {
			t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
		}
		var client dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			client = dyn.Resource(mapping.Resource).Namespace(u.GetNamespace())
		}
		opts := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}
		if u.GetKind() == "Namespace" {
			opts = metav1.CreateOptions{}
		}
		if _, err := client.Create(ctx, u, opts); err != nil && !(u.GetKind() == "Namespace" && apierrors.IsAlreadyExists(err)) {
			t.Errorf("the apiserver refused %s %s: %v", u.GetKind(), u.GetName(), err)
			continue
		}
		accepted++
	}
	t.Logf("the apiserver accepted %d objects of examples/deploy", accepted)
}

func kindOrder(u *unstructured.Unstructured) int {
	if u.GetKind() == "Namespace" {
		return 1
	}
	return 0
}
