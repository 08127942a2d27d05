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

package util

import (
	"context"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/fake"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func request(name string, conds ...cmapi.CertificateRequestCondition) *cmapi.CertificateRequest {
	return &cmapi.CertificateRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Status:     cmapi.CertificateRequestStatus{Conditions: conds},
	}
}

func get(t *testing.T, client *fake.Clientset, name string) *cmapi.CertificateRequest {
	t.Helper()
	req, err := client.CertmanagerV1().CertificateRequests("ns").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func TestWaitAndGetOneFailsOnTwo(t *testing.T) {
	client := fake.NewSimpleClientset(request("a"), request("b"))
	_, err := WaitAndGetOneCertificateRequestInNamespace(context.Background(), client, "ns")
	if err == nil || err.Error() != "more than one CertificateRequest created" {
		t.Fatalf("err = %v, want upstream's \"more than one CertificateRequest created\"", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := WaitAndGetOneCertificateRequestInNamespace(ctx, fake.NewSimpleClientset(), "ns"); err != context.Canceled {
		t.Fatalf("err = %v, want the bare context error", err)
	}
	got, err := WaitAndGetOneCertificateRequestInNamespace(context.Background(), fake.NewSimpleClientset(request("a")), "ns")
	if err != nil || got.Name != "a" {
		t.Fatalf("got %v, %v", got, err)
	}
}

func TestIssueOneRequestAppendsUpstreamsCondition(t *testing.T) {
	existing := cmapi.CertificateRequestCondition{Type: cmapi.CertificateRequestConditionReady, Status: cmmeta.ConditionFalse, Reason: "Pending"}
	client := fake.NewSimpleClientset(request("a", existing))
	IssueOneRequest(context.Background(), t, client, "ns", []byte("cert"), []byte("ca"))
	req := get(t, client, "a")
	want := []cmapi.CertificateRequestCondition{existing, {
		Type: cmapi.CertificateRequestConditionReady, Status: cmmeta.ConditionTrue,
		Reason: cmapi.CertificateRequestReasonIssued, Message: "Issued by test",
	}}
	if len(req.Status.Conditions) != 2 || req.Status.Conditions[0] != want[0] || req.Status.Conditions[1] != want[1] {
		t.Errorf("conditions = %+v, want %+v (appended, no LastTransitionTime)", req.Status.Conditions, want)
	}
	if string(req.Status.Certificate) != "cert" || string(req.Status.CA) != "ca" {
		t.Errorf("status = %q %q", req.Status.Certificate, req.Status.CA)
	}
}

func TestIssueAllRequestsIssuesEveryRequestWithoutCertificate(t *testing.T) {
	denied := cmapi.CertificateRequestCondition{Type: cmapi.CertificateRequestConditionDenied, Status: cmmeta.ConditionTrue}
	done := request("done")
	done.Status.Certificate = []byte("old")
	client := fake.NewSimpleClientset(request("pending"), request("denied", denied), done)
	ctx, cancel := context.WithCancel(context.Background())
	finished := make(chan struct{})
	go func() { IssueAllRequests(ctx, t, client, "ns", []byte("cert"), nil); close(finished) }()
	deadline := time.Now().Add(10 * time.Second)
	for len(get(t, client, "pending").Status.Certificate) == 0 || len(get(t, client, "denied").Status.Certificate) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("requests not issued")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-finished // the end of ctx is not an error (t.Errorf would fail this test)
	if string(get(t, client, "done").Status.Certificate) != "old" {
		t.Error("a request with a certificate was issued again")
	}
	if n := len(get(t, client, "denied").Status.Conditions); n != 2 {
		t.Errorf("denied request has %d conditions, want its Denied plus the appended Ready", n)
	}
}

func TestSetConditionsReplacesFirstOfTypeOrAppends(t *testing.T) {
	ready := cmapi.CertificateRequestCondition{Type: cmapi.CertificateRequestConditionReady, Status: cmmeta.ConditionFalse, Reason: "Pending"}
	client := fake.NewSimpleClientset(request("a", ready))
	newReady := cmapi.CertificateRequestCondition{Type: cmapi.CertificateRequestConditionReady, Status: cmmeta.ConditionFalse, Reason: "Failed", Message: "m"}
	approved := cmapi.CertificateRequestCondition{Type: cmapi.CertificateRequestConditionApproved, Status: cmmeta.ConditionTrue}
	SetCertificateRequestConditions(context.Background(), t, client, "ns", newReady, approved)
	got := get(t, client, "a").Status.Conditions
	if len(got) != 2 || got[0] != newReady || got[1] != approved {
		t.Errorf("conditions = %+v", got)
	}
	SetOneCertificateRequestCondition(context.Background(), t, client, "ns", ready)
	if got := get(t, client, "a").Status.Conditions; len(got) != 2 || got[0] != ready {
		t.Errorf("after SetOne: %+v", got)
	}
}
