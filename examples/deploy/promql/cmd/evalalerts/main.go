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

// Command evalalerts evaluates the example deployment's alert and dashboard expressions
// against one scrape of a driver's /metrics, as Prometheus would after scraping it through a
// PodMonitor (see the evaluate package for what is checked):
//
//	evalalerts -scrape FILE -labels namespace=csi-driver,pod=csi-driver-x,... \
//	    [-rules ../prometheusrule.yaml] [-dashboard ../grafana-dashboard.json] \
//	    [-time RFC3339] [-interval 30s] [-absent-ok METRIC,...] [-v]
//
// FILE is the scrape's text ("-" reads it from the standard input); -labels are the target
// labels the PodMonitor adds to every series (namespace, pod, container, endpoint, job,
// instance); an empty -rules or -dashboard skips that file. It prints one line per
// expression:
//
//	ok <n> series <name>
//	FAILED <name>: <problem>; <problem>...
//
// where <n> is the number of series of the expression's instant result (0 for an alert that
// does not fire) and <name> is "alert <alertname>" or `panel "<title>" <refId>`. With -v, the
// lines that follow an expression's, indented, give each selector's series count and the
// engine's notes. It exits 1 when any expression failed or the scrape cannot be read, 2 on a
// usage error.
//
// A driver serves some families only once something happened to it:
// certmanager_csi_issue_errors_total (an issuance error), certmanager_csi_issue_gate_pending_total
// (a gate-pending attempt), certmanager_csi_issuance_admission_waiting and
// certmanager_csi_issuance_admission_waits_total (an attempt that waited for admission). On the
// scrape of a driver that has only issued without trouble, the expressions reading them fail
// with "selects no series"; either provoke those events before the scrape or name the families
// in -absent-ok.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/prometheus/common/model"

	"github.com/cert-manager/csi-lib/examples/deploy/promql/evaluate"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("evalalerts", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scrapePath := fs.String("scrape", "", "the scrape of the driver's /metrics, in the Prometheus text format (- for the standard input)")
	labelList := fs.String("labels", "", "the target labels a PodMonitor adds to every series: name=value,name=value")
	rules := fs.String("rules", "../prometheusrule.yaml", "the PrometheusRule whose alert expressions to evaluate (empty: none)")
	dashboard := fs.String("dashboard", "../grafana-dashboard.json", "the Grafana dashboard whose target expressions to evaluate (empty: none)")
	atFlag := fs.String("time", "", "the evaluation time, RFC 3339 (default now)")
	interval := fs.Duration("interval", 30*time.Second, "the scrape interval: the time between the copies of the scrape loaded")
	absentOK := fs.String("absent-ok", "", "metrics that may be absent from the scrape (a selector of one that selects nothing is a note): name,name")
	verbose := fs.Bool("v", false, "print each selector's series count and the engine's notes under each expression")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "evalalerts: "+format+"\n", a...)
		fs.Usage()
		return 2
	}
	if fs.NArg() > 0 {
		return usage("unexpected arguments %q", fs.Args())
	}
	if *scrapePath == "" {
		return usage("-scrape is required")
	}
	target, err := parseLabels(*labelList)
	if err != nil {
		return usage("-labels: %v", err)
	}
	at := time.Now()
	if *atFlag != "" {
		if at, err = time.Parse(time.RFC3339, *atFlag); err != nil {
			return usage("-time: %v", err)
		}
	}
	var absent []string
	if *absentOK != "" {
		absent = strings.Split(*absentOK, ",")
	}

	var scrape []byte
	if *scrapePath == "-" {
		scrape, err = io.ReadAll(stdin)
	} else {
		scrape, err = os.ReadFile(*scrapePath)
	}
	if err != nil {
		fmt.Fprintf(stderr, "evalalerts: %v\n", err)
		return 1
	}
	exprs, err := evaluate.ReadExpressions(*rules, *dashboard)
	if err != nil {
		fmt.Fprintf(stderr, "evalalerts: %v\n", err)
		return 1
	}
	if len(exprs) == 0 {
		return usage("no expression to evaluate")
	}
	results, err := evaluate.Evaluate(context.Background(), scrape, target, at, exprs, evaluate.Options{Interval: *interval, AbsentOK: absent})
	if err != nil {
		fmt.Fprintf(stderr, "evalalerts: %v\n", err)
		return 1
	}
	code := 0
	for _, r := range results {
		if r.Failed() {
			code = 1
			fmt.Fprintf(stdout, "FAILED %s: %s\n", r.Name, strings.Join(r.Problems, "; "))
		} else {
			fmt.Fprintf(stdout, "ok %d series %s\n", r.Series, r.Name)
		}
		if *verbose {
			fmt.Fprintf(stdout, "    expr: %s\n", r.Expr)
			for _, s := range r.Selectors {
				fmt.Fprintf(stdout, "    selector %s: %d series\n", s.Selector, s.Series)
			}
			for _, n := range r.Notes {
				fmt.Fprintf(stdout, "    note: %s\n", n)
			}
		}
	}
	return code
}

// parseLabels reads name=value,name=value. A value may be empty (the label is then not added).
func parseLabels(list string) (map[string]string, error) {
	out := map[string]string{}
	if list == "" {
		return out, nil
	}
	for _, kv := range strings.Split(list, ",") {
		name, value, ok := strings.Cut(kv, "=")
		name = strings.TrimSpace(name)
		if !ok || !model.LegacyValidation.IsValidLabelName(name) {
			return nil, fmt.Errorf("%q is not name=value with a label name", kv)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("label %q given twice", name)
		}
		out[name] = value
	}
	return out, nil
}
