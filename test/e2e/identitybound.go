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
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/cert-manager/csi-lib/approval"
	"github.com/cert-manager/csi-lib/examples/approver/controller"
	"github.com/cert-manager/csi-lib/examples/csi-driver/plugin"
)

// identityVolume is one volume of story 16's pod: its attributes, and the DNS names and the
// issuer its certificate must have.
type identityVolume struct {
	name       string
	attrs      map[string]string
	dnsNames   []string
	issuerKind string
	issuerName string
}

// storyIdentityBound is story 16: identity-bound issuance (docs/node-bound.md). With the example
// approver's pod-spec rule (the driver's own generator on what kubelet sends, rebuilt from the
// pod) and the node-bound policy, a pod with two volumes of the driver, of two issuers and other
// names, gets both certificates, each with the names its volume asks for, from its issuer; a
// request made by hand with this node's driver token, the pod's own request re-signed with one
// more DNS name, and another asking for a longer life, are denied, naming what is wrong.
func (c *cluster) storyIdentityBound(ctx context.Context) (r result) {
	r.story = "16 identity-bound issuance"
	fail := func(err error) result {
		r.detail = err.Error()
		return r
	}
	restore, err := c.useNodeBoundApproval(ctx)
	defer restore()
	if err != nil {
		return fail(err)
	}

	const pod = "ib-two-volumes"
	vols := []identityVolume{
		{name: "tls", attrs: map[string]string{plugin.DNSNamesAttribute: "${POD_NAME}.${POD_NAMESPACE}.svc"},
			dnsNames: []string{pod + "." + namespace + ".svc"}, issuerKind: "Issuer", issuerName: issuerName},
		{name: "admin", attrs: map[string]string{plugin.IssuerKindAttribute: "ClusterIssuer", plugin.IssuerNameAttribute: clusterIssuerName,
			plugin.DNSNamesAttribute: "admin.${POD_NAMESPACE}.example", plugin.DurationAttribute: "30m"},
			dnsNames: []string{"admin." + namespace + ".example"}, issuerKind: "ClusterIssuer", issuerName: clusterIssuerName},
	}
	p := certPod(pod, time.Hour)
	p.Spec.Containers, p.Spec.Volumes = nil, nil
	for _, v := range vols {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{
			Name: "checker-" + v.name, Image: imageName, ImagePullPolicy: corev1.PullNever, Command: []string{"/checker", "/certs"},
			VolumeMounts: []corev1.VolumeMount{{Name: v.name, MountPath: "/certs", ReadOnly: true}},
		})
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: v.name, VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
			Driver: driverName, ReadOnly: ptr.To(true), VolumeAttributes: v.attrs,
		}}})
	}
	start := time.Now()
	if _, err := c.kube.CoreV1().Pods(namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return fail(err)
	}
	defer func() { _ = c.deletePod(ctx, pod) }()
	for _, v := range vols {
		lines, err := c.waitLinesIn(ctx, namespace, pod, "checker-"+v.name, v.name+"'s certificate in the container", 2*time.Minute, func(l []logLine) bool {
			s, bad := okSerials(l)
			return len(s) > 0 || bad != ""
		})
		if _, bad := okSerials(lines); err != nil || bad != "" {
			return fail(fmt.Errorf("volume %s: %v %s", v.name, err, bad))
		}
	}
	inContainers := time.Since(start)

	// Each volume's request: approved by the example approver, signed by its issuer, for the
	// names it asks for.
	list, err := c.cm.CertmanagerV1().CertificateRequests(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fail(err)
	}
	if err := approvedAndIssued(list.Items, pod); err != nil {
		return fail(err)
	}
	var own *cmapi.CertificateRequest // the tls volume's
	for _, v := range vols {
		found := false
		for i := range list.Items {
			req := &list.Items[i]
			if req.Annotations[approval.PodNameAnnotationKey] != pod || req.Spec.IssuerRef.Kind != v.issuerKind || req.Spec.IssuerRef.Name != v.issuerName {
				continue
			}
			block, _ := pem.Decode(req.Status.Certificate)
			if block == nil {
				return fail(fmt.Errorf("request %s: no certificate", req.Name))
			}
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return fail(err)
			}
			if !slices.Equal(cert.DNSNames, v.dnsNames) {
				return fail(fmt.Errorf("volume %s's certificate names %v, want %v", v.name, cert.DNSNames, v.dnsNames))
			}
			found = true
			if v.name == "tls" {
				own = req
			}
		}
		if !found {
			return fail(fmt.Errorf("no request of volume %s from %s/%s", v.name, v.issuerKind, v.issuerName))
		}
	}

	// Root on this node, with the driver's token bound to it, asks by hand for more.
	forger, err := c.thisNodeDriver(ctx)
	if err != nil {
		return fail(err)
	}
	var denied []string
	for _, f := range []struct {
		name   string
		change func(*x509.CertificateRequest, *cmapi.CertificateRequest)
		reason string
	}{
		{"one more DNS name", func(csr *x509.CertificateRequest, _ *cmapi.CertificateRequest) {
			csr.DNSNames = append(csr.DNSNames, "evil.example")
		},
			"dns name evil.example is not asked for by any volume of pod " + namespace + "/" + pod},
		{"a longer life", func(_ *x509.CertificateRequest, req *cmapi.CertificateRequest) {
			req.Spec.Duration = &metav1.Duration{Duration: 90 * 24 * time.Hour}
		},
			"a duration of 2160h0m0s is not asked for by any volume of pod " + namespace + "/" + pod + " (at most 1h0m0s)"},
	} {
		forged, err := resigned(own, f.change)
		if err != nil {
			return fail(err)
		}
		created, err := forger.CertmanagerV1().CertificateRequests(namespace).Create(ctx, forged, metav1.CreateOptions{})
		if err != nil {
			return fail(fmt.Errorf("%s: created: %w", f.name, err))
		}
		defer func() {
			_ = c.cm.CertmanagerV1().CertificateRequests(namespace).Delete(context.WithoutCancel(ctx), created.Name, metav1.DeleteOptions{})
		}()
		if err := poll(ctx, "the example approver to deny "+created.Name, 50*time.Millisecond, time.Minute, func() (bool, error) {
			got, err := c.cm.CertmanagerV1().CertificateRequests(namespace).Get(ctx, created.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if requestHas(got, cmapi.CertificateRequestConditionApproved, "") || len(got.Status.Certificate) > 0 {
				return false, fmt.Errorf("%s: request %s was approved or issued", f.name, got.Name)
			}
			for _, cond := range got.Status.Conditions {
				if cond.Type == cmapi.CertificateRequestConditionDenied && cond.Reason == controller.Reason {
					if !strings.Contains(cond.Message, f.reason) {
						return false, fmt.Errorf("%s: denied with %q, want %q", f.name, cond.Message, f.reason)
					}
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			return fail(err)
		}
		denied = append(denied, f.name)
	}
	r.ok = true
	r.detail = fmt.Sprintf("a pod with two volumes (Issuer/%s for %s, ClusterIssuer/%s for %s): both certificates in the containers %v after its creation, each with its volume's names, approved by the example approver's pod-spec rule; "+
		"this node's driver token, the pod's own request re-signed: %s denied, naming what it adds",
		issuerName, vols[0].dnsNames[0], clusterIssuerName, vols[1].dnsNames[0], inContainers.Round(10*time.Millisecond), strings.Join(denied, " and "))
	return r
}

// resigned is req as a forger remakes it: the same labels, annotations, owner and spec, a CSR
// of the same subject and names under a new key, each changed by change.
func resigned(req *cmapi.CertificateRequest, change func(*x509.CertificateRequest, *cmapi.CertificateRequest)) (*cmapi.CertificateRequest, error) {
	block, _ := pem.Decode(req.Spec.Request)
	if block == nil {
		return nil, errors.New("the request holds no CSR")
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, err
	}
	template := &x509.CertificateRequest{Subject: csr.Subject, DNSNames: csr.DNSNames, IPAddresses: csr.IPAddresses, URIs: csr.URIs, EmailAddresses: csr.EmailAddresses}
	forged := &cmapi.CertificateRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "forged-", Namespace: req.Namespace, Labels: req.Labels, Annotations: req.Annotations, OwnerReferences: req.OwnerReferences},
		Spec:       *req.Spec.DeepCopy(),
	}
	forged.Spec.UID, forged.Spec.Username, forged.Spec.Groups, forged.Spec.Extra = "", "", nil, nil
	change(template, forged)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, template, key)
	if err != nil {
		return nil, err
	}
	forged.Spec.Request = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	return forged, nil
}

// thisNodeDriver is a client holding the driver's service-account token bound to this node, as
// root on it holds it (the driver's pod's projected token).
func (c *cluster) thisNodeDriver(ctx context.Context) (cmclient.Interface, error) {
	return c.driverClientOn(ctx, nodeName, "this-node-driver-kubeconfig")
}
