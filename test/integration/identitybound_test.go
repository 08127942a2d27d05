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
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"maps"
	"net"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cert-manager/csi-lib/approval"
	"github.com/cert-manager/csi-lib/approval/podspec"
	"github.com/cert-manager/csi-lib/examples/approver/controller"
	"github.com/cert-manager/csi-lib/examples/csi-driver/plugin"
	"github.com/cert-manager/csi-lib/internal/api"
	"github.com/cert-manager/csi-lib/internal/api/util"
	"github.com/cert-manager/csi-lib/manager"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/test/testkit"
)

// exampleDriver is the CSI driver name the identity-bound test's pods mount.
const exampleDriver = "csi.example.com"

// readyNamedCAIssuer creates a CA and the CA Issuer name signing from it, and waits until
// cert-manager has it Ready.
func readyNamedCAIssuer(t *testing.T, ns, name string) *testkit.CA {
	t.Helper()
	ca := newCA(t)
	createCASecret(t, ns, name+"-key-pair", ca)
	if _, err := cm.CertmanagerV1().Issuers(ns).Create(context.Background(), &cmapi.Issuer{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: testkit.CAIssuerSpec(name + "-key-pair"),
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "cert-manager to have the Issuer "+name+" Ready", func() bool {
		issuer, err := cm.CertmanagerV1().Issuers(ns).Get(context.Background(), name, metav1.GetOptions{})
		return err == nil && testkit.IssuerReady(issuer.Status.Conditions)
	})
	return ca
}

// podWithVolumes creates pod ns/name bound to node, as service account sa, with one CSI inline
// volume of the example driver for each entry of volumes (its attributes), in phase.
func podWithVolumes(t *testing.T, ns, name, node, sa string, phase corev1.PodPhase, volumes map[string]map[string]string) *corev1.Pod {
	t.Helper()
	readOnly := true
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: sa,
			Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	for _, vol := range slices.Sorted(maps.Keys(volumes)) { // the pod's order, the same each run
		attrs := volumes[vol]
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: vol, VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
			Driver: exampleDriver, ReadOnly: &readOnly, VolumeAttributes: attrs,
		}}})
	}
	ctx := context.Background()
	created, err := kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status.Phase = phase
	if created, err = kube.CoreV1().Pods(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return created
}

// volumeOf is the metadata kubelet sends for pod's volume named volume (rebuilt as the approver
// rebuilds it), its target path under root.
func volumeOf(t *testing.T, pod *corev1.Pod, volume, root string) metadata.Metadata {
	t.Helper()
	for _, v := range podspec.VolumesOf(pod, exampleDriver, root) {
		if v.Name == volume {
			return v.Metadata
		}
	}
	t.Fatalf("pod %s has no volume %s", pod.Name, volume)
	return metadata.Metadata{}
}

// forgery is a request root on node-a makes by hand: the one the library would make for a pod's
// volume, with what the forger changes.
type forgery struct {
	name      string
	pod       *corev1.Pod
	volume    string
	changeCSR func(*x509.CertificateRequest)
	change    func(*cmapi.CertificateRequest)
	// refused is the admission policy's refusal; denied the approver's reason; both empty: the
	// request is approved and signed.
	refused, denied string
}

// TestIdentityBoundIssuance: with real tokens bound to pods on two nodes, the admission policy
// and the example approver with its pod-spec rule (the example driver's own generator) and its
// SPIFFE rule, cert-manager's controllers signing: the pods' own requests, through the library
// on each node, are approved and signed, a pod with two volumes of other issuers and names
// included; with node A's driver token, each forgery is refused by the apiserver or denied by
// the approver, naming what is wrong: an extra DNS name, an IP name, a URI, another subject, a
// CA, a longer duration, another issuer, another pod's service account or SPIFFE ID, a pod on
// the other node, a pod that has finished, a request that names no service account.
func TestIdentityBoundIssuance(t *testing.T) {
	ctx := context.Background()
	ensureNode(t, "node-a")
	ensureNode(t, "node-b")
	driverNS, ns := newNamespace(t), newNamespace(t)
	allow(t, driverNS, "csi-driver", false, chartRule(chartVerbs...))
	asDriverA := withToken(boundToken(t, driverNS, "csi-driver", podOnNode(t, driverNS, "csi-driver-a", "node-a", "csi-driver")))
	asDriverB := withToken(boundToken(t, driverNS, "csi-driver", podOnNode(t, driverNS, "csi-driver-b", "node-b", "csi-driver")))

	spiffeID := "spiffe://cluster.local/ns/${POD_NAMESPACE}/sa/${SERVICE_ACCOUNT_NAME}"
	web := podWithVolumes(t, ns, "web", "node-a", "web", corev1.PodRunning, map[string]map[string]string{
		"tls":   {plugin.DNSNamesAttribute: "${POD_NAME}.${POD_NAMESPACE}.svc"},
		"admin": {plugin.IssuerKindAttribute: "Issuer", plugin.IssuerNameAttribute: "other-ca", plugin.DNSNamesAttribute: "admin.example", plugin.DurationAttribute: "30m"},
	})
	svc := podWithVolumes(t, ns, "svc", "node-a", "svc", corev1.PodRunning, map[string]map[string]string{
		"svid": {plugin.IssuerNameAttribute: "spiffe-ca", plugin.CommonNameAttribute: "", plugin.URISANsAttribute: spiffeID},
	})
	db := podWithVolumes(t, ns, "db", "node-a", "db", corev1.PodPending, map[string]map[string]string{"tls": nil})
	done := podWithVolumes(t, ns, "done", "node-a", "db", corev1.PodSucceeded, map[string]map[string]string{"tls": nil})
	far := podWithVolumes(t, ns, "far", "node-b", "web", corev1.PodRunning, map[string]map[string]string{"tls": nil})

	startCertManager(t, caController, issuersController) // no approver of its own
	cas := map[string]*testkit.CA{}
	for _, name := range []string{"test-ca", "other-ca", "root-ca", "spiffe-ca"} {
		cas[name] = readyNamedCAIssuer(t, ns, name)
	}
	// The example approver as its flags configure it: the pod-spec rule for the TLS issuers, the
	// SPIFFE rule (and the pod-spec rule) for the SPIFFE issuer. The driver's default issuer is
	// the Issuer test-ca.
	driverIssuer := cmmeta.IssuerReference{Kind: "Issuer", Name: "test-ca", Group: "cert-manager.io"}
	for _, a := range []struct {
		issuers []string
		rules   []string
	}{
		{[]string{"test-ca", "other-ca", "root-ca"}, []string{controller.RulePodSpec}},
		{[]string{"spiffe-ca"}, []string{controller.RuleSPIFFE, controller.RulePodSpec}},
	} {
		cfg := controller.DefaultConfig()
		cfg.Rules, cfg.DriverName, cfg.DriverIssuer, cfg.SPIFFETrustDomain = a.rules, exampleDriver, driverIssuer, "cluster.local"
		for _, name := range a.issuers {
			cfg.Issuers = append(cfg.Issuers, cmmeta.IssuerReference{Kind: "Issuer", Name: name})
		}
		runApproverWith(t, cfg)
	}
	applyPolicy(t, "node-bound-policy.yaml", "system:serviceaccount:"+driverNS+":csi-driver",
		policyIssuers, `'["Issuer/test-ca", "Issuer/other-ca", "Issuer/root-ca", "Issuer/spiffe-ca"]'`)
	poll(t, "the policy to refuse node A's driver a request naming node B", func() bool {
		_, err := asDriverA.CertmanagerV1().CertificateRequests(ns).Create(ctx, &cmapi.CertificateRequest{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Annotations: map[string]string{approval.NodeNameAnnotationKey: "node-b"}},
			Spec:       cmapi.CertificateRequestSpec{Request: []byte("not a CSR"), IssuerRef: cmmeta.IssuerReference{Name: "test-ca"}},
		}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		// Its answer, not a policy of an earlier test's that the apiserver has not yet dropped.
		return err != nil && strings.Contains(err.Error(), `the driver's token is bound to node node-a, but the request names node "node-b"`)
	})

	// The pods' own requests, through the library on each node: approved, signed by the CA of
	// each volume's issuer.
	kubeletRoot := t.TempDir()
	startAs := func(name string, client cmclient.Interface) *node {
		return startNode(t, nodeConfig{baseDir: t.TempDir(), namespace: ns, managerOpts: func(o *manager.Options) {
			o.NodeID, o.Client, o.GenerateRequest = name, client, plugin.RequestFor(driverIssuer)
		}})
	}
	nodeA, nodeB := startAs("node-a", asDriverA), startAs("node-b", asDriverB)
	publish := func(n *node, pod *corev1.Pod, volume string) metadata.Metadata {
		t.Helper()
		meta := volumeOf(t, pod, volume, kubeletRoot)
		if _, err := n.client.NodePublishVolume(ctxTimeout(t, time.Minute), &csi.NodePublishVolumeRequest{
			VolumeId: meta.VolumeID, TargetPath: meta.TargetPath, VolumeContext: meta.VolumeContext, Readonly: true,
			VolumeCapability: &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}},
		}); err != nil {
			t.Fatalf("%s/%s's publish: %v", pod.Name, volume, err)
		}
		return meta
	}
	for _, c := range []struct {
		n      *node
		pod    *corev1.Pod
		volume string
		issuer string
	}{{nodeA, web, "tls", "test-ca"}, {nodeA, web, "admin", "other-ca"}, {nodeA, svc, "svid", "spiffe-ca"}, {nodeA, db, "tls", "test-ca"}, {nodeB, far, "tls", "test-ca"}} {
		meta := publish(c.n, c.pod, c.volume)
		verifyVolume(t, c.n, meta.VolumeID, cas[c.issuer], time.Now())
		if req := requestOfVolume(t, ns, meta.VolumeID); !decidedBy(req, cmapi.CertificateRequestConditionApproved) {
			t.Errorf("%s/%s's request was not approved by the example approver: %+v", c.pod.Name, c.volume, req.Status.Conditions)
		}
	}

	// Root on node A, with its driver's token, asks by hand.
	other := func(s string) string { return ns + "/" + s }
	for _, f := range []forgery{
		{name: "web's own request", pod: web, volume: "tls"},
		{name: "svc's own SVID", pod: svc, volume: "svid"},
		{name: "an extra DNS name", pod: web, volume: "tls", changeCSR: func(c *x509.CertificateRequest) { c.DNSNames = append(c.DNSNames, "evil.example") },
			denied: "dns name evil.example is not asked for by any volume of pod " + other("web")},
		{name: "an IP name", pod: web, volume: "tls", changeCSR: func(c *x509.CertificateRequest) { c.IPAddresses = []net.IP{net.ParseIP("10.96.0.1")} },
			denied: "ip name 10.96.0.1 is not asked for by any volume of pod " + other("web")},
		{name: "a URI", pod: web, volume: "tls", changeCSR: func(c *x509.CertificateRequest) { c.URIs = []*url.URL{{Scheme: "https", Host: "evil.example"}} },
			denied: "uri name https://evil.example is not asked for by any volume of pod " + other("web")},
		{name: "another subject", pod: web, volume: "tls", changeCSR: func(c *x509.CertificateRequest) { c.Subject = pkix.Name{CommonName: "db"} },
			denied: "subject CN=db is not asked for by any volume of pod " + other("web")},
		{name: "a CA", pod: web, volume: "tls", change: func(r *cmapi.CertificateRequest) { r.Spec.IsCA = true },
			denied: "a CA certificate is not asked for by any volume of pod " + other("web")},
		{name: "a longer duration", pod: web, volume: "tls", change: func(r *cmapi.CertificateRequest) { r.Spec.Duration = &metav1.Duration{Duration: 90 * 24 * time.Hour} },
			denied: "a duration of 2160h0m0s is not asked for by any volume of pod " + other("web") + " (at most 1h0m0s)"},
		{name: "another issuer", pod: web, volume: "tls", change: func(r *cmapi.CertificateRequest) { r.Spec.IssuerRef.Name = "root-ca" },
			denied: "issuer Issuer/root-ca is not asked for by any volume of pod " + other("web")},
		{name: "one volume's names from the other's issuer", pod: web, volume: "tls", change: func(r *cmapi.CertificateRequest) { r.Spec.IssuerRef.Name = "other-ca" },
			denied: `no one volume of pod ` + other("web") + ` asks for all the request asks for: volume "tls", the nearest, does not ask for issuer Issuer/other-ca`},
		{name: "an issuer the approver does not decide", pod: web, volume: "tls", change: func(r *cmapi.CertificateRequest) { r.Spec.IssuerRef.Name = "outside" },
			refused: "the driver's requests may name only the issuers its approver decides (Issuer/test-ca,Issuer/other-ca,Issuer/root-ca,Issuer/spiffe-ca), this one names Issuer/outside"},
		{name: "another pod's service account", pod: web, volume: "tls", change: func(r *cmapi.CertificateRequest) { r.Annotations[approval.PodServiceAccountAnnotationKey] = "db" },
			denied: `pod ` + other("web") + ` runs as service account "web", not "db"`},
		{name: "another pod's SPIFFE ID", pod: svc, volume: "svid", changeCSR: func(c *x509.CertificateRequest) { c.URIs[0].Path = "/ns/" + ns + "/sa/web" },
			denied: "uri name spiffe://cluster.local/ns/" + ns + "/sa/web is not the SPIFFE ID of pod " + other("svc") + ", spiffe://cluster.local/ns/" + ns + "/sa/svc"},
		{name: "a pod on the other node", pod: far, volume: "tls",
			denied: "pod " + other("far") + " is bound to node node-b, not to node-a"},
		{name: "naming the other node", pod: far, volume: "tls", change: func(r *cmapi.CertificateRequest) { r.Annotations[approval.NodeNameAnnotationKey] = "node-b" },
			refused: `the driver's token is bound to node node-a, but the request names node "node-b"`},
		{name: "a pod that has finished", pod: done, volume: "tls",
			denied: "pod " + other("done") + " has finished (Succeeded)"},
		{name: "a request that names no service account", pod: web, volume: "tls", change: func(r *cmapi.CertificateRequest) { delete(r.Annotations, approval.PodServiceAccountAnnotationKey) },
			denied: "the request names no service account"},
	} {
		t.Run(f.name, func(t *testing.T) {
			req := forge(t, f, volumeOf(t, f.pod, f.volume, kubeletRoot), driverIssuer)
			created, err := asDriverA.CertmanagerV1().CertificateRequests(ns).Create(ctx, req, metav1.CreateOptions{})
			if f.refused != "" {
				if err == nil || !strings.Contains(err.Error(), f.refused) {
					t.Fatalf("created: %v, want the policy's refusal %q", err, f.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got *cmapi.CertificateRequest
			poll(t, "the example approver to decide "+created.Name, func() bool {
				got, err = cm.CertmanagerV1().CertificateRequests(ns).Get(ctx, created.Name, metav1.GetOptions{})
				return err == nil && (decidedBy(got, cmapi.CertificateRequestConditionApproved) || decidedBy(got, cmapi.CertificateRequestConditionDenied))
			})
			if f.denied == "" {
				if !decidedBy(got, cmapi.CertificateRequestConditionApproved) {
					t.Fatalf("denied: %+v", got.Status.Conditions)
				}
				poll(t, "cert-manager to sign "+created.Name, func() bool {
					got, err = cm.CertmanagerV1().CertificateRequests(ns).Get(ctx, created.Name, metav1.GetOptions{})
					return err == nil && len(got.Status.Certificate) > 0
				})
				return
			}
			var message string
			for _, cond := range got.Status.Conditions {
				if cond.Type == cmapi.CertificateRequestConditionDenied {
					message = cond.Message
				}
			}
			if !decidedBy(got, cmapi.CertificateRequestConditionDenied) || !strings.HasPrefix(message, "denied: "+f.denied) {
				t.Fatalf("conditions %+v, want Denied with %q", got.Status.Conditions, f.denied)
			}
			// Denied for good: cert-manager's CA controller marks it failed, with no certificate.
			poll(t, "cert-manager to mark "+created.Name+" denied", func() bool {
				if got, err = cm.CertmanagerV1().CertificateRequests(ns).Get(ctx, created.Name, metav1.GetOptions{}); err != nil {
					return false
				}
				for _, cond := range got.Status.Conditions {
					if cond.Type == cmapi.CertificateRequestConditionReady && cond.Reason == cmapi.CertificateRequestReasonDenied {
						return true
					}
				}
				return false
			})
			if len(got.Status.Certificate) != 0 {
				t.Fatalf("the denied request has a certificate")
			}
		})
	}
}

// forge makes the request the library on node-a would make for the volume (the example driver's
// generator, a fresh key, the library's labels, annotations and owner), with f's changes.
func forge(t *testing.T, f forgery, meta metadata.Metadata, driverIssuer cmmeta.IssuerReference) *cmapi.CertificateRequest {
	t.Helper()
	b, err := plugin.RequestFor(driverIssuer)(meta)
	if err != nil {
		t.Fatal(err)
	}
	template := *b.Request
	if f.changeCSR != nil {
		f.changeCSR(&template)
	}
	key, err := testkit.GenerateKey(meta)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := testkit.SignCSR(meta, key, &template)
	if err != nil {
		t.Fatal(err)
	}
	pod := f.pod
	req := &cmapi.CertificateRequest{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "forged-", Namespace: b.Namespace,
			Labels: map[string]string{api.NodeIDHashLabelKey: util.HashIdentifier("node-a"), api.VolumeIDHashLabelKey: util.HashIdentifier(meta.VolumeID)},
			Annotations: map[string]string{
				approval.NodeNameAnnotationKey: "node-a", approval.PodNamespaceAnnotationKey: pod.Namespace, approval.PodNameAnnotationKey: pod.Name,
				approval.PodUIDAnnotationKey: string(pod.UID), approval.PodServiceAccountAnnotationKey: pod.Spec.ServiceAccountName,
			},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}},
		},
		Spec: cmapi.CertificateRequestSpec{
			Request: csr, Duration: &metav1.Duration{Duration: b.Duration}, IssuerRef: b.IssuerRef, Usages: b.Usages, IsCA: b.IsCA,
		},
	}
	if f.change != nil {
		f.change(req)
	}
	return req
}

// runApproverWith runs the example approver as cfg configures it (its rules built as its main
// builds them), with the administrator's clients, until the test ends.
func runApproverWith(t *testing.T, cfg controller.Config) {
	t.Helper()
	rules, err := cfg.PodRules()
	if err != nil {
		t.Fatal(err)
	}
	runApproverWithOptions(t, controller.Options{CertManager: cm, Kube: kube, Log: testr.New(t), Issuers: cfg.Issuers, Rules: rules, PodCache: cfg.PodCache})
}
