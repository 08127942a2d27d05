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

package approval

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

func request(annotations map[string]string, owners ...metav1.OwnerReference) *cmapi.CertificateRequest {
	return &cmapi.CertificateRequest{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "ns", Annotations: annotations, OwnerReferences: owners}}
}

func named(node, ns, name, uid string) map[string]string {
	return map[string]string{
		NodeNameAnnotationKey:     node,
		PodNamespaceAnnotationKey: ns,
		PodNameAnnotationKey:      name,
		PodUIDAnnotationKey:       uid,
		// Every pod() runs as "default".
		PodServiceAccountAnnotationKey: "default",
		"driver.example.com/x":         "kept",
	}
}

// without is annotations with key removed.
func without(annotations map[string]string, key string) map[string]string {
	delete(annotations, key)
	return annotations
}

func pod(ns, name, uid, node string, change func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)},
		Spec:       corev1.PodSpec{NodeName: node, ServiceAccountName: "default"},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if change != nil {
		change(p)
	}
	return p
}

// pods serves the given pods by namespace/name, and err for any other.
func pods(err error, ps ...*corev1.Pod) GetPodFunc {
	return func(_ context.Context, ns, name string) (*corev1.Pod, error) {
		for _, p := range ps {
			if p.Namespace == ns && p.Name == name {
				return p, nil
			}
		}
		if err != nil {
			return nil, err
		}
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, name)
	}
}

func TestCheck(t *testing.T) {
	now := metav1.Now()
	podRef := func(name, uid string) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: name, UID: types.UID(uid)}
	}
	for _, tc := range []struct {
		name    string
		req     *cmapi.CertificateRequest
		get     GetPodFunc
		approve bool
		reason  string
	}{
		{"a live pod bound to the node named", request(named("node-a", "ns", "app", "u1"), podRef("app", "u1")),
			pods(nil, pod("ns", "app", "u1", "node-a", nil)), true, ""},
		{"a pod bound to another node", request(named("node-b", "ns", "app", "u1")),
			pods(nil, pod("ns", "app", "u1", "node-a", nil)), false, "pod ns/app is bound to node node-a, not to node-b"},
		{"a pod not yet bound", request(named("node-a", "ns", "app", "u1")),
			pods(nil, pod("ns", "app", "u1", "", nil)), false, "pod ns/app is bound to no node"},
		{"a pod of that name with another UID", request(named("node-a", "ns", "app", "u1")),
			pods(nil, pod("ns", "app", "u2", "node-a", nil)), false, "pod ns/app has uid u2, not u1"},
		{"no such pod", request(named("node-a", "ns", "app", "u1")),
			pods(nil), false, "pod ns/app does not exist"},
		{"a terminating pod", request(named("node-a", "ns", "app", "u1")),
			pods(nil, pod("ns", "app", "u1", "node-a", func(p *corev1.Pod) { p.DeletionTimestamp = &now })), false, "pod ns/app is terminating"},
		{"a finished pod", request(named("node-a", "ns", "app", "u1")),
			pods(nil, pod("ns", "app", "u1", "node-a", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded })), false, "pod ns/app has finished (Succeeded)"},
		{"no annotations", request(nil),
			pods(nil, pod("ns", "app", "u1", "node-a", nil)), false, "the request has no csi.cert-manager.io/node-name annotation: it names no pod to check"},
		{"an empty pod UID", request(named("node-a", "ns", "app", "")),
			pods(nil, pod("ns", "app", "", "node-a", nil)), false, "the request has no csi.cert-manager.io/pod-uid annotation"},
		{"owned by another pod", request(named("node-a", "ns", "app", "u1"), podRef("other", "u9")),
			pods(nil, pod("ns", "app", "u1", "node-a", nil)), false, "the request's owner is pod other (uid u9), not the pod it names (uid u1)"},
		{"a request made before the library named the service account", request(without(named("node-a", "ns", "app", "u1"), PodServiceAccountAnnotationKey)),
			pods(nil, pod("ns", "app", "u1", "node-a", nil)), false,
			"the request names no service account (no csi.cert-manager.io/pod-service-account annotation: made before the library named the pod's identity), so it is not bound to the identity of pod ns/app"},
		{"a pod of another service account", request(named("node-a", "ns", "app", "u1")),
			pods(nil, pod("ns", "app", "u1", "node-a", func(p *corev1.Pod) { p.Spec.ServiceAccountName = "admin" })), false, `pod ns/app runs as service account "admin", not "default"`},
		{"a pending pod", request(named("node-a", "ns", "app", "u1")),
			pods(nil, pod("ns", "app", "u1", "node-a", func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending })), true, ""},
		{"a failed pod", request(named("node-a", "ns", "app", "u1")),
			pods(nil, pod("ns", "app", "u1", "node-a", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed })), false, "pod ns/app has finished (Failed)"},
		{"a pod in phase Unknown", request(named("node-a", "ns", "app", "u1")),
			pods(nil, pod("ns", "app", "u1", "node-a", func(p *corev1.Pod) { p.Status.Phase = corev1.PodUnknown })), false, `pod ns/app is in phase "Unknown", neither Pending nor Running`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := Check(context.Background(), tc.req, tc.get)
			if err != nil {
				t.Fatal(err)
			}
			if v.Approve != tc.approve || !strings.Contains(v.Reason, tc.reason) || (tc.approve && v.Reason != "") {
				t.Errorf("Check = %+v, want approve=%v with a reason containing %q", v, tc.approve, tc.reason)
			}
		})
	}
}

// TestCheckWithoutAnAnswer: when the pod cannot be read, there is no decision, only an error
// that wraps the reader's.
func TestCheckWithoutAnAnswer(t *testing.T) {
	unavailable := errors.New("connection refused")
	v, err := Check(context.Background(), request(named("node-a", "ns", "app", "u1")), pods(unavailable))
	if !errors.Is(err, unavailable) || v.Approve || v.Reason != "" {
		t.Fatalf("Check = %+v, %v; want no verdict and the reader's error", v, err)
	}
}

func TestClaimOf(t *testing.T) {
	a := named("node-a", "ns", "app", "u1")
	a[PodServiceAccountUIDAnnotationKey] = "sa-uid"
	c, err := ClaimOf(request(a))
	if err != nil {
		t.Fatal(err)
	}
	if c != (Claim{NodeName: "node-a", PodNamespace: "ns", PodName: "app", PodUID: "u1", ServiceAccountName: "default", ServiceAccountUID: "sa-uid"}) {
		t.Errorf("ClaimOf = %+v", c)
	}
	if got, want := c.String(), "pod ns/app (uid u1, service account default) on node node-a"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	// A request made before the library named the service account still parses.
	old, err := ClaimOf(request(without(named("node-a", "ns", "app", "u1"), PodServiceAccountAnnotationKey)))
	if err != nil || old != (Claim{NodeName: "node-a", PodNamespace: "ns", PodName: "app", PodUID: "u1"}) {
		t.Errorf("ClaimOf an older request = %+v, %v", old, err)
	}
	if got, want := old.String(), "pod ns/app (uid u1) on node node-a"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
}

// TestPodRules: a driver's rules run only for a pod found live on its node, in order, and the
// first reason denies.
func TestPodRules(t *testing.T) {
	var ran []string
	rule := func(name, reason string) PodRule {
		return func(_ *cmapi.CertificateRequest, p *corev1.Pod) string {
			ran = append(ran, name+":"+p.Name)
			return reason
		}
	}
	live := pods(nil, pod("ns", "app", "u1", "node-a", nil))
	v, err := Check(context.Background(), request(named("node-a", "ns", "app", "u1")), live, rule("first", ""), rule("second", "the subject is not the pod's"), rule("third", ""))
	if err != nil || v.Approve || v.Reason != "the subject is not the pod's" {
		t.Errorf("Check = %+v, %v; want the second rule's denial", v, err)
	}
	if want := []string{"first:app", "second:app"}; !slices.Equal(ran, want) {
		t.Errorf("rules ran %v, want %v", ran, want)
	}
	ran = nil
	v, err = Check(context.Background(), request(named("node-b", "ns", "app", "u1")), live, rule("first", ""))
	if err != nil || v.Approve || len(ran) != 0 {
		t.Errorf("for a pod of another node: %+v, %v, rules ran %v; want a denial without them", v, err, ran)
	}
	ran = nil
	if v, err := Check(context.Background(), request(named("node-a", "ns", "app", "u1")), live, rule("first", "")); err != nil || !v.Approve || len(ran) != 1 {
		t.Errorf("with an approving rule: %+v, %v, rules ran %v", v, err, ran)
	}
}
