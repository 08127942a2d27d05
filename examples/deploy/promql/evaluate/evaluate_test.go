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

package evaluate

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// target is what a PodMonitor adds to every series of the driver's pod.
var target = map[string]string{
	"namespace": "csi-driver",
	"pod":       "csi-driver-x7k2p",
	"container": "driver",
	"endpoint":  "metrics",
	"job":       "csi-driver/csi-driver",
	"instance":  "10.0.0.7:9402",
}

var at = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func deployExpressions(t *testing.T) []Expression {
	t.Helper()
	exprs, err := ReadExpressions("../../prometheusrule.yaml", "../../grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(exprs) < 8 {
		t.Fatalf("found %d expressions", len(exprs))
	}
	return exprs
}

func completeScrape(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile("testdata/complete.prom")
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// without drops a family (its HELP, TYPE and samples) from an exposition.
func without(scrape []byte, family string) []byte {
	var out []string
	for _, line := range strings.SplitAfter(string(scrape), "\n") {
		if strings.HasPrefix(line, family+"{") || strings.HasPrefix(line, family+" ") ||
			strings.HasPrefix(line, "# HELP "+family+" ") || strings.HasPrefix(line, "# TYPE "+family+" ") {
			continue
		}
		out = append(out, line)
	}
	return []byte(strings.Join(out, ""))
}

func evaluate(t *testing.T, scrape []byte, target map[string]string, exprs []Expression, opts Options) map[string]Result {
	t.Helper()
	results, err := Evaluate(context.Background(), scrape, target, at, exprs, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != len(exprs) {
		t.Fatalf("%d results for %d expressions", len(results), len(exprs))
	}
	out := map[string]Result{}
	for _, r := range results {
		out[r.Name] = r
	}
	return out
}

// TestCompleteScrape: with every family the library serves (EnableExtendedMetrics) and the
// PodMonitor's labels, every alert and dashboard expression evaluates, and every selector of
// each selects a series.
func TestCompleteScrape(t *testing.T) {
	exprs := deployExpressions(t)
	results := evaluate(t, completeScrape(t), target, exprs, Options{})
	for _, e := range exprs {
		r := results[e.Name]
		if r.Failed() {
			t.Errorf("%s: %q: %s", e.Name, e.Expr, strings.Join(r.Problems, "; "))
		}
		if len(r.Selectors) == 0 {
			t.Errorf("%s: no selector", e.Name)
		}
		for _, s := range r.Selectors {
			if s.Series == 0 {
				t.Errorf("%s: %s selects no series", e.Name, s.Selector)
			}
		}
		t.Logf("%s: %d series, %v, notes %q", e.Name, r.Series, r.Selectors, r.Notes)
	}
	// Dashboard targets without a filter return series.
	if r := results[`panel "Volumes by state" A`]; r.Series != 6 {
		t.Errorf("Volumes by state: %d series, want 6", r.Series)
	}
}

// TestMissingFamily: without a family an alert reads, that alert fails, saying which selector
// selects nothing, and the others still pass.
func TestMissingFamily(t *testing.T) {
	exprs := deployExpressions(t)
	for _, tc := range []struct {
		family string
		fail   []string
	}{
		{"certmanager_csi_volumes", []string{"alert CSICertificateExpired", "alert CSICertificateRenewalOverdue", "alert CSICertificateIssuanceFailing", "alert CSIReadinessGatePendingLong", `panel "Volumes by state" A`, `panel "Volumes not issued, by node" A`}},
		{"certmanager_csi_issue_errors_total", []string{"alert CSICertificateIssuanceFailing", `panel "Issuance errors per second" A`}},
		{"certmanager_csi_issue_gate_pending_total", []string{"alert CSIReadinessGatePendingLong", `panel "Gate-pending attempts per second" A`}},
	} {
		t.Run(tc.family, func(t *testing.T) {
			scrape := without(completeScrape(t), tc.family)
			if strings.Contains(string(scrape), tc.family+"{") {
				t.Fatal("the family is still in the scrape")
			}
			results := evaluate(t, scrape, target, exprs, Options{})
			for _, e := range exprs {
				r := results[e.Name]
				want := slices.Contains(tc.fail, e.Name)
				if r.Failed() != want {
					t.Errorf("%s: failed %v, want %v: %q", e.Name, r.Failed(), want, r.Problems)
					continue
				}
				if want && !strings.Contains(strings.Join(r.Problems, "; "), "the scrape has no "+tc.family) {
					t.Errorf("%s: problems %q do not name the missing family", e.Name, r.Problems)
				}
			}
			// Allowed to be absent, the family is a note.
			results = evaluate(t, scrape, target, exprs, Options{AbsentOK: []string{tc.family}})
			for _, e := range exprs {
				if r := results[e.Name]; r.Failed() {
					t.Errorf("%s with %s absent allowed: %q", e.Name, tc.family, r.Problems)
				}
			}
			if r := results[tc.fail[0]]; len(r.Notes) == 0 {
				t.Errorf("%s: no note of the absent family", tc.fail[0])
			}
		})
	}
}

// TestMissingTargetLabel: scraped without the pod label (no PodMonitor, or one that does not
// add it), the alerts still evaluate, but each fails its by (namespace, pod, node) check; the
// dashboard, which groups by the driver's own labels, passes.
func TestMissingTargetLabel(t *testing.T) {
	exprs := deployExpressions(t)
	noPod := map[string]string{}
	for k, v := range target {
		if k != "pod" {
			noPod[k] = v
		}
	}
	results := evaluate(t, completeScrape(t), noPod, exprs, Options{})
	for _, e := range exprs {
		r := results[e.Name]
		if !strings.HasPrefix(e.Name, "alert ") {
			if r.Failed() {
				t.Errorf("%s: %q", e.Name, r.Problems)
			}
			continue
		}
		if !r.Failed() {
			t.Errorf("%s passed without a pod label", e.Name)
			continue
		}
		for _, p := range r.Problems {
			if !regexp.MustCompile(`^max by \(namespace, pod, node\): no series of .* carries label "pod"$|^sum by \(namespace, pod, node\): no series of .* carries label "pod"$`).MatchString(p) {
				t.Errorf("%s: unexpected problem %q", e.Name, p)
			}
		}
	}
	// With no target label at all, namespace is missing too.
	results = evaluate(t, completeScrape(t), nil, exprs, Options{})
	if p := strings.Join(results["alert CSICertificateExpired"].Problems, "; "); !strings.Contains(p, `"namespace"`) || !strings.Contains(p, `"pod"`) {
		t.Errorf("CSICertificateExpired without target labels: %q", p)
	}
}

// TestChecks: each check on expressions written to break it.
func TestChecks(t *testing.T) {
	for _, tc := range []struct {
		expr    string
		problem string // a substring of the problems; "" for none
		note    string // a substring of the notes
		legend  []string
		opts    Options
	}{
		{expr: `sum by (node) (certmanager_csi_volumes)`},
		{expr: `sum by (nodename) (certmanager_csi_volumes)`, problem: `sum by (nodename): no series of certmanager_csi_volumes carries label "nodename"`},
		{expr: `sum by (node) (sum by (state) (certmanager_csi_volumes))`, problem: `sum by (node): no series of sum by (state) (certmanager_csi_volumes) carries label "node"`},
		{expr: `certmanager_csi_volumes{phase="expired"}`, problem: `certmanager_csi_volumes{phase="expired"}: no series of certmanager_csi_volumes carries label "phase"`},
		{expr: `certmanager_csi_volumes{state="bogus"}`, problem: `selects no series (the scrape has 6 series of certmanager_csi_volumes, none matches)`},
		{expr: `certmanager_csi_volumes{state!="issued",reason=""}`},
		{expr: `certmanager_csi_issue_call_count`, problem: `certmanager_csi_issue_call_count selects no series: the scrape has no certmanager_csi_issue_call_count`},
		{expr: `certmanager_csi_issue_call_count`, opts: Options{AbsentOK: []string{"certmanager_csi_issue_call_count"}}},
		// A filter leaves no series: the by() labels are checked on the selected series.
		{expr: `sum by (pod) (certmanager_csi_volumes{state="expired"} > 0)`},
		{expr: `sum by (phase) (certmanager_csi_volumes{state="expired"} > 0)`, problem: `carries label "phase"`},
		// A label label_replace creates.
		{expr: `sum by (hash) (label_replace(certmanager_csi_volumes, "hash", "$1", "node", "(.*)"))`},
		{expr: `sum by (hash) (label_replace(certmanager_csi_volumes, "hash", "$1", "node", "(.*)") > 5)`},
		{expr: `certmanager_csi_volumes and on (pod, state) certmanager_csi_managed_volume_count`, problem: `and on (pod, state): no series of certmanager_csi_managed_volume_count carries label "state"`},
		{expr: `certmanager_csi_volumes and on (pod, node) certmanager_csi_managed_volume_count`},
		// The scraped namespace of a request is kept as exported_namespace.
		{expr: `certmanager_csi_certificate_request_ready_status{exported_namespace="app",namespace="csi-driver"}`},
		{expr: `certmanager_csi_certificate_request_ready_status{namespace="app"}`, problem: `selects no series`},
		{expr: `sum by (state) (certmanager_csi_volumes)`, legend: []string{"state"}},
		{expr: `sum by (state) (certmanager_csi_volumes)`, legend: []string{"node"}, problem: `legend {{node}}: no series of the result carries label "node"`},
		// The engine's info annotation (not a counter) is a note, not a problem.
		{expr: `rate(certmanager_csi_volumes[5m])`, note: "metric might not be a counter"},
		{expr: `sum by (node) (`, problem: "does not parse"},
		{expr: `histogram_quantile(0.9, sum by (node) (rate(certmanager_csi_publish_to_first_certificate_seconds_bucket[10m])))`, problem: "warning: "},
		{expr: `certmanager_csi_volumes offset 30m`},
	} {
		t.Run(tc.expr, func(t *testing.T) {
			e := Expression{Name: "test", Expr: tc.expr, Legend: tc.legend}
			r := evaluate(t, completeScrape(t), target, []Expression{e}, tc.opts)["test"]
			got := strings.Join(r.Problems, "; ")
			switch {
			case tc.problem == "" && r.Failed():
				t.Errorf("problems %q", got)
			case tc.problem != "" && !strings.Contains(got, tc.problem):
				t.Errorf("problems %q, want %q", got, tc.problem)
			}
			if notes := strings.Join(r.Notes, "; "); !strings.Contains(notes, tc.note) {
				t.Errorf("notes %q, want %q", notes, tc.note)
			}
			t.Logf("%d series, %v, problems %q, notes %q", r.Series, r.Selectors, r.Problems, r.Notes)
		})
	}
}

// TestScrapeErrors: an unreadable or empty scrape is an error of Evaluate, not of an
// expression.
func TestScrapeErrors(t *testing.T) {
	for _, scrape := range []string{"", "# HELP x y\n", "certmanager_csi_volumes{node=\"a\" 1\n"} {
		if _, err := Evaluate(context.Background(), []byte(scrape), target, at, nil, Options{}); err == nil {
			t.Errorf("%q: no error", scrape)
		}
	}
}

func TestSubstituteVariables(t *testing.T) {
	for in, want := range map[string]string{
		`sum by (node) (rate(x{node=~"$node"}[$__rate_interval]))`:           `sum by (node) (rate(x{node=~".+"}[5m]))`,
		`rate(x{node="${node}", pod!="[[pod]]"}[${__interval}])`:             `rate(x{node=~".+", pod=~".+"}[1m])`,
		`increase(x[$__range])`:                                              `increase(x[1h])`,
		`label_replace(x, "a", "$1", "b", "(.*)")`:                           `label_replace(x, "a", "$1", "b", "(.*)")`,
		`x{node=~"$node"} * on (node) group_left y{state=~"${state:regex}"}`: `x{node=~".+"} * on (node) group_left y{state=~".+"}`,
	} {
		if got := SubstituteVariables(in); got != want {
			t.Errorf("%s: %s, want %s", in, got, want)
		}
	}
}

func TestDashboardExpressions(t *testing.T) {
	exprs, err := DashboardExpressions([]byte(`{"panels": [
		{"title": "a", "targets": [{"refId": "A", "expr": "x{node=~\"$node\"}", "legendFormat": "{{node}} {{ state }}"}]},
		{"title": "row", "type": "row", "panels": [{"title": "b", "targets": [{"expr": "y"}, {"refId": "C", "expr": " "}]}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Expression{
		{Name: `panel "a" A`, Expr: `x{node=~".+"}`, Legend: []string{"node", "state"}},
		{Name: `panel "b" 0`, Expr: `y`},
	}
	if len(exprs) != len(want) {
		t.Fatalf("%+v", exprs)
	}
	for i := range want {
		if exprs[i].Name != want[i].Name || exprs[i].Expr != want[i].Expr || strings.Join(exprs[i].Legend, ",") != strings.Join(want[i].Legend, ",") {
			t.Errorf("%+v, want %+v", exprs[i], want[i])
		}
	}
}

// quietFamilies are the families a driver serves only once something happened: an issuance
// error, a gate-pending attempt, an attempt waiting for admission. A driver that has issued
// without trouble serves none of them (their vectors have no series yet).
var quietFamilies = []string{
	"certmanager_csi_issue_errors_total",
	"certmanager_csi_issue_gate_pending_total",
	"certmanager_csi_issuance_admission_waiting",
	"certmanager_csi_issuance_admission_waits_total",
}

// TestQuietDriver: on the scrape of a driver that has issued without trouble, the expressions
// that read the event families select nothing and fail, unless those families are allowed to
// be absent.
func TestQuietDriver(t *testing.T) {
	exprs := deployExpressions(t)
	scrape := completeScrape(t)
	for _, f := range quietFamilies {
		scrape = without(scrape, f)
	}
	fail := []string{
		"alert CSICertificateIssuanceFailing", "alert CSIReadinessGatePendingLong",
		`panel "Issuance errors per second" A`, `panel "Gate-pending attempts per second" A`,
		`panel "Issuance attempts waiting for admission" A`,
	}
	results := evaluate(t, scrape, target, exprs, Options{})
	for _, e := range exprs {
		if got, want := results[e.Name].Failed(), slices.Contains(fail, e.Name); got != want {
			t.Errorf("%s: failed %v, want %v: %q", e.Name, got, want, results[e.Name].Problems)
		}
	}
	results = evaluate(t, scrape, target, exprs, Options{AbsentOK: quietFamilies})
	for _, e := range exprs {
		if r := results[e.Name]; r.Failed() {
			t.Errorf("%s: %q", e.Name, r.Problems)
		}
	}
}
