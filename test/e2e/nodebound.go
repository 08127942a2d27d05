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
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cert-manager/csi-lib/approval"
	"github.com/cert-manager/csi-lib/examples/approver/controller"
	"github.com/cert-manager/csi-lib/internal/api"
	"github.com/cert-manager/csi-lib/internal/api/util"
)

// otherNode is a Node object no kubelet runs: the node whose driver token the attacker of
// story 12 holds.
const otherNode = "other-node"

// attackerTries is how many times story 12's attacker tries each way.
const attackerTries = 5

// nodeBoundFigures are story 12's publish -> certificate written times, per pod.
type nodeBoundFigures struct {
	without, with []time.Duration
}

// nodeBoundPods is how many pods story 12 publishes each way, one after the other.
const nodeBoundPods = 10

// storyNodeBound is story 12: node-bound issuance (docs/node-bound.md). The node's pods get
// their certificates once with cert-manager's own approver, and once with the example approver
// (examples/approver, as its service account from examples/deploy/approver.yaml) and the
// node-bound admission policy, with cert-manager's approver off; the publish's time to
// certificate is measured both ways (the target: at most 50 ms more at p50). Then a process holding the driver's service
// account token bound to another Node tries, again and again, to obtain a certificate for a pod
// of this node: naming this node it is refused by the apiserver, naming its own node it is
// denied by the approver, naming no node it is refused too. It obtains none.
func (c *cluster) storyNodeBound(ctx context.Context) (r result, f *nodeBoundFigures) {
	r.story = "12 node-bound issuance"
	f = &nodeBoundFigures{}
	fail := func(err error) (result, *nodeBoundFigures) {
		r.detail = err.Error()
		return r, f
	}
	var err error
	if f.without, err = c.publishToCertificate(ctx, "nb-plain", nodeBoundPods); err != nil {
		return fail(fmt.Errorf("with cert-manager's approver: %w", err))
	}

	restore, err := c.useNodeBoundApproval(ctx)
	defer restore()
	if err != nil {
		return fail(err)
	}
	attacker, err := c.otherNodeDriver(ctx)
	if err != nil {
		return fail(err)
	}
	defer attacker.cleanUp(c)
	// The policy is in force once it refuses the attacker's request naming this node.
	if err := poll(ctx, "the node-bound policy to be in force", 100*time.Millisecond, time.Minute, func() (bool, error) {
		_, err := attacker.create(ctx, nodeName, nil)
		return err != nil, nil
	}); err != nil {
		return fail(err)
	}
	if f.with, err = c.publishToCertificate(ctx, "nb-bound", nodeBoundPods); err != nil {
		return fail(fmt.Errorf("with the example approver and the policy: %w", err))
	}

	const target = "nb-target"
	if err := c.createPod(ctx, target, time.Hour, 0, nil); err != nil {
		return fail(err)
	}
	defer func() { _ = c.deletePod(ctx, target) }()
	if _, _, bad, err := c.waitSerials(ctx, target, target+"'s certificate", 1, 2*time.Minute); err != nil || bad != "" {
		return fail(fmt.Errorf("%s: %v %s", target, err, bad))
	}
	pod, err := c.kube.CoreV1().Pods(namespace).Get(ctx, target, metav1.GetOptions{})
	if err != nil {
		return fail(err)
	}
	if err := c.approvedByExampleApprover(ctx, target); err != nil {
		return fail(err)
	}
	refused, denied, err := attacker.tryFor(ctx, pod)
	if err != nil {
		return fail(err)
	}

	// The time is a figure to read, not a pass mark: the story passes on what the attacker
	// obtains.
	without, with := percentile(f.without, 50), percentile(f.with, 50)
	r.ok = true
	r.detail = fmt.Sprintf("publish -> certificate written p50 %v with cert-manager's approver, %v with the example approver and the policy (%+v, target at most +50ms); "+
		"another node's driver token: %d requests naming this node or none refused by the apiserver, %d naming its own node denied by the approver, no certificate",
		without, with, (with - without).Round(time.Millisecond), refused, denied)
	return r, f
}

// publishToCertificate creates pods pods one after the other, each once the one before has its
// certificate (the time measured is a publish's, not a queue's), and returns, for each, the time
// from the driver's publish to its certificate written (the driver's journal); the pods are
// deleted before it returns.
func (c *cluster) publishToCertificate(ctx context.Context, prefix string, pods int) ([]time.Duration, error) {
	var names []string
	defer func() {
		for _, name := range names {
			_ = c.kube.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{})
		}
		for _, name := range names {
			_ = c.deletePod(ctx, name)
		}
	}()
	for i := range pods {
		name := fmt.Sprintf("%s-%02d", prefix, i)
		names = append(names, name)
		if err := c.createPod(ctx, name, time.Hour, 0, nil); err != nil {
			return nil, err
		}
		if _, _, bad, err := c.waitSerials(ctx, name, name+"'s certificate in the container", 1, 2*time.Minute); err != nil || bad != "" {
			return nil, fmt.Errorf("%s: %v %s", name, err, bad)
		}
	}
	j, err := c.journal()
	if err != nil {
		return nil, err
	}
	var out []time.Duration
	for _, name := range names {
		published, written := j[name]["publish"], j[name]["written"]
		if published.IsZero() || written.IsZero() {
			return nil, fmt.Errorf("%s: publish %v, written %v in the journal", name, published, written)
		}
		out = append(out, written.Sub(published))
	}
	return out, nil
}

// useNodeBoundApproval turns cert-manager's approver off, starts the example approver as its
// own service account and applies the node-bound admission policy; restore undoes all three.
func (c *cluster) useNodeBoundApproval(ctx context.Context) (restore func(), err error) {
	var undo []func()
	restore = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	c.stopCertManager()
	undo = append(undo, func() {
		c.stopCertManager()
		if err := c.startCertManager(); err != nil {
			logf("restarting cert-manager's controllers: %v", err)
		}
	})
	if err := c.startCertManager("certificaterequests-issuer-ca", "issuers", "clusterissuers"); err != nil {
		return restore, err
	}

	objs, err := deployObjects("approver.yaml", "node-bound-policy.yaml")
	if err != nil {
		return restore, err
	}
	var sa *corev1.ServiceAccount
	for _, obj := range objs {
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			sa = o
		case *admissionv1.ValidatingAdmissionPolicy:
			// The driver's requests may name the stories' issuers, which the approver decides.
			if err := setPolicyIssuers(o, "Issuer/"+issuerName, "ClusterIssuer/"+clusterIssuerName); err != nil {
				return restore, err
			}
			undo = append(undo, func() {
				_ = c.kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(context.Background(), o.Name, metav1.DeleteOptions{})
			})
		case *admissionv1.ValidatingAdmissionPolicyBinding:
			undo = append(undo, func() {
				_ = c.kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(context.Background(), o.Name, metav1.DeleteOptions{})
			})
		}
		if obj.GetObjectKind().GroupVersionKind().Kind == "Deployment" {
			continue // the approver runs as a process of the node
		}
		if err := createDeployObject(ctx, c.kube, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return restore, err
		}
	}
	if sa == nil {
		return restore, errors.New("examples/deploy/approver.yaml names no service account")
	}
	kubeconfig := filepath.Join(c.n.dir, "approver-kubeconfig")
	if err := writeTokenKubeconfig(ctx, c.kube, c.kubeconfig, kubeconfig, sa, nodeName); err != nil {
		return restore, err
	}
	// Its pod-spec rule calls the stories' driver's generator (the example's, with the Issuer as
	// the default issuer).
	if err := c.n.startProcess("approver", filepath.Join(c.binDir, "approver"), "--kubeconfig", kubeconfig,
		"--issuer", "Issuer/"+issuerName, "--issuer", "ClusterIssuer/"+clusterIssuerName,
		"--rules=pod-spec", "--driver-name="+driverName, "--driver-issuer=Issuer/"+issuerName); err != nil {
		return restore, err
	}
	undo = append(undo, func() {
		if p := c.n.processNamed("approver"); p != nil {
			c.n.stopProcess(p)
		}
	})
	logf("node-bound approval: cert-manager's approver off, the example approver started, the policy applied")
	return restore, nil
}

// approvedByExampleApprover checks that each request of the pod was approved by the example
// approver and issued.
func (c *cluster) approvedByExampleApprover(ctx context.Context, pod string) error {
	list, err := c.cm.CertmanagerV1().CertificateRequests(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	return approvedAndIssued(list.Items, pod)
}

// requestHas reports whether req has the condition typ True, with reason (any when empty).
func requestHas(req *cmapi.CertificateRequest, typ cmapi.CertificateRequestConditionType, reason string) bool {
	for _, cond := range req.Status.Conditions {
		if cond.Type == typ && cond.Status == cmmeta.ConditionTrue && (reason == "" || cond.Reason == reason) {
			return true
		}
	}
	return false
}

// attacker holds the driver's service-account token bound to otherNode. The story watches what
// becomes of its requests with the administrator's client (observer): the driver's account may
// not get a request (examples/deploy/rbac.yaml grants the consumers' charts' verbs).
type attacker struct {
	cm       cmclient.Interface
	observer cmclient.Interface
	created  []string // names of the requests it managed to create
}

// otherNodeDriver creates the Node otherNode (no kubelet runs it) and returns a client holding
// the driver's service-account token bound to it, as root on that node would hold it.
func (c *cluster) otherNodeDriver(ctx context.Context) (*attacker, error) {
	if _, err := c.kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: otherNode}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	client, err := c.driverClientOn(ctx, otherNode, "other-node-kubeconfig")
	if err != nil {
		return nil, err
	}
	return &attacker{cm: client, observer: c.cm}, nil
}

// driverClientOn is a client holding the driver's service-account token (examples/deploy's
// rbac.yaml) bound to node, as root on that node holds it (the driver's pod's projected token);
// its kubeconfig is the run directory's file.
func (c *cluster) driverClientOn(ctx context.Context, node, file string) (cmclient.Interface, error) {
	objs, err := deployObjects("rbac.yaml")
	if err != nil {
		return nil, err
	}
	var sa *corev1.ServiceAccount
	for _, obj := range objs {
		if o, ok := obj.(*corev1.ServiceAccount); ok {
			sa = o
		}
	}
	if sa == nil {
		return nil, errors.New("examples/deploy/rbac.yaml names no service account")
	}
	kubeconfig := filepath.Join(c.n.dir, file)
	if err := writeTokenKubeconfig(ctx, c.kube, c.kubeconfig, kubeconfig, sa, node); err != nil {
		return nil, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	return cmclient.NewForConfig(cfg)
}

// cleanUp deletes the requests the attacker created and the Node otherNode.
func (a *attacker) cleanUp(c *cluster) {
	ctx := context.Background()
	for _, name := range a.created {
		_ = c.cm.CertmanagerV1().CertificateRequests(namespace).Delete(ctx, name, metav1.DeleteOptions{})
	}
	_ = c.kube.CoreV1().Nodes().Delete(ctx, otherNode, metav1.DeleteOptions{})
}

// create makes a request as the library on node would for pod (labels, annotations, owner; no
// annotation and no label when node is empty), with a CSR for the pod's name.
func (a *attacker) create(ctx context.Context, node string, pod *corev1.Pod) (*cmapi.CertificateRequest, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	cn := "nb-target"
	if pod != nil {
		cn = pod.Name
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn}}, key)
	if err != nil {
		return nil, err
	}
	req := &cmapi.CertificateRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "attacker-", Namespace: namespace},
		Spec: cmapi.CertificateRequestSpec{
			Request:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			IssuerRef: cmmeta.IssuerReference{Name: issuerName, Kind: "Issuer", Group: "cert-manager.io"},
			Usages:    []cmapi.KeyUsage{cmapi.UsageDigitalSignature, cmapi.UsageServerAuth},
		},
	}
	if node != "" {
		req.Labels = map[string]string{api.NodeIDHashLabelKey: util.HashIdentifier(node), api.VolumeIDHashLabelKey: util.HashIdentifier("attacker-" + cn)}
		req.Annotations = map[string]string{approval.NodeNameAnnotationKey: node}
	}
	if pod != nil {
		req.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}}
		if node != "" {
			req.Annotations[approval.PodNamespaceAnnotationKey] = pod.Namespace
			req.Annotations[approval.PodNameAnnotationKey] = pod.Name
			req.Annotations[approval.PodUIDAnnotationKey] = string(pod.UID)
			req.Annotations[approval.PodServiceAccountAnnotationKey] = pod.Spec.ServiceAccountName
		}
	}
	created, err := a.cm.CertmanagerV1().CertificateRequests(namespace).Create(ctx, req, metav1.CreateOptions{})
	if err == nil {
		a.created = append(a.created, created.Name)
	}
	return created, err
}

// tryFor tries attackerTries times each way to obtain a certificate for pod (naming this node,
// naming its own node, naming none), and checks that every try was refused by the apiserver with
// the policy's reason or created and denied by the example approver with the check's reason;
// none was ever issued.
func (a *attacker) tryFor(ctx context.Context, pod *corev1.Pod) (refused, denied int, err error) {
	for range attackerTries {
		_, err := a.create(ctx, nodeName, pod)
		if err == nil || !strings.Contains(err.Error(), "the driver's token is bound to node "+otherNode+", but the request names node \""+nodeName+"\"") {
			return refused, denied, fmt.Errorf("a request naming this node: %v, want the policy's refusal", err)
		}
		refused++
		req, err := a.create(ctx, otherNode, pod)
		if err != nil {
			return refused, denied, fmt.Errorf("a request naming its own node: %w", err)
		}
		want := "pod " + namespace + "/" + pod.Name + " is bound to node " + nodeName + ", not to " + otherNode
		if err := poll(ctx, "the example approver to deny "+req.Name, 50*time.Millisecond, time.Minute, func() (bool, error) {
			got, err := a.observer.CertmanagerV1().CertificateRequests(namespace).Get(ctx, req.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if requestHas(got, cmapi.CertificateRequestConditionApproved, controller.Reason) {
				return false, fmt.Errorf("request %s was approved", got.Name)
			}
			for _, cond := range got.Status.Conditions {
				if cond.Type == cmapi.CertificateRequestConditionDenied && cond.Reason == controller.Reason && strings.Contains(cond.Message, want) {
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			return refused, denied, err
		}
		denied++
		if _, err := a.create(ctx, "", pod); err == nil || !strings.Contains(err.Error(), `the driver's token is bound to node `+otherNode+`, but the request names node ""`) {
			return refused, denied, fmt.Errorf("a request without the library's names: %v, want the policy's refusal", err)
		}
		refused++
	}
	// The requests it could create were all denied; none has a certificate.
	for _, name := range a.created {
		got, err := a.observer.CertmanagerV1().CertificateRequests(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return refused, denied, err
		}
		if len(got.Status.Certificate) != 0 || requestHas(got, cmapi.CertificateRequestConditionApproved, "") {
			return refused, denied, fmt.Errorf("the attacker's request %s was approved or issued: %+v", name, got.Status.Conditions)
		}
	}
	return refused, denied, nil
}

// setPolicyIssuers sets the node-bound policy's issuers variable: the issuers the driver's
// requests may name.
func setPolicyIssuers(policy *admissionv1.ValidatingAdmissionPolicy, issuers ...string) error {
	for i, v := range policy.Spec.Variables {
		if v.Name == "issuers" {
			policy.Spec.Variables[i].Expression = `["` + strings.Join(issuers, `", "`) + `"]`
			return nil
		}
	}
	return fmt.Errorf("policy %s has no issuers variable", policy.Name)
}

// printNodeBoundFigures prints story 12's table.
func printNodeBoundFigures(f *nodeBoundFigures) {
	if f == nil || len(f.without) == 0 {
		return
	}
	fmt.Println()
	fmt.Println("story 12, publish -> certificate written, per pod, one pod at a time (p50 / p90 / max):")
	for _, row := range []struct {
		name string
		ds   []time.Duration
	}{{"cert-manager's approver", f.without}, {"example approver + policy", f.with}} {
		if len(row.ds) > 0 {
			fmt.Printf("%-28s %v / %v / %v (%d pods)\n", row.name, percentile(row.ds, 50), percentile(row.ds, 90), percentile(row.ds, 100), len(row.ds))
		}
	}
}
