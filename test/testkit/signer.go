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

package testkit

import (
	"context"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultDuration is the certificate lifetime used when a request does not ask for one.
const DefaultDuration = time.Hour

// IsFinished reports whether a request is issued, denied or failed.
func IsFinished(req *cmapi.CertificateRequest) bool {
	for _, c := range req.Status.Conditions {
		switch {
		case c.Type == cmapi.CertificateRequestConditionReady && c.Status == cmmeta.ConditionTrue:
			return true
		case c.Type == cmapi.CertificateRequestConditionReady && c.Reason == cmapi.CertificateRequestReasonFailed:
			return true
		case c.Type == cmapi.CertificateRequestConditionDenied && c.Status == cmmeta.ConditionTrue:
			return true
		}
	}
	return false
}

// Issue approves and signs req with ca (valid from notBefore for the requested duration, or
// DefaultDuration) and writes the status through client.
func Issue(ctx context.Context, client cmclient.Interface, ca *CA, req *cmapi.CertificateRequest, notBefore time.Time) (*cmapi.CertificateRequest, error) {
	duration := DefaultDuration
	if req.Spec.Duration != nil && req.Spec.Duration.Duration > 0 {
		duration = req.Spec.Duration.Duration
	}
	cert, err := ca.Sign(req.Spec.Request, notBefore, duration)
	if err != nil {
		return nil, err
	}
	req = req.DeepCopy()
	req.Status.Certificate = cert
	req.Status.CA = ca.CertPEM
	return SetConditions(ctx, client, req,
		cmapi.CertificateRequestCondition{Type: cmapi.CertificateRequestConditionApproved, Status: cmmeta.ConditionTrue, Reason: "Approved", Message: "approved by the test signer"},
		cmapi.CertificateRequestCondition{Type: cmapi.CertificateRequestConditionReady, Status: cmmeta.ConditionTrue, Reason: cmapi.CertificateRequestReasonIssued, Message: "issued by the test signer"},
	)
}

// SetConditions sets (adds or replaces by type) conditions on req and writes its status,
// including any Certificate and CA already set on req.
func SetConditions(ctx context.Context, client cmclient.Interface, req *cmapi.CertificateRequest, conds ...cmapi.CertificateRequestCondition) (*cmapi.CertificateRequest, error) {
	req = req.DeepCopy()
	now := metav1.Now()
	for _, c := range conds {
		c.LastTransitionTime = &now
		replaced := false
		for i := range req.Status.Conditions {
			if req.Status.Conditions[i].Type == c.Type {
				req.Status.Conditions[i] = c
				replaced = true
			}
		}
		if !replaced {
			req.Status.Conditions = append(req.Status.Conditions, c)
		}
	}
	return client.CertmanagerV1().CertificateRequests(req.Namespace).UpdateStatus(ctx, req, metav1.UpdateOptions{})
}

// Denied is the condition a signer sets to deny a request.
func Denied(message string) cmapi.CertificateRequestCondition {
	return cmapi.CertificateRequestCondition{Type: cmapi.CertificateRequestConditionDenied, Status: cmmeta.ConditionTrue, Reason: "Denied", Message: message}
}

// Failed is the condition a signer sets when issuance failed.
func Failed(message string) cmapi.CertificateRequestCondition {
	return cmapi.CertificateRequestCondition{Type: cmapi.CertificateRequestConditionReady, Status: cmmeta.ConditionFalse, Reason: cmapi.CertificateRequestReasonFailed, Message: message}
}

// CAIssuerSecret is the secret of a cert-manager CA Issuer (or ClusterIssuer) that signs with
// ca: a kubernetes.io/tls secret of its certificate and private key.
func CAIssuerSecret(namespace, name string, ca *CA) (*corev1.Secret, error) {
	key, err := ca.PrivateKeyPEM()
	if err != nil {
		return nil, err
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: ca.CertPEM, corev1.TLSPrivateKeyKey: key},
	}, nil
}

// CAIssuerSpec is the spec of a cert-manager CA Issuer (or ClusterIssuer) signing from the
// secret secretName.
func CAIssuerSpec(secretName string) cmapi.IssuerSpec {
	return cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{CA: &cmapi.CAIssuer{SecretName: secretName}}}
}

// IssuerReady reports whether an Issuer's or ClusterIssuer's conditions say Ready.
func IssuerReady(conds []cmapi.IssuerCondition) bool {
	for _, c := range conds {
		if c.Type == cmapi.IssuerConditionReady {
			return c.Status == cmmeta.ConditionTrue
		}
	}
	return false
}
