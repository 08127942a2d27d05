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

// Package deploy holds what an operator applies to run the example driver (examples/csi-driver):
// the CSIDriver, the DaemonSet, the service account and its RBAC, the admission policies for the
// pod condition and for node-bound issuance, the example approver (examples/approver) with its
// RBAC, the alerts and a dashboard. Its tests decode every manifest strictly and check
// that the alerts and the dashboard name only series the library emits; the integration tier
// has a real kube-apiserver accept the manifests, and the nested module promql parses every
// expression with Prometheus's own parser.
package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/fake"
	cminformers "github.com/cert-manager/cert-manager/pkg/client/informers/externalversions"
	"github.com/prometheus/client_golang/prometheus"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/cert-manager/csi-lib/internal/api"
	"github.com/cert-manager/csi-lib/internal/api/util"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/metrics"
	"github.com/cert-manager/csi-lib/storage"
	"github.com/cert-manager/csi-lib/test/testkit/manifests"
)

// prometheusRule is the part of the Prometheus operator's PrometheusRule that the alerts use;
// decoding into it with unknown fields refused catches a misspelt field.
type prometheusRule struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         string            `json:"for"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// TestManifestsDecodeStrictly: every document of every YAML file is a Kubernetes object whose
// fields its type knows (the PrometheusRule's, those the Prometheus operator's type has).
func TestManifestsDecodeStrictly(t *testing.T) {
	kinds := map[string]int{}
	for _, doc := range documents(t) {
		if kind, ok := strictKind(doc.raw); ok {
			var err error
			switch kind {
			case "PrometheusRule":
				_, err = decodeRule(doc.raw)
			case "PodMonitor":
				err = decodeStrictly(doc.raw, &podMonitor{})
			case "ClusterIssuer":
				err = decodeStrictly(doc.raw, &cmapi.ClusterIssuer{})
			}
			if err != nil {
				t.Errorf("%s: %v", doc.file, err)
			}
			kinds[kind]++
			continue
		}
		obj, err := manifests.Decode(doc.raw)
		if err != nil {
			t.Errorf("%s: %v", doc.file, err)
			continue
		}
		kinds[obj.GetObjectKind().GroupVersionKind().Kind]++
	}
	for _, kind := range []string{"CSIDriver", "DaemonSet", "Deployment", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "PrometheusRule", "PodMonitor", "ClusterIssuer"} {
		if kinds[kind] == 0 {
			t.Errorf("no %s among the manifests (%v)", kind, kinds)
		}
	}
}

// TestDriverRBACIsTheCharts: the driver's ClusterRole grants on CertificateRequests exactly the
// verbs cert-manager csi-driver's and csi-driver-spiffe's charts grant (watch, create, delete,
// list): the library needs nothing more, so a chart's existing RBAC runs it.
func TestDriverRBACIsTheCharts(t *testing.T) {
	found := false
	for _, doc := range documents(t) {
		if doc.file != "rbac.yaml" {
			continue
		}
		obj, err := manifests.Decode(doc.raw)
		if err != nil {
			t.Fatal(err)
		}
		role, ok := obj.(*rbacv1.ClusterRole)
		if !ok {
			continue
		}
		for _, rule := range role.Rules {
			if !slices.Contains(rule.Resources, "certificaterequests") {
				continue
			}
			found = true
			got := slices.Sorted(slices.Values(rule.Verbs))
			if want := []string{"create", "delete", "list", "watch"}; !slices.Equal(got, want) || !slices.Equal(rule.APIGroups, []string{"cert-manager.io"}) {
				t.Errorf("ClusterRole %s grants %v on %v certificaterequests, want exactly %v on cert-manager.io", role.Name, rule.Verbs, rule.APIGroups, want)
			}
		}
	}
	if !found {
		t.Fatal("rbac.yaml has no ClusterRole rule on certificaterequests")
	}
}

// TestDriverRBACIsNothingMore: the driver's ClusterRole grants what the example driver calls and
// nothing more: the charts' rule on CertificateRequests, get, list and watch on pods (its pod
// informer; get for Options.PodCondition), and on core Events the create and patch of client-go's
// recorder (Options.EventRecorder, what manager.NewManager's start-up check asks for): no update,
// no events.k8s.io.
func TestDriverRBACIsNothingMore(t *testing.T) {
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{"cert-manager.io"}, Resources: []string{"certificaterequests"}, Verbs: []string{"create", "delete", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}
	role := decodeSet(t).clusterRoles["csi-driver"]
	if role == nil {
		t.Fatal("no ClusterRole csi-driver")
	}
	var got []rbacv1.PolicyRule
	for _, r := range role.Rules {
		r.Verbs = slices.Sorted(slices.Values(r.Verbs))
		got = append(got, r)
	}
	if !slices.EqualFunc(got, want, func(a, b rbacv1.PolicyRule) bool {
		return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) && slices.Equal(a.Verbs, b.Verbs) &&
			len(a.ResourceNames) == 0 && len(a.NonResourceURLs) == 0
	}) {
		t.Errorf("ClusterRole csi-driver grants\n%v\nwant exactly\n%v", got, want)
	}
}

// TestAlertsAreComplete: every alert waits out a missed scrape ("for") and says what happened
// and where (summary, description).
func TestAlertsAreComplete(t *testing.T) {
	rules := 0
	for _, r := range alertRules(t) {
		for _, g := range r.Spec.Groups {
			for _, rule := range g.Rules {
				rules++
				if d, err := time.ParseDuration(rule.For); err != nil || d < time.Minute {
					t.Errorf("alert %s: for %q, want at least 1m", rule.Alert, rule.For)
				}
				for _, a := range []string{"summary", "description"} {
					if rule.Annotations[a] == "" {
						t.Errorf("alert %s has no %s", rule.Alert, a)
					}
				}
			}
		}
	}
	if rules < 4 {
		t.Fatalf("%d alert rules, want at least 4", rules)
	}
}

// seriesName matches the library's series in an expression.
var seriesName = regexp.MustCompile(`certmanager_csi_[a-z_]+`)

// TestExpressionsNameOnlyTheLibrarysSeries: every series an alert or the dashboard names is one
// the library emits, read from a registry on which every family has been recorded.
func TestExpressionsNameOnlyTheLibrarysSeries(t *testing.T) {
	emitted := emittedSeries(t)
	var exprs []string
	for _, r := range alertRules(t) {
		for _, g := range r.Spec.Groups {
			for _, rule := range g.Rules {
				exprs = append(exprs, rule.Expr)
			}
		}
	}
	dashboard, err := os.ReadFile("grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(dashboard, &d); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	for _, p := range d.Panels {
		for _, target := range p.Targets {
			exprs = append(exprs, target.Expr)
		}
	}
	named := 0
	for _, expr := range exprs {
		for _, name := range seriesName.FindAllString(expr, -1) {
			named++
			if !emitted[name] {
				t.Errorf("%q names %s, which the library does not emit", expr, name)
			}
		}
	}
	if named == 0 {
		t.Fatal("no expression names a series")
	}
}

// emittedSeries records every family of the library's metrics once (a request and a volume for
// the collector) and returns the names of the series a scrape shows.
func emittedSeries(t *testing.T) map[string]bool {
	t.Helper()
	client := fake.NewClientset()
	nodeHash := util.HashIdentifier("node-1")
	req := &cmapi.CertificateRequest{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "ns", Labels: map[string]string{
		api.NodeIDHashLabelKey: nodeHash, api.VolumeIDHashLabelKey: util.HashIdentifier("v"),
	}}, Spec: cmapi.CertificateRequestSpec{IssuerRef: cmmeta.IssuerReference{Name: "ca"}}}
	if _, err := client.CertmanagerV1().CertificateRequests("ns").Create(context.Background(), req, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	factory := cminformers.NewSharedInformerFactory(client, 0)
	lister := factory.Certmanager().V1().CertificateRequests().Lister()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	store := storage.NewMemoryFS()
	next := time.Now()
	if _, err := store.RegisterMetadata(metadata.Metadata{VolumeID: "v", TargetPath: "/t", NextIssuanceTime: &next}); err != nil {
		t.Fatal(err)
	}

	registry := prometheus.NewRegistry()
	m := metrics.New("node-1", nil, registry, store, lister)
	m.EnableExtendedMetrics()
	m.IncrementIssueCallCountTotal(nodeHash, "v")
	m.IncrementIssueErrorCountTotal(nodeHash, "v")
	m.IncrementGatePendingCountTotal(nodeHash, "v")
	m.ObservePublishToFirstCertificate(nodeHash, time.Second)
	m.SetAdmissionWaiting(nodeHash, 1)
	m.IncrementAdmissionWaits(nodeHash)
	m.SetVolumeStates(nodeHash, map[string]int{"issued": 1})
	families, err := registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	emitted := map[string]bool{}
	for _, f := range families {
		emitted[f.GetName()] = true
		if f.GetType().String() == "HISTOGRAM" {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				emitted[f.GetName()+suffix] = true
			}
		}
	}
	if len(emitted) < 12 {
		t.Fatalf("only %d series emitted: %v", len(emitted), emitted)
	}
	return emitted
}

type manifest struct {
	file string
	raw  []byte
}

// manifestFiles are the directory's YAML files of Kubernetes objects (all but the
// kustomization).
func manifestFiles() ([]string, error) {
	files, err := filepath.Glob("*.yaml")
	return slices.DeleteFunc(files, func(f string) bool { return f == "kustomization.yaml" }), err
}

// documents returns every YAML document of the directory's files.
func documents(t *testing.T) []manifest {
	t.Helper()
	files, err := manifestFiles()
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	var out []manifest
	for _, f := range files {
		docs, err := manifests.Documents(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range docs {
			out = append(out, manifest{file: f, raw: doc})
		}
	}
	return out
}

func alertRules(t *testing.T) []prometheusRule {
	t.Helper()
	var rules []prometheusRule
	for _, doc := range documents(t) {
		if !bytes.Contains(doc.raw, []byte("kind: PrometheusRule")) {
			continue
		}
		r, err := decodeRule(doc.raw)
		if err != nil {
			t.Fatalf("%s: %v", doc.file, err)
		}
		rules = append(rules, r)
	}
	if len(rules) == 0 {
		t.Fatal("no PrometheusRule")
	}
	return rules
}

func decodeRule(raw []byte) (prometheusRule, error) {
	var r prometheusRule
	return r, decodeStrictly(raw, &r)
}

// strictKind returns the kind of a document that is not a Kubernetes built-in type (the
// Prometheus operator's and cert-manager's), which the tests decode into their own types.
func strictKind(raw []byte) (string, bool) {
	for _, kind := range []string{"PrometheusRule", "PodMonitor", "ClusterIssuer"} {
		if bytes.Contains(raw, []byte("\nkind: "+kind+"\n")) {
			return kind, true
		}
	}
	return "", false
}

// decodeStrictly decodes a YAML document into v, refusing fields v does not have.
func decodeStrictly(raw []byte, v any) error {
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}
