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
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cert-manager/csi-lib/examples/csi-driver/plugin"
	"github.com/cert-manager/csi-lib/test/testkit"
)

// The node's requests are signed by one of two signers at a time: cert-manager's own
// controllers (hack/cm-controllers: its approver, CA issuer and Issuer and ClusterIssuer
// controllers), from a CA Issuer and a CA ClusterIssuer on the cluster's CA, or the program's
// own signer (cluster.go), which can hold a pod's requests or fail every request. Every story
// that cert-manager can tell runs on cert-manager.

const (
	// issuerName is the test driver's default issuer (./testdriver's --issuer-name), a CA Issuer.
	issuerName = "e2e-ca"
	// caSecretName is the CA Issuer's secret in the stories' namespace, and the CA
	// ClusterIssuer's in clusterResourceNamespace.
	caSecretName = "e2e-ca-key-pair"
	// clusterIssuerName is the CA ClusterIssuer.
	clusterIssuerName = "e2e-cluster-ca"
	// clusterResourceNamespace is where cert-manager reads ClusterIssuers' secrets.
	clusterResourceNamespace = "cert-manager"
	// issuerKindAttribute and issuerNameAttribute are the example driver's volume attributes
	// naming a pod's issuer.
	issuerKindAttribute = plugin.IssuerKindAttribute
	issuerNameAttribute = plugin.IssuerNameAttribute
)

// clusterIssuerAttributes make a pod's requests name the CA ClusterIssuer.
var clusterIssuerAttributes = map[string]string{issuerKindAttribute: "ClusterIssuer", issuerNameAttribute: clusterIssuerName}

// createIssuers creates the CA Issuer (the driver's default issuer) and the CA ClusterIssuer,
// each from a secret holding the cluster's CA, secrets first (cert-manager backs off a failed
// Issuer sync for 5 s and more).
func (c *cluster) createIssuers(ctx context.Context) error {
	if _, err := c.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: clusterResourceNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	for _, ns := range []string{namespace, clusterResourceNamespace} {
		secret, err := caSecret(ns, c.ca)
		if err != nil {
			return err
		}
		if _, err := c.kube.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	spec := testkit.CAIssuerSpec(caSecretName)
	if _, err := c.cm.CertmanagerV1().Issuers(namespace).Create(ctx, &cmapi.Issuer{ObjectMeta: metav1.ObjectMeta{Name: issuerName, Namespace: namespace}, Spec: spec}, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err := c.cm.CertmanagerV1().ClusterIssuers().Create(ctx, &cmapi.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: clusterIssuerName}, Spec: spec}, metav1.CreateOptions{})
	return err
}

// caSecret is a CA Issuer's secret holding ca.
func caSecret(ns string, ca *testkit.CA) (*corev1.Secret, error) {
	return testkit.CAIssuerSecret(ns, caSecretName, ca)
}

// useCertManager hands signing to cert-manager's controllers and waits until both issuers are
// Ready.
func (c *cluster) useCertManager(ctx context.Context) error {
	c.mu.Lock()
	c.certManager = true
	c.mu.Unlock()
	if err := c.startCertManager(); err != nil {
		return err
	}
	start := time.Now()
	err := poll(ctx, "cert-manager to have the Issuer and the ClusterIssuer Ready", 100*time.Millisecond, time.Minute, func() (bool, error) {
		issuer, err := c.cm.CertmanagerV1().Issuers(namespace).Get(ctx, issuerName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		clusterIssuer, err := c.cm.CertmanagerV1().ClusterIssuers().Get(ctx, clusterIssuerName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return testkit.IssuerReady(issuer.Status.Conditions) && testkit.IssuerReady(clusterIssuer.Status.Conditions), nil
	})
	if err == nil {
		logf("cert-manager signs: its Issuer and ClusterIssuer Ready %v after its start", time.Since(start).Round(10*time.Millisecond))
	}
	return err
}

// useInProcessSigner hands signing back to the program's own signer.
func (c *cluster) useInProcessSigner() {
	c.stopCertManager()
	c.mu.Lock()
	c.certManager = false
	c.mu.Unlock()
	logf("the in-process signer signs")
}

func (c *cluster) usesCertManager() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.certManager
}

// startCertManager starts cert-manager's controllers (CM_CONTROLLERS, built by `make
// cm-controllers`) as a process of the node, by PID: the named ones, or all four.
func (c *cluster) startCertManager(controllers ...string) error {
	var args []string
	if len(controllers) > 0 {
		args = append(args, "-controllers", strings.Join(controllers, ","))
	}
	return c.startCertManagerWith(args...)
}

// startCertManagerApprovingFor starts all four of cert-manager's controllers, its approver
// approving only for the issuers that signerNames cover, as the cert-manager chart's
// approveSignerNames lets it (hack/cm-controllers's -approve-signer-names).
func (c *cluster) startCertManagerApprovingFor(signerNames ...string) error {
	return c.startCertManagerWith("-approve-signer-names", strings.Join(signerNames, ","))
}

func (c *cluster) startCertManagerWith(args ...string) error {
	args = append([]string{"-kubeconfig", c.kubeconfig, "-cluster-resource-namespace", clusterResourceNamespace}, args...)
	return c.n.startProcess("cm-controllers", os.Getenv("CM_CONTROLLERS"), args...)
}

// stopCertManager stops cert-manager's controllers, by PID; their requests stay as they are.
func (c *cluster) stopCertManager() {
	if p := c.n.processNamed("cm-controllers"); p != nil {
		c.n.stopProcess(p)
		logf("cert-manager's controllers stopped (pid %d)", p.cmd.Process.Pid)
	}
}

// signerOutage starts an outage of whichever signer signs and returns the function that ends
// it: with cert-manager, the CA Issuer's secret is deleted (cert-manager keeps the Issuer not
// Ready and its requests pending) and created again as it was; with the program's own signer,
// every request fails until then.
func (c *cluster) signerOutage(ctx context.Context) (end func() error, err error) {
	if !c.usesCertManager() {
		stop := c.failAll()
		return func() error { stop(); return nil }, nil
	}
	secrets := c.kube.CoreV1().Secrets(namespace)
	saved, err := secrets.Get(ctx, caSecretName, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if err := secrets.Delete(ctx, caSecretName, metav1.DeleteOptions{}); err != nil {
		return nil, err
	}
	logf("outage: the CA Issuer's secret deleted")
	return func() error {
		restored := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: saved.Name, Namespace: saved.Namespace}, Type: saved.Type, Data: saved.Data}
		_, err := secrets.Create(ctx, restored, metav1.CreateOptions{})
		logf("outage over: the CA Issuer's secret created again (%v)", err)
		return err
	}, nil
}

// cmApprovedMessage is the message of cert-manager's approver on the Approved condition.
const cmApprovedMessage = "Certificate request has been approved by cert-manager.io"

// signedByCertManager checks that the pod has requests, that each names the issuer of that kind
// and name, and that each was approved by cert-manager's approver and issued.
func (c *cluster) signedByCertManager(ctx context.Context, pod, kind, name string) error {
	list, err := c.cm.CertmanagerV1().CertificateRequests(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	n := 0
	for _, req := range list.Items {
		if len(req.OwnerReferences) == 0 || req.OwnerReferences[0].Name != pod {
			continue
		}
		n++
		if req.Spec.IssuerRef.Kind != kind || req.Spec.IssuerRef.Name != name {
			return fmt.Errorf("request %s names %s %s, want %s %s", req.Name, req.Spec.IssuerRef.Kind, req.Spec.IssuerRef.Name, kind, name)
		}
		approved, issued := false, false
		for _, cond := range req.Status.Conditions {
			approved = approved || (cond.Type == cmapi.CertificateRequestConditionApproved && cond.Message == cmApprovedMessage)
			issued = issued || (cond.Type == cmapi.CertificateRequestConditionReady && cond.Reason == cmapi.CertificateRequestReasonIssued)
		}
		if !approved || !issued {
			return fmt.Errorf("request %s: approved by cert-manager %t, issued %t (%+v)", req.Name, approved, issued, req.Status.Conditions)
		}
	}
	if n == 0 {
		return fmt.Errorf("no request of pod %s", pod)
	}
	return nil
}

// storyCARotation is story 9: the CA Issuer's secret is replaced by a new CA while a pod renews
// every 6 s. The next renewal writes the new chain and the new ca.crt as one set: the container
// never sees a key that does not match its chain, nor a chain that does not verify against the
// ca.crt beside it, and its volume ends up with the new CA.
func (c *cluster) storyCARotation(ctx context.Context) (r result) {
	r.story = "9 CA rotation"
	const pod = "rotating"
	if err := c.createPod(ctx, pod, 15*time.Second, 9*time.Second, nil); err != nil {
		r.detail = err.Error()
		return r
	}
	defer func() { _ = c.deletePod(ctx, pod) }()
	_, before, bad, err := c.waitSerials(ctx, pod, "two certificates from the first CA", 2, time.Minute)
	if err != nil || bad != "" {
		r.detail = fmt.Sprintf("before the rotation: %v %s", err, bad)
		return r
	}
	next, err := testkit.NewCA("e2e-ca-rotated")
	if err != nil {
		r.detail = err.Error()
		return r
	}
	secret, err := caSecret(namespace, next)
	if err != nil {
		r.detail = err.Error()
		return r
	}
	rotated := time.Now()
	if _, err := c.kube.CoreV1().Secrets(namespace).Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		r.detail = err.Error()
		return r
	}
	dataDir := filepath.Join(c.volumeDirOf(pod), "data")
	var switched time.Duration
	err = poll(ctx, "the volume's ca.crt to be the new CA", 50*time.Millisecond, time.Minute, func() (bool, error) {
		caPEM, err := os.ReadFile(filepath.Join(dataDir, "ca.crt"))
		if err == nil && bytes.Equal(caPEM, next.CertPEM) {
			switched = time.Since(rotated)
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		r.detail = err.Error()
		return r
	}
	_, all, bad, err := c.waitSerials(ctx, pod, "a certificate from the new CA in the container", len(before)+2, time.Minute)
	switch {
	case err != nil:
		r.detail = err.Error()
	case bad != "":
		r.detail = "the container saw " + bad
	default:
		key, _ := os.ReadFile(filepath.Join(dataDir, "tls.key"))
		chain, _ := os.ReadFile(filepath.Join(dataDir, "tls.crt"))
		if _, err := testkit.VerifyKeyPair(key, chain, next.CertPEM, time.Now()); err != nil {
			r.detail = fmt.Sprintf("the volume after the rotation: %v", err)
			return r
		}
		r.ok = true
		r.detail = fmt.Sprintf("the volume had the new CA's chain and ca.crt %v after the secret was replaced; the container saw %d certificates, every set consistent and verifying to its ca.crt",
			switched.Round(10*time.Millisecond), len(all))
	}
	return r
}

// storyDenial is story 10: cert-manager runs without its approver; the pod's request is denied
// as an approver denies it (a Denied condition through the status subresource, which
// cert-manager's webhook restricts to approvers in a cluster); the publish fails and the pod's
// events say it was denied; once the approver is back, kubelet's retry creates a new request,
// which cert-manager approves and signs.
func (c *cluster) storyDenial(ctx context.Context) (r result) {
	r.story = "10 request denied"
	const pod = "denied"
	c.stopCertManager()
	defer func() {
		if c.n.processNamed("cm-controllers") == nil {
			_ = c.startCertManager()
		}
	}()
	if err := c.startCertManager("certificaterequests-issuer-ca", "issuers", "clusterissuers"); err != nil {
		r.detail = err.Error()
		return r
	}
	if err := c.createPod(ctx, pod, time.Hour, 0, nil); err != nil {
		r.detail = err.Error()
		return r
	}
	defer func() { _ = c.deletePod(ctx, pod) }()
	var denied string
	err := poll(ctx, "the pod's request, to deny it", 50*time.Millisecond, time.Minute, func() (bool, error) {
		list, err := c.cm.CertmanagerV1().CertificateRequests(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for i := range list.Items {
			req := &list.Items[i]
			if len(req.OwnerReferences) == 0 || req.OwnerReferences[0].Name != pod {
				continue
			}
			req.Status.Conditions = append(req.Status.Conditions, cmapi.CertificateRequestCondition{
				Type: cmapi.CertificateRequestConditionDenied, Status: cmmeta.ConditionTrue,
				Reason: "PolicyDenied", Message: "the e2e policy denies this pod",
			})
			if _, err := c.cm.CertmanagerV1().CertificateRequests(namespace).UpdateStatus(ctx, req, metav1.UpdateOptions{}); err != nil {
				return false, err
			}
			denied = req.Name
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		r.detail = err.Error()
		return r
	}
	var reasons []string
	err = poll(ctx, "a CertificateRequestFailed event naming the denial", 100*time.Millisecond, time.Minute, func() (bool, error) {
		evs, err := c.kube.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
		if err != nil {
			return false, err
		}
		reasons = reasons[:0]
		found := false
		for _, e := range evs.Items {
			reasons = append(reasons, e.Reason)
			found = found || (e.Reason == "CertificateRequestFailed" && strings.Contains(e.Message, "has been denied by the approval plugin: the e2e policy denies this pod"))
		}
		return found, nil
	})
	if err != nil {
		r.detail = fmt.Sprintf("%v; events %v", err, reasons)
		return r
	}
	c.stopCertManager()
	if err := c.startCertManager(); err != nil {
		r.detail = err.Error()
		return r
	}
	back := time.Now()
	if _, _, bad, err := c.waitSerials(ctx, pod, "the certificate after the approver is back", 1, 3*time.Minute); err != nil || bad != "" {
		r.detail = fmt.Sprintf("%v %s", err, bad)
		return r
	}
	list, err := c.cm.CertmanagerV1().CertificateRequests(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		r.detail = err.Error()
		return r
	}
	var names []string
	signed := 0
	for _, req := range list.Items {
		if len(req.OwnerReferences) == 0 || req.OwnerReferences[0].Name != pod {
			continue
		}
		names = append(names, req.Name)
		for _, cond := range req.Status.Conditions {
			if req.Name != denied && cond.Type == cmapi.CertificateRequestConditionApproved && cond.Message == cmApprovedMessage && req.Status.Certificate != nil {
				signed++
			}
		}
	}
	if !slices.Contains(names, denied) || len(names) != 2 || signed != 1 {
		r.detail = fmt.Sprintf("the pod's requests: %v (%d approved by cert-manager and signed), want the denied %s and one signed", names, signed, denied)
		return r
	}
	r.ok = true
	r.detail = fmt.Sprintf("the publish failed and the pod's event said the request was denied; with the approver back, kubelet's retry created one new request, signed: certificate in the container %v later",
		time.Since(back).Round(100*time.Millisecond))
	return r
}
