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

// Package promql parses the example deployment's alert and dashboard expressions with
// Prometheus's own PromQL parser; its evaluate package evaluates them against a scrape of the
// driver's /metrics, and cmd/evalalerts does so from the command line. It is a module of its
// own, so that Prometheus's dependencies never enter the library's module graph or a driver's
// build.
package promql

import (
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"

	"github.com/cert-manager/csi-lib/examples/deploy/promql/evaluate"
)

// TestExpressionsParse: every alert's and every dashboard panel's expression is valid PromQL,
// and every series it selects is one of the library's (certmanager_csi_...; which of them the
// library emits, the deploy package's own test checks, and the evaluate package's tests
// evaluate them against a scrape).
func TestExpressionsParse(t *testing.T) {
	exprs, err := evaluate.ReadExpressions("../prometheusrule.yaml", "../grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(exprs) < 8 {
		t.Fatalf("found %d expressions", len(exprs))
	}
	p := parser.NewParser(parser.Options{})
	for _, e := range exprs {
		expr, err := p.ParseExpr(e.Expr)
		if err != nil {
			t.Errorf("%s: %q: %v", e.Name, e.Expr, err)
			continue
		}
		selectors := 0
		parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
			if vs, ok := node.(*parser.VectorSelector); ok {
				selectors++
				if !strings.HasPrefix(vs.Name, "certmanager_csi_") {
					t.Errorf("%s: %q selects %q, not a series of the library", e.Name, e.Expr, vs.String())
				}
			}
			return nil
		})
		if selectors == 0 {
			t.Errorf("%s: %q selects no series", e.Name, e.Expr)
		}
	}
}
