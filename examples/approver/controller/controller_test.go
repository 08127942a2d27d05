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

package controller

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"strings"
	"sync"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	cmfake "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/fake"
	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/cert-manager/csi-lib/approval"
)

func csrFor(t *testing.T, cn string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

// libraryRequest is a request as csi-lib creates it on node for pod ns/name (uid), for issuer.
func libraryRequest(t *testing.T, reqName, node, pod, uid, cn string, issuer cmmeta.IssuerReference) *cmapi.CertificateRequest {
	return &cmapi.CertificateRequest{
		ObjectMeta: metav1.ObjectMeta{Name: reqName, Namespace: "ns", Labels: map[string]string{nodeIDHashLabelKey: "h"}, Annotations: map[string]string{
			approval.NodeNameAnnotationKey: node, approval.PodNamespaceAnnotationKey: "ns", approval.PodNameAnnotationKey: pod, approval.PodUIDAnnotationKey: uid,
			approval.PodServiceAccountAnnotationKey: "app",
		}},
		Spec: cmapi.CertificateRequestSpec{Request: csrFor(t, cn), IssuerRef: issuer},
	}
}

// TestDecide: the controller writes Approved or Denied, with its reason, through the status
// subresource, by the check and the rules; it leaves decided requests and other issuers'
// requests alone.
func TestDecide(t *testing.T) {
	ca := cmmeta.IssuerReference{Name: "ca", Kind: "Issuer"}
	other := cmmeta.IssuerReference{Name: "other", Kind: "ClusterIssuer", Group: "cert-manager.io"}
	decided := libraryRequest(t, "decided", "node-b", "app", "u1", "app", ca)
	decided.Status.Conditions = []cmapi.CertificateRequestCondition{{Type: cmapi.CertificateRequestConditionDenied, Status: cmmeta.ConditionTrue, Reason: "someone"}}
	cm := cmfake.NewSimpleClientset(
		libraryRequest(t, "good", "node-a", "app", "u1", "app", ca),
		libraryRequest(t, "wrong-node", "node-b", "app", "u1", "app", ca),
		libraryRequest(t, "wrong-cn", "node-a", "app", "u1", "someone-else", ca),
		libraryRequest(t, "other-issuer", "node-b", "app", "u1", "app", other),
		decided,
	)
	kube := kubefake.NewSimpleClientset(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app", UID: types.UID("u1")},
		Spec:       corev1.PodSpec{NodeName: "node-a", ServiceAccountName: "app"},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	})
	c, err := New(Options{CertManager: cm, Kube: kube, Log: testr.New(t),
		Issuers: []cmmeta.IssuerReference{{Name: "ca"}}, Rules: []approval.PodRule{CommonNameIsPodName}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, _ := startInformers(t, c)

	for _, name := range []string{"good", "wrong-node", "wrong-cn", "decided"} {
		if err := c.decide(ctx, "ns/"+name); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	get := func(name string) *cmapi.CertificateRequest {
		r, err := cm.CertmanagerV1().CertificateRequests("ns").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for name, want := range map[string]struct {
		typ     cmapi.CertificateRequestConditionType
		message string
	}{
		"good":       {cmapi.CertificateRequestConditionApproved, "approved: the request names pod ns/app (uid u1, service account app) on node node-a"},
		"wrong-node": {cmapi.CertificateRequestConditionDenied, "denied: pod ns/app is bound to node node-a, not to node-b"},
		"wrong-cn":   {cmapi.CertificateRequestConditionDenied, `denied: the certificate request's common name is "someone-else", not the pod's name "app"`},
	} {
		conds := get(name).Status.Conditions
		if len(conds) != 1 || conds[0].Type != want.typ || conds[0].Status != cmmeta.ConditionTrue || conds[0].Reason != Reason || !strings.HasPrefix(conds[0].Message, want.message) {
			t.Errorf("%s: conditions %+v, want %s with a message starting %q", name, conds, want.typ, want.message)
		}
	}
	if conds := get("decided").Status.Conditions; len(conds) != 1 || conds[0].Reason != "someone" {
		t.Errorf("a decided request was decided again: %+v", conds)
	}
	if c.serves(get("other-issuer")) || !c.serves(get("good")) {
		t.Error("the issuer filter: want ca served (group and kind defaulted), other not")
	}
}

// startInformers runs the controller's informers until the test ends or stop is called, and
// waits for their caches; the caches stay readable after.
func startInformers(t *testing.T, c *Controller) (ctx context.Context, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, run := range c.run {
		wg.Add(1)
		go func() { defer wg.Done(); run(ctx.Done()) }()
	}
	stop = func() { cancel(); wg.Wait() }
	t.Cleanup(stop)
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		t.Fatal("the informers did not sync")
	}
	return ctx, stop
}

// TestPodCache: with PodCache, a pod the cache holds with the request's UID is not read from the
// apiserver; a pod the cache has not yet, or holds with another UID (deleted and created again
// under its name), is.
func TestPodCache(t *testing.T) {
	ca := cmmeta.IssuerReference{Name: "ca", Kind: "Issuer"}
	cm := cmfake.NewSimpleClientset(
		libraryRequest(t, "cached", "node-a", "app", "u1", "app", ca),
		libraryRequest(t, "new", "node-a", "new", "u2", "new", ca),
		libraryRequest(t, "recreated", "node-a", "app", "u3", "app", ca),
	)
	running := func(name, uid string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid)},
			Spec:       corev1.PodSpec{NodeName: "node-a", ServiceAccountName: "app"},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning},
		}
	}
	kube := kubefake.NewSimpleClientset(running("app", "u1"))
	c, err := New(Options{CertManager: cm, Kube: kube, Log: testr.New(t), PodCache: true})
	if err != nil {
		t.Fatal(err)
	}
	_, stopInformers := startInformers(t, c)
	stopInformers() // the caches stay as they are: what follows is not seen by them
	ctx := context.Background()
	gets := func() int {
		n := 0
		for _, a := range kube.Actions() {
			if a.GetVerb() == "get" && a.GetResource().Resource == "pods" {
				n++
			}
		}
		return n
	}
	if err := c.decide(ctx, "ns/cached"); err != nil || gets() != 0 {
		t.Fatalf("a cached pod: %v, %d reads from the apiserver", err, gets())
	}
	// A pod the cache does not hold, created after it stopped watching.
	if err := kube.Tracker().Add(running("new", "u2")); err != nil {
		t.Fatal(err)
	}
	if err := c.decide(ctx, "ns/new"); err != nil || gets() != 1 {
		t.Fatalf("a pod not yet cached: %v, %d reads", err, gets())
	}
	if err := c.decide(ctx, "ns/recreated"); err != nil || gets() != 2 {
		t.Fatalf("a pod cached with another UID: %v, %d reads", err, gets())
	}
	for name, want := range map[string]cmapi.CertificateRequestConditionType{
		"cached": cmapi.CertificateRequestConditionApproved, "new": cmapi.CertificateRequestConditionApproved,
		"recreated": cmapi.CertificateRequestConditionDenied, // the apiserver's app has uid u1, not u3
	} {
		r, err := cm.CertmanagerV1().CertificateRequests("ns").Get(ctx, name, metav1.GetOptions{})
		if err != nil || len(r.Status.Conditions) != 1 || r.Status.Conditions[0].Type != want {
			t.Errorf("%s: %v, %+v; want %s", name, err, r.Status.Conditions, want)
		}
	}
}
