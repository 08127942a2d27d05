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

package integration

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/yaml"

	"github.com/cert-manager/csi-lib/manager"
	"github.com/cert-manager/csi-lib/test/testkit"
	"github.com/cert-manager/csi-lib/test/testkit/manifests"
)

// TestDeployManifestsAccepted: the real kube-apiserver accepts every Kubernetes object of
// examples/deploy (a server-side dry run with strict field validation: validation and admission
// run, nothing is stored), after creating their namespaces. The PodMonitor and the
// PrometheusRule are left out: their CRDs belong to the Prometheus operator (make e2e installs
// them and applies the set whole); the deploy package's tests decode them and Prometheus's
// parser parses the alerts' expressions. So is kustomize's local-config ConfigMap of kubelet's
// root directory, which kustomize does not apply. The objects of the component startup-taint
// are accepted too.
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
	// The component startup-taint's objects too (its kustomization is a Component).
	component, _ := filepath.Glob("../../examples/deploy/startup-taint/*.yaml")
	for _, f := range append(files, component...) {
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
			if u.GetAnnotations()["config.kubernetes.io/local-config"] == "true" {
				continue // kustomize's own (kubelet-root-dir.yaml), never applied
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

// TestDeployRBACIsWhatTheManagerAsks: the driver's ClusterRoles of examples/deploy (rbac.yaml,
// and pod-condition-rbac.yaml for its pod condition), bound to an account, hold every rule the
// manager's start-up check asks for with the example driver's options (an EventRecorder and a
// PodCondition): it logs no missing rule. Without the events rule it names the rule to add,
// core events create and patch, which is what rbac.yaml grants (the deploy package's tests hold
// it to exactly that).
func TestDeployRBACIsWhatTheManagerAsks(t *testing.T) {
	var rules []rbacv1.PolicyRule
	for _, f := range []string{"rbac.yaml", "pod-condition-rbac.yaml"} {
		docs, err := manifests.Documents("../../examples/deploy/" + f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range docs {
			obj, err := manifests.Decode(doc)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if role, ok := obj.(*rbacv1.ClusterRole); ok {
				rules = append(rules, role.Rules...)
			}
		}
	}
	withoutEvents := slices.DeleteFunc(slices.Clone(rules), func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Resources, "events") })
	if len(withoutEvents) == len(rules) {
		t.Fatal("examples/deploy's driver roles grant nothing on events")
	}
	for _, c := range []struct {
		name  string
		rules []rbacv1.PolicyRule
		want  []string // the rules the start-up check names, in ClusterRole form
	}{
		{"rbac.yaml and pod-condition-rbac.yaml", rules, nil},
		{"without the events rule", withoutEvents, []string{"- {apiGroups: [''], resources: ['events'], verbs: ['create', 'patch']}"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := newNamespace(t)
			allow(t, ns, "csi-driver", false, c.rules...)
			user := serviceAccountUser(ns, "csi-driver")
			for _, r := range c.rules {
				for _, verb := range r.Verbs {
					waitAllowedRule(t, user, r.APIGroups[0], r.Resources[0], verb)
				}
			}
			token := serviceAccountToken(t, ns, "csi-driver")
			cfg := rest.AnonymousClientConfig(restConfig)
			cfg.BearerToken = token
			asDriver := kubernetes.NewForConfigOrDie(cfg)
			broadcaster := record.NewBroadcaster()
			broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: asDriver.CoreV1().Events("")})
			t.Cleanup(broadcaster.Shutdown)
			lines := &testkit.LogLines{}
			log := lines.LoggerV(1)
			startNode(t, nodeConfig{baseDir: t.TempDir(), namespace: ns, managerOpts: func(o *manager.Options) {
				o.Client = cmclient.NewForConfigOrDie(cfg)
				o.Log = &log
				o.EventRecorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "csi.example.com"})
				o.PodCondition = &manager.PodCondition{Type: certificateReady, Client: asDriver.CoreV1()}
			}})
			// The check runs in the background (it never holds NewManager): wait for its end
			// before counting the rules it named.
			poll(t, "the start-up check to end", func() bool {
				return len(lines.Matching("Checked the driver's permissions at start")) == 1
			})
			named := lines.Matching("add this rule to its ClusterRole")
			if len(named) != len(c.want) {
				t.Fatalf("the start-up check names %d rules, want %d:\n%s", len(named), len(c.want), strings.Join(named, "\n"))
			}
			for i, want := range c.want {
				if !strings.Contains(named[i], `"rule"="`+want+`"`) {
					t.Errorf("the start-up check names %s, want %s", named[i], want)
				}
			}
		})
	}
}

// waitAllowedRule waits until the apiserver's authorizer lets user use verb on resource
// ("pods/status" names a subresource) of group in all namespaces.
func waitAllowedRule(t *testing.T, user, group, resource, verb string) {
	t.Helper()
	resource, subresource, _ := strings.Cut(resource, "/")
	poll(t, fmt.Sprintf("the authorizer to let %s %s %s", user, verb, resource), func() bool {
		sar, err := kube.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User: user, ResourceAttributes: &authzv1.ResourceAttributes{Verb: verb, Group: group, Resource: resource, Subresource: subresource},
		}}, metav1.CreateOptions{})
		return err == nil && sar.Status.Allowed
	})
}

func kindOrder(u *unstructured.Unstructured) int {
	if u.GetKind() == "Namespace" {
		return 1
	}
	return 0
}
