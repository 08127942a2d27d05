// Package util helps drivers' tests play the signer's part: wait for the CertificateRequest the
// library creates and issue, deny or fail it through a (usually fake) cert-manager clientset.
//
// The helpers report problems with t.Errorf, never t.Fatalf, so they may run in a goroutine
// other than the test's.
package util

import (
	"context"
	"fmt"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/cert-manager/csi-lib/internal/testkit"
)

// WaitAndGetOneCertificateRequestInNamespace waits until exactly one CertificateRequest exists
// in namespace and returns it. It watches rather than polls; it gives up when ctx ends.
func WaitAndGetOneCertificateRequestInNamespace(ctx context.Context, client cmclient.Interface, namespace string) (*cmapi.CertificateRequest, error) {
	reqs := client.CertmanagerV1().CertificateRequests(namespace)
	// Watch first, then list, so no creation falls between the two.
	w, err := reqs.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	for {
		list, err := reqs.List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		if len(list.Items) == 1 {
			return &list.Items[0], nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for one CertificateRequest in %q (there are %d): %w", namespace, len(list.Items), ctx.Err())
		case _, ok := <-w.ResultChan():
			if !ok {
				return nil, fmt.Errorf("watch of CertificateRequests in %q closed", namespace)
			}
		}
	}
}

// IssueOneRequest waits for the single CertificateRequest in namespace and marks it issued with
// cert and ca.
func IssueOneRequest(ctx context.Context, t *testing.T, client cmclient.Interface, namespace string, cert, ca []byte) {
	req, err := WaitAndGetOneCertificateRequestInNamespace(ctx, client, namespace)
	if err != nil {
		t.Errorf("IssueOneRequest: %v", err)
		return
	}
	if err := issue(ctx, client, req, cert, ca); err != nil {
		t.Errorf("IssueOneRequest: %v", err)
	}
}

// IssueAllRequests marks every CertificateRequest in namespace issued with cert and ca, as they
// appear, until ctx ends.
func IssueAllRequests(ctx context.Context, t *testing.T, client cmclient.Interface, namespace string, cert, ca []byte) {
	reqs := client.CertmanagerV1().CertificateRequests(namespace)
	for ctx.Err() == nil {
		w, err := reqs.Watch(ctx, metav1.ListOptions{})
		if err != nil {
			if ctx.Err() == nil {
				t.Errorf("IssueAllRequests: %v", err)
			}
			return
		}
		list, err := reqs.List(ctx, metav1.ListOptions{})
		if err == nil {
			for i := range list.Items {
				issueIfPending(ctx, t, client, &list.Items[i], cert, ca)
			}
		}
		for open := true; open; {
			select {
			case <-ctx.Done():
				w.Stop()
				return
			case ev, ok := <-w.ResultChan():
				open = ok
				if req, isReq := ev.Object.(*cmapi.CertificateRequest); ok && isReq && (ev.Type == watch.Added || ev.Type == watch.Modified) {
					issueIfPending(ctx, t, client, req, cert, ca)
				}
			}
		}
		w.Stop()
	}
}

func issueIfPending(ctx context.Context, t *testing.T, client cmclient.Interface, req *cmapi.CertificateRequest, cert, ca []byte) {
	if testkit.IsFinished(req) || req.DeletionTimestamp != nil {
		return
	}
	if err := issue(ctx, client, req, cert, ca); err != nil && ctx.Err() == nil {
		// A request deleted meanwhile (the manager cleaning up) is not an error.
		if _, getErr := client.CertmanagerV1().CertificateRequests(req.Namespace).Get(ctx, req.Name, metav1.GetOptions{}); getErr == nil {
			t.Errorf("IssueAllRequests: %v", err)
		}
	}
}

func issue(ctx context.Context, client cmclient.Interface, req *cmapi.CertificateRequest, cert, ca []byte) error {
	req = req.DeepCopy()
	req.Status.Certificate = cert
	req.Status.CA = ca
	_, err := testkit.SetConditions(ctx, client, req, cmapi.CertificateRequestCondition{
		Type: cmapi.CertificateRequestConditionReady, Status: cmmeta.ConditionTrue, Reason: cmapi.CertificateRequestReasonIssued, Message: "issued by test/util",
	})
	return err
}

// SetCertificateRequestConditions waits for the single CertificateRequest in namespace and sets
// the given conditions on it.
func SetCertificateRequestConditions(ctx context.Context, t *testing.T, client cmclient.Interface, namespace string, conditions ...cmapi.CertificateRequestCondition) {
	req, err := WaitAndGetOneCertificateRequestInNamespace(ctx, client, namespace)
	if err != nil {
		t.Errorf("SetCertificateRequestConditions: %v", err)
		return
	}
	if _, err := testkit.SetConditions(ctx, client, req, conditions...); err != nil {
		t.Errorf("SetCertificateRequestConditions: %v", err)
	}
}

// SetOneCertificateRequestCondition is SetCertificateRequestConditions with one condition.
func SetOneCertificateRequestCondition(ctx context.Context, t *testing.T, client cmclient.Interface, namespace string, condition cmapi.CertificateRequestCondition) {
	SetCertificateRequestConditions(ctx, t, client, namespace, condition)
}
