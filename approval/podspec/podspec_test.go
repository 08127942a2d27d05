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

package podspec

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cert-manager/csi-lib/approval"
	"github.com/cert-manager/csi-lib/metadata"
)

// testBundle has manager.CertificateRequestBundle's fields (example_test.go passes the
// manager's own type).
type testBundle struct {
	Request     *x509.CertificateRequest
	Usages      []cmapi.KeyUsage
	IsCA        bool
	Namespace   string
	IssuerRef   cmmeta.IssuerReference
	Duration    time.Duration
	Annotations map[string]string
}

const driverName = "csi.test.example"

// generate is a driver's generator in the manner of cert-manager csi-driver's: the pod's name
// as common name, DNS names from a comma-separated attribute with ${POD_NAME} and
// ${SERVICE_ACCOUNT_NAME} expanded, an optional URI, the issuer and duration from attributes.
func generate(meta metadata.Metadata) (*testBundle, error) {
	a := meta.VolumeContext
	issuer := a["x/issuer"]
	if issuer == "" {
		return nil, errors.New("no issuer")
	}
	expand := strings.NewReplacer("${POD_NAME}", a[metadata.PodNameVolumeContextKey], "${SERVICE_ACCOUNT_NAME}", a[metadata.ServiceAccountNameVolumeContextKey]).Replace
	req := &x509.CertificateRequest{Subject: pkix.Name{CommonName: a[metadata.PodNameVolumeContextKey]}}
	if names := a["x/dns-names"]; names != "" {
		req.DNSNames = strings.Split(expand(names), ",")
	}
	if u := a["x/uri"]; u != "" {
		parsed, err := url.Parse(expand(u))
		if err != nil {
			return nil, err
		}
		req.URIs = []*url.URL{parsed}
	}
	d := time.Hour
	if s := a["x/duration"]; s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return nil, err
		}
	}
	return &testBundle{
		Request:   req,
		Usages:    []cmapi.KeyUsage{cmapi.UsageDigitalSignature, cmapi.UsageServerAuth},
		IsCA:      a["x/is-ca"] == "true",
		Namespace: a[metadata.PodNamespaceVolumeContextKey],
		IssuerRef: cmmeta.IssuerReference{Kind: "ClusterIssuer", Name: issuer},
		Duration:  d,
		// Time in what is not compared: a request is made at one instant, checked at another.
		Annotations: map[string]string{"x/generated-at": time.Now().String()},
	}, nil
}

// webPod runs as service account web on node-a with the volumes given as attribute maps,
// named tls, tls2, ....
func webPod(vols ...map[string]string) *corev1.Pod {
	p := pod("ns", "web", "u1", "node-a")
	for i, attrs := range vols {
		name := "tls"
		if i > 0 {
			name = fmt.Sprintf("tls%d", i+1)
		}
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: driverName, VolumeAttributes: attrs}}})
	}
	return p
}

// requestFrom is the request the manager makes from a bundle for a publish of pod on node-a,
// its CSR signed with a fresh key, after change has had its way with the bundle's template and
// then with the request.
func requestFrom(t *testing.T, b *testBundle, p *corev1.Pod, changeCSR func(*x509.CertificateRequest), change func(*cmapi.CertificateRequest)) *cmapi.CertificateRequest {
	t.Helper()
	template := *b.Request
	if changeCSR != nil {
		changeCSR(&template)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &template, key)
	if err != nil {
		t.Fatal(err)
	}
	annotations := map[string]string{
		approval.NodeNameAnnotationKey:          "node-a",
		approval.PodNamespaceAnnotationKey:      p.Namespace,
		approval.PodNameAnnotationKey:           p.Name,
		approval.PodUIDAnnotationKey:            string(p.UID),
		approval.PodServiceAccountAnnotationKey: p.Spec.ServiceAccountName,
	}
	req := &cmapi.CertificateRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: b.Namespace, Annotations: annotations},
		Spec: cmapi.CertificateRequestSpec{
			Request:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			Duration:  &metav1.Duration{Duration: b.Duration},
			IssuerRef: b.IssuerRef,
			Usages:    b.Usages,
			IsCA:      b.IsCA,
		},
	}
	if change != nil {
		change(req)
	}
	return req
}

// honest is the bundle the driver makes for p's volume named volume.
func honest(t *testing.T, p *corev1.Pod, volume string) *testBundle {
	t.Helper()
	for _, v := range VolumesOf(p, driverName, "") {
		if v.Name == volume {
			b, err := generate(v.Metadata)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
	t.Fatalf("pod %s has no volume %s", p.Name, volume)
	return nil
}

func mustExtension(t *testing.T, id asn1.ObjectIdentifier, critical bool, value any) pkix.Extension {
	t.Helper()
	der, err := asn1.Marshal(value)
	if err != nil {
		t.Fatal(err)
	}
	return pkix.Extension{Id: id, Critical: critical, Value: der}
}

// TestPodSpecRule: a request that asks for what one of the pod's volumes asks for through the
// driver's generator is approved; every forgery of what the certificate says is denied with the
// first difference named.
func TestPodSpecRule(t *testing.T) {
	web := webPod(
		map[string]string{"x/issuer": "ca", "x/dns-names": "${POD_NAME}.ns.svc,${SERVICE_ACCOUNT_NAME}.example"},
		map[string]string{"x/issuer": "other-ca", "x/dns-names": "admin.example", "x/duration": "24h", "x/uri": "spiffe://td/ns/ns/sa/${SERVICE_ACCOUNT_NAME}"},
	)
	rule := Rule(Options{DriverName: driverName}, generate)
	tls, tls2 := honest(t, web, "tls"), honest(t, web, "tls2")
	basicConstraintsCA := mustExtension(t, asn1.ObjectIdentifier{2, 5, 29, 19}, true, struct{ IsCA bool }{true})
	otherName := func(csr *x509.CertificateRequest) {
		// A SAN extension holding an otherName (a UPN, as cert-manager's otherNames write it),
		// which Go's parser does not read and an issuer copies whole.
		csr.DNSNames = nil
		raw := []asn1.RawValue{
			{Class: asn1.ClassContextSpecific, Tag: 2, Bytes: []byte("web.ns.svc")},
			{Class: asn1.ClassContextSpecific, Tag: 2, Bytes: []byte("web.example")},
			{Class: asn1.ClassContextSpecific, Tag: 0, IsCompound: true, Bytes: []byte{0x06, 0x03, 0x2a, 0x03, 0x04, 0xa0, 0x03, 0x0c, 0x01, 0x78}},
		}
		der, err := asn1.Marshal(raw)
		if err != nil {
			t.Fatal(err)
		}
		csr.ExtraExtensions = append(csr.ExtraExtensions, pkix.Extension{Id: asn1.ObjectIdentifier{2, 5, 29, 17}, Value: der})
	}
	for _, tc := range []struct {
		name      string
		bundle    *testBundle
		changeCSR func(*x509.CertificateRequest)
		change    func(*cmapi.CertificateRequest)
		reason    string // "": approved
	}{
		{"the first volume's request", tls, nil, nil, ""},
		{"the second volume's request", tls2, nil, nil, ""},
		{"its names in another order", tls, func(c *x509.CertificateRequest) { c.DNSNames = []string{c.DNSNames[1], c.DNSNames[0]} }, nil, ""},
		{"its usages in another order", tls, nil, func(r *cmapi.CertificateRequest) {
			r.Spec.Usages = []cmapi.KeyUsage{r.Spec.Usages[1], r.Spec.Usages[0]}
		}, ""},
		{"the issuer's group written out", tls, nil, func(r *cmapi.CertificateRequest) { r.Spec.IssuerRef.Group = "cert-manager.io" }, ""},
		{"a shorter duration", tls, nil, func(r *cmapi.CertificateRequest) { r.Spec.Duration.Duration = time.Minute }, ""},
		{"another signature algorithm", tls, func(c *x509.CertificateRequest) { c.SignatureAlgorithm = x509.ECDSAWithSHA512 }, nil, ""},

		{"an extra DNS name", tls, func(c *x509.CertificateRequest) { c.DNSNames = append(c.DNSNames, "evil.example") }, nil,
			"dns name evil.example is not asked for by any volume of pod ns/web"},
		{"an IP name", tls, func(c *x509.CertificateRequest) { c.IPAddresses = []net.IP{net.ParseIP("10.0.0.9")} }, nil,
			"ip name 10.0.0.9 is not asked for by any volume of pod ns/web"},
		{"a URI", tls, func(c *x509.CertificateRequest) { c.URIs = []*url.URL{{Scheme: "https", Host: "evil.example"}} }, nil,
			"uri name https://evil.example is not asked for by any volume of pod ns/web"},
		{"an email name", tls, func(c *x509.CertificateRequest) { c.EmailAddresses = []string{"root@evil.example"} }, nil,
			"email name root@evil.example is not asked for by any volume of pod ns/web"},
		{"a name of a kind Go does not parse", tls, otherName, nil,
			"subject alternative name of type 0 (a00a06032a0304a0030c0178) is not asked for by any volume of pod ns/web"},
		{"another subject", tls, func(c *x509.CertificateRequest) { c.Subject = pkix.Name{CommonName: "kube-apiserver"} }, nil,
			"subject CN=kube-apiserver is not asked for by any volume of pod ns/web"},
		{"an extra subject field", tls, func(c *x509.CertificateRequest) { c.Subject.Organization = []string{"system:masters"} }, nil,
			"subject CN=web,O=system:masters is not asked for by any volume of pod ns/web"},
		{"an empty subject", tls, func(c *x509.CertificateRequest) { c.Subject = pkix.Name{} }, nil,
			"an empty subject is not asked for by any volume of pod ns/web"},
		{"a CA request", tls, nil, func(r *cmapi.CertificateRequest) { r.Spec.IsCA = true }, "a CA certificate is not asked for by any volume of pod ns/web"},
		{"a CA basic constraint in the CSR", tls, func(c *x509.CertificateRequest) { c.ExtraExtensions = []pkix.Extension{basicConstraintsCA} }, nil,
			"extension 2.5.29.19 (basic constraints) is not asked for by any volume of pod ns/web"},
		{"a longer duration", tls, nil, func(r *cmapi.CertificateRequest) { r.Spec.Duration.Duration = 48 * time.Hour }, "a duration of 48h0m0s is not asked for by any volume of pod ns/web (at most 24h0m0s)"},
		{"no duration", tls, nil, func(r *cmapi.CertificateRequest) { r.Spec.Duration = nil }, "the issuer's default duration is not asked for by any volume of pod ns/web (at most 24h0m0s)"},
		{"a zero duration", tls, nil, func(r *cmapi.CertificateRequest) { r.Spec.Duration.Duration = 0 }, "the issuer's default duration is not asked for"},
		{"another issuer", tls, nil, func(r *cmapi.CertificateRequest) { r.Spec.IssuerRef.Name = "root-ca" }, "issuer ClusterIssuer/root-ca is not asked for by any volume of pod ns/web"},
		{"an Issuer of the name", tls, nil, func(r *cmapi.CertificateRequest) { r.Spec.IssuerRef.Kind = "Issuer" }, "issuer Issuer/ca is not asked for by any volume of pod ns/web"},
		{"another namespace", tls, nil, func(r *cmapi.CertificateRequest) { r.Namespace = "kube-system" }, "namespace kube-system is not asked for by any volume of pod ns/web"},
		{"another usage", tls, nil, func(r *cmapi.CertificateRequest) { r.Spec.Usages = append(r.Spec.Usages, cmapi.UsageClientAuth) }, "usage client auth is not asked for by any volume of pod ns/web"},
		{"another service account's SPIFFE ID", tls2, func(c *x509.CertificateRequest) {
			c.URIs = []*url.URL{{Scheme: "spiffe", Host: "td", Path: "/ns/ns/sa/admin"}}
		}, nil,
			"uri name spiffe://td/ns/ns/sa/admin is not asked for by any volume of pod ns/web"},
		{"one volume's name under the other's issuer", tls, nil, func(r *cmapi.CertificateRequest) { r.Spec.IssuerRef.Name = "other-ca" },
			`no one volume of pod ns/web asks for all the request asks for: volume "tls", the nearest, does not ask for issuer ClusterIssuer/other-ca`},
		{"a name left out", tls, func(c *x509.CertificateRequest) { c.DNSNames = c.DNSNames[:1] }, nil,
			`the request does not ask for dns name web.example, which volume "tls" of pod ns/web asks for`},
		{"the usages left out", tls, nil, func(r *cmapi.CertificateRequest) { r.Spec.Usages = nil },
			`the request does not ask for usage digital signature, which volume "tls" of pod ns/web asks for`},
		{"the first volume's names with the second's duration", tls, nil, func(r *cmapi.CertificateRequest) { r.Spec.Duration.Duration = 24 * time.Hour },
			`volume "tls" of pod ns/web asks for a duration of 1h0m0s, the request for a duration of 24h0m0s`},
		{"no CSR", tls, nil, func(r *cmapi.CertificateRequest) { r.Spec.Request = []byte("not a CSR") }, "the request holds no PEM certificate request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := rule(requestFrom(t, tc.bundle, web, tc.changeCSR, tc.change), web)
			if tc.reason == "" && got != "" {
				t.Errorf("denied: %s", got)
			}
			if tc.reason != "" && !strings.HasPrefix(got, tc.reason) {
				t.Errorf("reason %q, want %q", got, tc.reason)
			}
		})
	}
}

// TestPodSpecRuleThroughCheck: the rule runs after the claim's checks, on the pod they found;
// another pod's request and a pod that is neither Pending nor Running are denied before it.
func TestPodSpecRuleThroughCheck(t *testing.T) {
	web := webPod(map[string]string{"x/issuer": "ca", "x/dns-names": "web.example"})
	other := pod("ns", "db", "u2", "node-a")
	other.Spec.Volumes = web.Spec.Volumes
	rule := Rule(Options{DriverName: driverName}, generate)
	check := func(req *cmapi.CertificateRequest, pods ...*corev1.Pod) approval.Verdict {
		t.Helper()
		v, err := approval.Check(context.Background(), req, podsOf(pods...), rule)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	honestReq := requestFrom(t, honest(t, web, "tls"), web, nil, nil)
	if v := check(honestReq, web); !v.Approve {
		t.Errorf("the honest request: %+v", v)
	}
	// The db pod's request, with db's names in the CSR but naming pod web: the claim names
	// web (and its service account), so the CSR is compared with web's volumes.
	forDB := requestFrom(t, honest(t, other, "tls"), web, nil, nil)
	if v := check(forDB, web, other); v.Approve || v.Reason != "subject CN=db is not asked for by any volume of pod ns/web" {
		t.Errorf("db's CSR under web's name: %+v", v)
	}
	// web's CSR claiming db's service account: the claim's check denies it.
	wrongSA := requestFrom(t, honest(t, web, "tls"), web, nil, func(r *cmapi.CertificateRequest) { r.Annotations[approval.PodServiceAccountAnnotationKey] = "db" })
	if v := check(wrongSA, web); v.Approve || v.Reason != `pod ns/web runs as service account "web", not "db"` {
		t.Errorf("another service account claimed: %+v", v)
	}
	for _, phase := range []corev1.PodPhase{corev1.PodSucceeded, corev1.PodFailed, corev1.PodUnknown} {
		done := web.DeepCopy()
		done.Status.Phase = phase
		if v := check(honestReq, done); v.Approve {
			t.Errorf("a pod %s: approved", phase)
		}
	}
	pending := web.DeepCopy()
	pending.Status.Phase = corev1.PodPending
	if v := check(honestReq, pending); !v.Approve {
		t.Errorf("a Pending pod: %+v", v)
	}
}

// podsOf serves the given pods by namespace/name, and not found for any other.
func podsOf(ps ...*corev1.Pod) approval.GetPodFunc {
	return func(_ context.Context, ns, name string) (*corev1.Pod, error) {
		for _, p := range ps {
			if p.Namespace == ns && p.Name == name {
				return p, nil
			}
		}
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, name)
	}
}

// pod is ns/name with uid, bound to node, Running, as service account name.
func pod(ns, name, uid, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)},
		Spec:       corev1.PodSpec{NodeName: node, ServiceAccountName: name},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// TestPodSpecRuleVolumes: a pod with no volume of the driver, and a generator failing for every
// volume, deny; a volume the generator fails for does not hide another that matches.
func TestPodSpecRuleVolumes(t *testing.T) {
	rule := Rule(Options{DriverName: driverName}, generate)
	web := webPod(map[string]string{"x/issuer": "ca"})
	req := requestFrom(t, honest(t, web, "tls"), web, nil, nil)

	other := web.DeepCopy()
	other.Spec.Volumes[0].CSI.Driver = "csi.other.example"
	if got, want := rule(req, other), "pod ns/web has no volume of driver csi.test.example"; got != want {
		t.Errorf("no volume of the driver: %q, want %q", got, want)
	}
	failing := webPod(map[string]string{})
	if got, want := rule(req, failing), `the driver's generator fails for every volume of pod ns/web: volume "tls": no issuer`; got != want {
		t.Errorf("a failing generator: %q, want %q", got, want)
	}
	both := webPod(map[string]string{}, map[string]string{"x/issuer": "ca"})
	both.Spec.Volumes[0].Name = "broken"
	both.Spec.Volumes[1].Name = "tls"
	if got := rule(req, both); got != "" {
		t.Errorf("a matching volume beside a failing one: %q", got)
	}
}

// TestPodSpecRuleNotDeterministic: a generator that puts randomness into what it asks for (a
// jittered duration) cannot be matched; the denial says why. Randomness elsewhere (the
// annotations, in generate) is not compared.
func TestPodSpecRuleNotDeterministic(t *testing.T) {
	r := mathrand.New(mathrand.NewPCG(1, 2))
	jittered := func(meta metadata.Metadata) (*testBundle, error) {
		b, err := generate(meta)
		if err == nil {
			b.Duration -= time.Duration(r.Int64N(int64(10 * time.Minute)))
		}
		return b, err
	}
	web := webPod(map[string]string{"x/issuer": "ca"})
	rule := Rule(Options{DriverName: driverName}, jittered)
	var denied string
	for range 20 { // the request's draw is above the approver's at least once
		b, err := jittered(VolumesOf(web, driverName, "")[0].Metadata)
		if err != nil {
			t.Fatal(err)
		}
		if reason := rule(requestFrom(t, b, web, nil, nil), web); reason != "" {
			denied = reason
			break
		}
	}
	if !strings.Contains(denied, `on a second call for volume "tls": it puts time or randomness into what it asks for`) {
		t.Errorf("the denial %q does not say the generator is not deterministic", denied)
	}
}

// TestVolumesOf: the metadata kubelet sends, rebuilt from the pod: the attributes with the
// pod-info keys over them (as kubelet's pkg/volume/csi merges them), the volume handle of an
// inline volume, the target path and the fsGroup.
func TestVolumesOf(t *testing.T) {
	fsGroup := int64(2000)
	p := webPod(map[string]string{"x/issuer": "ca", metadata.PodNameVolumeContextKey: "spoofed"})
	p.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: &fsGroup}
	p.Spec.Volumes = append(p.Spec.Volumes,
		corev1.Volume{Name: "other", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "csi.other.example"}}},
		corev1.Volume{Name: "bare", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: driverName}}},
		corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	)
	vols := VolumesOf(p, driverName, "/var/lib/k")
	if len(vols) != 2 || vols[0].Name != "tls" || vols[1].Name != "bare" {
		t.Fatalf("volumes %+v, want tls and bare", vols)
	}
	m := vols[0].Metadata
	want := map[string]string{
		"x/issuer":                               "ca",
		"csi.storage.k8s.io/pod.name":            "web",
		"csi.storage.k8s.io/pod.namespace":       "ns",
		"csi.storage.k8s.io/pod.uid":             "u1",
		"csi.storage.k8s.io/serviceAccount.name": "web",
		"csi.storage.k8s.io/ephemeral":           "true",
	}
	if fmt.Sprint(m.VolumeContext) != fmt.Sprint(want) {
		t.Errorf("volume context %v, want %v", m.VolumeContext, want)
	}
	if p.Spec.Volumes[0].CSI.VolumeAttributes[metadata.PodNameVolumeContextKey] != "spoofed" {
		t.Error("the pod's attributes were changed")
	}
	if wantID := fmt.Sprintf("csi-%x", sha256.Sum256([]byte("u1tls"))); m.VolumeID != wantID {
		t.Errorf("volume ID %s, want %s", m.VolumeID, wantID)
	}
	if want := "/var/lib/k/pods/u1/volumes/kubernetes.io~csi/tls/mount"; m.TargetPath != want {
		t.Errorf("target path %s, want %s", m.TargetPath, want)
	}
	if m.VolumeMountGroup != "2000" || m.NextIssuanceTime != nil || m.Mounted {
		t.Errorf("metadata %+v", m)
	}
	if len(vols[1].Metadata.VolumeContext) != 5 {
		t.Errorf("a volume without attributes: %v", vols[1].Metadata.VolumeContext)
	}
	if got := VolumesOf(p, driverName, "")[0].Metadata.TargetPath; !strings.HasPrefix(got, "/var/lib/kubelet/pods/") {
		t.Errorf("the default root: %s", got)
	}
}

// BenchmarkRule is one decision of the rule for a pod with two volumes: the generator called
// for each, its template encoded and parsed, the request's CSR parsed and compared.
func BenchmarkRule(b *testing.B) {
	t := &testing.T{}
	web := webPod(
		map[string]string{"x/issuer": "ca", "x/dns-names": "${POD_NAME}.ns.svc,${SERVICE_ACCOUNT_NAME}.example"},
		map[string]string{"x/issuer": "other-ca", "x/dns-names": "admin.example", "x/duration": "24h"},
	)
	rule := Rule(Options{DriverName: driverName}, generate)
	req := requestFrom(t, honest(t, web, "tls2"), web, nil, nil)
	b.ReportAllocs()
	for b.Loop() {
		if reason := rule(req, web); reason != "" {
			b.Fatal(reason)
		}
	}
}
