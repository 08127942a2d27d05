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
// Prometheus's own PromQL parser. It is a module of its own, so that Prometheus's dependencies
// never enter the library's module graph or a driver's build.
package promql

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

// TestExpressionsParse: every alert's and every dashboard panel's expression is valid PromQL,
// and every series it selects is one of the library's (certmanager_csi_...; which of them the
// library emits, the deploy package's own test checks).
func TestExpressionsParse(t *testing.T) {
	exprs := append(alertExpressions(t), dashboardExpressions(t)...)
	if len(exprs) < 8 {
		t.Fatalf("found %d expressions", len(exprs))
	}
	p := parser.NewParser(parser.Options{})
	for _, e := range exprs {
		expr, err := p.ParseExpr(e)
		if err != nil {
			t.Errorf("%q: %v", e, err)
			continue
		}
		selectors := 0
		parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
			if vs, ok := node.(*parser.VectorSelector); ok {
				selectors++
				if !strings.HasPrefix(vs.Name, "certmanager_csi_") {
					t.Errorf("%q selects %q, not a series of the library", e, vs.String())
				}
			}
			return nil
		})
		if selectors == 0 {
			t.Errorf("%q selects no series", e)
		}
	}
}

func alertExpressions(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("../prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rule struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Expr string `json:"expr"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &rule); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			out = append(out, r.Expr)
		}
	}
	return out
}

func dashboardExpressions(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("../grafana-dashboard.json")
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
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range d.Panels {
		for _, target := range p.Targets {
			out = append(out, target.Expr)
		}
	}
	return out
}
