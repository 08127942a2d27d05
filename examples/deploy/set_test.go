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

package deploy

import (
	"flag"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/cert-manager/csi-lib/examples/approver/controller"
	"github.com/cert-manager/csi-lib/examples/csi-driver/plugin"
	"github.com/cert-manager/csi-lib/test/testkit/manifests"
)

// podMonitor is the part of the Prometheus operator's PodMonitor that the set uses.
type podMonitor struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		Selector            metav1.LabelSelector `json:"selector"`
		PodMetricsEndpoints []struct {
			Port string `json:"port"`
		} `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

// set is the example deployment, decoded.
type set struct {
	csiDriver      *storagev1.CSIDriver
	daemonSet      *appsv1.DaemonSet
	deployments    map[string]*appsv1.Deployment
	clusterRoles   map[string]*rbacv1.ClusterRole
	bindings       map[string]*rbacv1.ClusterRoleBinding
	policies       map[string]*admissionv1.ValidatingAdmissionPolicy
	clusterIssuers map[string]*cmapi.ClusterIssuer
	podMonitors    []*podMonitor
}

func decodeSet(t *testing.T) *set {
	t.Helper()
	s := &set{deployments: map[string]*appsv1.Deployment{}, clusterRoles: map[string]*rbacv1.ClusterRole{},
		bindings: map[string]*rbacv1.ClusterRoleBinding{}, policies: map[string]*admissionv1.ValidatingAdmissionPolicy{},
		clusterIssuers: map[string]*cmapi.ClusterIssuer{}}
	for _, doc := range documents(t) {
		if kind, ok := strictKind(doc.raw); ok {
			switch kind {
			case "PodMonitor":
				pm := &podMonitor{}
				if err := decodeStrictly(doc.raw, pm); err != nil {
					t.Fatal(err)
				}
				s.podMonitors = append(s.podMonitors, pm)
			case "ClusterIssuer":
				ci := &cmapi.ClusterIssuer{}
				if err := decodeStrictly(doc.raw, ci); err != nil {
					t.Fatal(err)
				}
				s.clusterIssuers[ci.Name] = ci
			}
			continue
		}
		obj, err := manifests.Decode(doc.raw)
		if err != nil {
			t.Fatalf("%s: %v", doc.file, err)
		}
		switch o := obj.(type) {
		case *storagev1.CSIDriver:
			s.csiDriver = o
		case *appsv1.DaemonSet:
			s.daemonSet = o
		case *appsv1.Deployment:
			s.deployments[o.Name] = o
		case *rbacv1.ClusterRole:
			s.clusterRoles[o.Name] = o
		case *rbacv1.ClusterRoleBinding:
			s.bindings[o.Name] = o
		case *admissionv1.ValidatingAdmissionPolicy:
			s.policies[o.Name] = o
		}
	}
	if s.csiDriver == nil || s.daemonSet == nil || s.deployments["csi-approver"] == nil || s.deployments["example-app"] == nil {
		t.Fatal("the set lacks the CSIDriver, the DaemonSet, the approver's or the application's Deployment")
	}
	return s
}

// container returns the named container of a pod template.
func container(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %s", name)
	return corev1.Container{}
}

// flagValue returns the value of --name=value among args ("" and false when absent).
func flagValue(args []string, name string) (string, bool) {
	var value string
	found := false
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			value, found = v, true
		} else if a == "--"+name {
			value, found = "true", true
		}
	}
	return value, found
}

// TestKustomizationListsEveryManifest: kubectl apply -k applies every manifest of the directory
// (and names only those).
func TestKustomizationListsEveryManifest(t *testing.T) {
	raw, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
		Images    []struct {
			Name string `json:"name"`
		} `json:"images"`
	}
	if err := yaml.Unmarshal(raw, &k); err != nil {
		t.Fatal(err)
	}
	files, err := manifestFiles()
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(slices.Values(k.Resources)); !slices.Equal(got, files) {
		t.Errorf("kustomization.yaml lists %v, the directory has %v", got, files)
	}
	s := decodeSet(t)
	images := []string{container(t, s.daemonSet.Spec.Template.Spec, "csi-driver").Image, container(t, s.deployments["csi-approver"].Spec.Template.Spec, "approver").Image}
	for _, img := range k.Images {
		if !slices.Contains(images, img.Name) {
			t.Errorf("kustomization.yaml sets the tag of %s, which no container of the set runs (%v)", img.Name, images)
		}
	}
}

// TestSetIsConsistent: the defaults of the set's objects agree with each other, so that the set
// applied whole works (make e2e applies it on the real node).
func TestSetIsConsistent(t *testing.T) {
	s := decodeSet(t)
	pod := s.daemonSet.Spec.Template.Spec
	driver := container(t, pod, "csi-driver")
	app := s.deployments["example-app"].Spec.Template.Spec
	approverArgs := container(t, s.deployments["csi-approver"].Spec.Template.Spec, "approver").Args

	// Every argument of the driver is a flag the example driver defines (csi-driver's names
	// where it has them, plugin.BindFlags).
	fs := flag.NewFlagSet("csi-driver", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	plugin.BindFlags(fs, &plugin.Config{})
	if err := fs.Parse(driver.Args); err != nil || fs.NArg() != 0 {
		t.Errorf("the DaemonSet's driver arguments %v are not the driver's flags: %v (left over: %v)", driver.Args, err, fs.Args())
	}

	// The driver's name.
	if name, _ := flagValue(driver.Args, "driver-name"); name != s.csiDriver.Name {
		t.Errorf("the DaemonSet's --driver-name is %q, the CSIDriver is %q", name, s.csiDriver.Name)
	}
	for _, v := range app.Volumes {
		if v.CSI != nil && v.CSI.Driver != s.csiDriver.Name {
			t.Errorf("the application's volume %s names driver %q, the CSIDriver is %q", v.Name, v.CSI.Driver, s.csiDriver.Name)
		}
	}

	// The node: the Kubernetes node name (the node-bound policy compares it with the token's).
	if id, _ := flagValue(driver.Args, "node-id"); id != "$(NODE_NAME)" || !slices.ContainsFunc(driver.Env, func(e corev1.EnvVar) bool {
		return e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName"
	}) {
		t.Errorf("the driver's --node-id is %q, not the pod's spec.nodeName through $(NODE_NAME)", id)
	}

	// The issuer: the driver's, the approver's, and an issuer of the set.
	kind, _ := flagValue(driver.Args, "issuer-kind")
	name, _ := flagValue(driver.Args, "issuer-name")
	if kind != "ClusterIssuer" || s.clusterIssuers[name] == nil {
		t.Errorf("the driver's issuer %s/%s is not a ClusterIssuer of the set (%v)", kind, name, slices.Sorted(maps.Keys(s.clusterIssuers)))
	}
	if issuer, _ := flagValue(approverArgs, "issuer"); issuer != kind+"/"+name {
		t.Errorf("the approver serves --issuer=%s, the driver requests from %s/%s", issuer, kind, name)
	}

	// The approver's rules: its arguments are its flags; its pod-spec rule reads the driver's
	// volumes with the driver's default issuer; the node-bound policy lets the driver name the
	// approver's issuers alone.
	approverFlags := flag.NewFlagSet("approver", flag.ContinueOnError)
	approverFlags.SetOutput(io.Discard)
	approverCfg := controller.DefaultConfig()
	controller.BindFlags(approverFlags, &approverCfg)
	if err := approverFlags.Parse(approverArgs); err != nil || approverFlags.NArg() != 0 {
		t.Errorf("the approver's arguments %v are not its flags: %v", approverArgs, err)
	}
	if _, err := approverCfg.PodRules(); err != nil || !slices.Contains(approverCfg.Rules, controller.RulePodSpec) {
		t.Errorf("the approver runs rules %v (%v), want the pod-spec rule among them", approverCfg.Rules, err)
	}
	if approverCfg.DriverName != s.csiDriver.Name || approverCfg.DriverIssuer.Kind != kind || approverCfg.DriverIssuer.Name != name {
		t.Errorf("the approver's pod-spec rule reads driver %s with default issuer %+v; the driver is %s with %s/%s",
			approverCfg.DriverName, approverCfg.DriverIssuer, s.csiDriver.Name, kind, name)
	}
	var issuers []string
	for _, ref := range approverCfg.Issuers {
		issuers = append(issuers, ref.Kind+"/"+ref.Name)
	}
	if policy := s.policies["csi-certificate-node-bound"]; policy == nil || !slices.ContainsFunc(policy.Spec.Variables, func(v admissionv1.Variable) bool {
		return v.Name == "issuers" && v.Expression == `["`+strings.Join(issuers, `", "`)+`"]`
	}) {
		t.Errorf("the node-bound policy's issuers are not the approver's %v", issuers)
	}
	signer := strings.ToLower(kind) + "s.cert-manager.io/" + name
	if !slices.ContainsFunc(s.clusterRoles["csi-approver"].Rules, func(r rbacv1.PolicyRule) bool {
		return slices.Contains(r.Resources, "signers") && slices.Contains(r.Verbs, "approve") && slices.Contains(r.ResourceNames, signer)
	}) {
		t.Errorf("the approver may not approve for %s", signer)
	}

	// The pod condition: the driver keeps it, its policy lets it, the application waits for it.
	// The readiness gate alone would start containers before their certificate.
	condition, ok := flagValue(driver.Args, "pod-condition")
	if _, gate := flagValue(driver.Args, "gate-on-pod-ip"); gate && !ok {
		t.Error("the driver gates on the pod's IP (ContinueOnNotReady) without --pod-condition: containers start before their certificate")
	}
	if policy := s.policies["csi-certificate-pod-condition"]; policy == nil || !slices.ContainsFunc(policy.Spec.Variables, func(v admissionv1.Variable) bool {
		return v.Name == "type" && v.Expression == `"`+condition+`"`
	}) {
		t.Errorf("the pod-condition policy does not confine the driver to its --pod-condition %q", condition)
	}
	if !slices.ContainsFunc(app.ReadinessGates, func(g corev1.PodReadinessGate) bool { return string(g.ConditionType) == condition }) {
		t.Errorf("the application's readiness gates %v do not wait for the driver's condition %q", app.ReadinessGates, condition)
	}

	// The driver's service account: bound to its roles, named by both policies.
	account := "system:serviceaccount:" + s.daemonSet.Namespace + ":" + pod.ServiceAccountName
	for _, binding := range []string{"csi-driver", "csi-driver-pod-condition"} {
		b := s.bindings[binding]
		if b == nil || !slices.ContainsFunc(b.Subjects, func(sub rbacv1.Subject) bool {
			return sub.Kind == "ServiceAccount" && sub.Namespace == s.daemonSet.Namespace && sub.Name == pod.ServiceAccountName
		}) {
			t.Errorf("ClusterRoleBinding %s does not bind the driver's account %s", binding, account)
		}
	}
	for name, policy := range s.policies {
		text := ""
		for _, v := range policy.Spec.Variables {
			text += v.Expression
		}
		for _, m := range policy.Spec.MatchConditions {
			text += m.Expression
		}
		if !strings.Contains(text, `"`+account+`"`) {
			t.Errorf("policy %s does not name the driver's account %s", name, account)
		}
	}

	// The PodMonitor scrapes the driver's metrics port, where the driver serves.
	if len(s.podMonitors) != 1 {
		t.Fatalf("%d PodMonitors", len(s.podMonitors))
	}
	pm := s.podMonitors[0]
	sel, err := metav1.LabelSelectorAsSelector(&pm.Spec.Selector)
	if err != nil || pm.Metadata.Namespace != s.daemonSet.Namespace || !sel.Matches(labels.Set(s.daemonSet.Spec.Template.Labels)) {
		t.Errorf("the PodMonitor (%s, %v) does not select the driver's pods", pm.Metadata.Namespace, pm.Spec.Selector)
	}
	addr, _ := flagValue(driver.Args, "metrics-bind-address")
	for _, ep := range pm.Spec.PodMetricsEndpoints {
		if !slices.ContainsFunc(driver.Ports, func(p corev1.ContainerPort) bool {
			return p.Name == ep.Port && strings.HasSuffix(addr, ":"+strconv.Itoa(int(p.ContainerPort)))
		}) {
			t.Errorf("the PodMonitor scrapes port %q, the driver serves /metrics on %q (ports %v)", ep.Port, addr, driver.Ports)
		}
	}
}

// kubePrometheusStackRelease is the Helm release name of kube-prometheus-stack's install docs,
// whose Prometheus selects PodMonitors and PrometheusRules labelled release: <release name>
// (podMonitorSelectorNilUsesHelmValues, ruleSelectorNilUsesHelmValues).
const kubePrometheusStackRelease = "kube-prometheus-stack"

// TestMonitoringIsSelectedByKubePrometheusStack: the PodMonitor and the PrometheusRule carry the
// label a stock kube-prometheus-stack's Prometheus selects them by.
func TestMonitoringIsSelectedByKubePrometheusStack(t *testing.T) {
	s := decodeSet(t)
	objects := map[string]map[string]string{}
	for _, pm := range s.podMonitors {
		objects["PodMonitor "+pm.Metadata.Name] = pm.Metadata.Labels
	}
	for _, r := range alertRules(t) {
		objects["PrometheusRule "+r.Metadata.Name] = r.Metadata.Labels
	}
	if len(objects) < 2 {
		t.Fatalf("monitoring objects: %v", slices.Sorted(maps.Keys(objects)))
	}
	for name, l := range objects {
		if l["release"] != kubePrometheusStackRelease {
			t.Errorf("%s has the label release=%q, want %q", name, l["release"], kubePrometheusStackRelease)
		}
	}
}
