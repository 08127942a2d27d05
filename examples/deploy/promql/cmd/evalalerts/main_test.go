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
	"os"
	"regexp"
	"strings"
	"testing"
)

const (
	scrape = "../../evaluate/testdata/complete.prom"
	labels = "namespace=csi-driver,pod=csi-driver-x7k2p,container=driver,endpoint=metrics,job=csi-driver/csi-driver,instance=10.0.0.7:9402"
)

func runCmd(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	args = append([]string{"-rules", "../../../prometheusrule.yaml", "-dashboard", "../../../grafana-dashboard.json", "-time", "2026-03-01T12:00:00Z"}, args...)
	code := run(args, strings.NewReader(stdin), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestComplete: every expression passes on the complete scrape, one line each.
func TestComplete(t *testing.T) {
	code, out, errOut := runCmd(t, "", "-scrape", scrape, "-labels", labels)
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q, stdout:\n%s", code, errOut, out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) < 8 {
		t.Fatalf("%d lines:\n%s", len(lines), out)
	}
	line := regexp.MustCompile(`^ok \d+ series (alert \w+|panel ".*" \w+)$`)
	for _, l := range lines {
		if !line.MatchString(l) {
			t.Errorf("line %q", l)
		}
	}
	if !strings.Contains(out, "ok 0 series alert CSICertificateExpired\n") || !strings.Contains(out, `ok 6 series panel "Volumes by state" A`+"\n") {
		t.Errorf("stdout:\n%s", out)
	}
}

// TestFailures: without the pod label, or without a family, the alerts fail, and the command
// exits 1; the scrape read from the standard input is the same.
func TestFailures(t *testing.T) {
	code, out, _ := runCmd(t, "", "-scrape", scrape, "-labels", "namespace=csi-driver", "-dashboard", "")
	if code != 1 || strings.Count(out, "FAILED alert ") != 4 || !strings.Contains(out, `FAILED alert CSICertificateExpired: max by (namespace, pod, node): no series of certmanager_csi_volumes{state="expired"} carries label "pod"`) {
		t.Errorf("exit %d, stdout:\n%s", code, out)
	}

	data, err := os.ReadFile(scrape)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, l := range strings.SplitAfter(string(data), "\n") {
		if !strings.Contains(l, "certmanager_csi_issue_gate_pending_total") {
			kept = append(kept, l)
		}
	}
	code, out, _ = runCmd(t, strings.Join(kept, ""), "-scrape", "-", "-labels", labels, "-v")
	if code != 1 || strings.Count(out, "FAILED") != 2 ||
		!strings.Contains(out, "FAILED alert CSIReadinessGatePendingLong: certmanager_csi_issue_gate_pending_total selects no series: the scrape has no certmanager_csi_issue_gate_pending_total\n") ||
		!strings.Contains(out, "    selector certmanager_csi_volumes{state=\"gate_pending\"}: 1 series\n") {
		t.Errorf("exit %d, stdout:\n%s", code, out)
	}
	code, out, _ = runCmd(t, strings.Join(kept, ""), "-scrape", "-", "-labels", labels, "-absent-ok", "certmanager_csi_issue_gate_pending_total")
	if code != 0 {
		t.Errorf("with -absent-ok: exit %d, stdout:\n%s", code, out)
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"-scrape", scrape, "-labels", "pod"},
		{"-scrape", scrape, "-labels", "pod=a,pod=b"},
		{"-scrape", scrape, "-labels", "1pod=a"},
		{"-scrape", scrape, "-time", "yesterday"},
		{"-scrape", scrape, "extra"},
		{"-scrape", scrape, "-rules", "", "-dashboard", ""},
	} {
		if code, _, _ := runCmd(t, "", args...); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
	if code, _, errOut := runCmd(t, "", "-scrape", "does-not-exist"); code != 1 || errOut == "" {
		t.Errorf("missing scrape: exit %d, stderr %q", code, errOut)
	}
}
