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

// Package util helps drivers' tests play the signer's part: wait for the CertificateRequest the
// library creates and issue, deny or fail it through a (usually fake) cert-manager clientset.
//
// They behave as upstream csi-lib's: they poll the API every 50 ms and write the objects
// upstream's write, so drivers' tests keep passing. The helpers report problems with t.Errorf,
// never t.Fatalf, so they may run in a goroutine other than the test's.
package util

import (
	"context"
	"errors"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// pollInterval is how often the helpers list requests, as upstream's.
const pollInterval = 50 * time.Millisecond

// WaitAndGetOneCertificateRequestInNamespace lists the requests in namespace at once and then
// every 50 ms until there is exactly one, which it returns. It fails with "more than one
// CertificateRequest created" as soon as there are two or more, and with the context's (or
// List's) error as it is.
func WaitAndGetOneCertificateRequestInNamespace(ctx context.Context, client cmclient.Interface, namespace string) (*cmapi.CertificateRequest, error) {
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		list, err := client.CertmanagerV1().CertificateRequests(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		switch {
		case len(list.Items) == 1:
			return &list.Items[0], nil
		case len(list.Items) > 1:
			return nil, errors.New("more than one CertificateRequest created")
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-ticker.C:
		}
	}
}

// IssueOneRequest waits for the single CertificateRequest in namespace and marks it issued: it
// appends a Ready condition (True, reason Issued, message "Issued by test") and sets cert and
// ca. Problems are reported with t.Errorf.
func IssueOneRequest(ctx context.Context, t *testing.T, client cmclient.Interface, namespace string, cert, ca []byte) {
	if err := func() error {
		req, err := WaitAndGetOneCertificateRequestInNamespace(ctx, client, namespace)
		if err != nil {
			return err
		}
		return issue(ctx, client, req, cert, ca)
	}(); err != nil {
		t.Errorf("error automatically issuing certificaterequest: %v", err)
	}
}

// IssueAllRequests marks every CertificateRequest in namespace that has no certificate issued
// (as IssueOneRequest does), every 50 ms until ctx ends. An error is reported with t.Errorf and
// ends it; the end of ctx does not.
func IssueAllRequests(ctx context.Context, t *testing.T, client cmclient.Interface, namespace string, cert, ca []byte) {
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		if err := issueAll(ctx, client, namespace, cert, ca); err != nil {
			if ctx.Err() == nil {
				t.Errorf("error automatically issuing certificaterequest: %v", err)
			}
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

func issueAll(ctx context.Context, client cmclient.Interface, namespace string, cert, ca []byte) error {
	list, err := client.CertmanagerV1().CertificateRequests(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range list.Items {
		if len(list.Items[i].Status.Certificate) > 0 {
			continue
		}
		if err := issue(ctx, client, &list.Items[i], cert, ca); err != nil {
			return err
		}
	}
	return nil
}

func issue(ctx context.Context, client cmclient.Interface, req *cmapi.CertificateRequest, cert, ca []byte) error {
	req = req.DeepCopy()
	req.Status.Conditions = append(req.Status.Conditions, cmapi.CertificateRequestCondition{
		Type:    cmapi.CertificateRequestConditionReady,
		Status:  cmmeta.ConditionTrue,
		Reason:  cmapi.CertificateRequestReasonIssued,
		Message: "Issued by test",
	})
	req.Status.Certificate = cert
	req.Status.CA = ca
	_, err := client.CertmanagerV1().CertificateRequests(req.Namespace).UpdateStatus(ctx, req, metav1.UpdateOptions{})
	return err
}

// SetCertificateRequestConditions waits for the single CertificateRequest in namespace and sets
// the given conditions on it: each replaces the first existing condition of its type, or is
// appended. The conditions are stored as given. Problems are reported with t.Errorf.
func SetCertificateRequestConditions(ctx context.Context, t *testing.T, client cmclient.Interface, namespace string, conditions ...cmapi.CertificateRequestCondition) {
	req, err := WaitAndGetOneCertificateRequestInNamespace(ctx, client, namespace)
	if err != nil {
		t.Errorf("error setting certificaterequest conditions: %v", err)
		return
	}
	req = req.DeepCopy()
	for _, c := range conditions {
		replaced := false
		for i := range req.Status.Conditions {
			if req.Status.Conditions[i].Type == c.Type {
				req.Status.Conditions[i] = c
				replaced = true
				break
			}
		}
		if !replaced {
			req.Status.Conditions = append(req.Status.Conditions, c)
		}
	}
	if _, err := client.CertmanagerV1().CertificateRequests(namespace).UpdateStatus(ctx, req, metav1.UpdateOptions{}); err != nil {
		t.Errorf("error setting certificaterequest conditions: %v", err)
	}
}

// SetOneCertificateRequestCondition is SetCertificateRequestConditions with one condition.
func SetOneCertificateRequestCondition(ctx context.Context, t *testing.T, client cmclient.Interface, namespace string, condition cmapi.CertificateRequestCondition) {
	SetCertificateRequestConditions(ctx, t, client, namespace, condition)
}
