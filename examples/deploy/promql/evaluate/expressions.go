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
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// Expression is one expression to evaluate.
type Expression struct {
	// Name says where the expression comes from: "alert CSICertificateExpired" or
	// `panel "Volumes by state" A` (the panel's title and the target's refId).
	Name string
	// Expr is the PromQL text, with the dashboard's variables substituted.
	Expr string
	// Legend are the labels a dashboard target's legendFormat names ({{node}}): each must be on
	// at least one series of the result, when the result has any.
	Legend []string
}

// AlertExpressions returns the expr of every alerting rule (and recording rule) of a
// PrometheusRule manifest, in order.
func AlertExpressions(data []byte) ([]Expression, error) {
	var rule struct {
		Spec struct {
			Groups []struct {
				Name  string `json:"name"`
				Rules []struct {
					Alert  string `json:"alert"`
					Record string `json:"record"`
					Expr   string `json:"expr"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &rule); err != nil {
		return nil, fmt.Errorf("reading the PrometheusRule: %w", err)
	}
	var out []Expression
	for _, g := range rule.Spec.Groups {
		for i, r := range g.Rules {
			name := fmt.Sprintf("rule %s[%d]", g.Name, i)
			switch {
			case r.Alert != "":
				name = "alert " + r.Alert
			case r.Record != "":
				name = "record " + r.Record
			}
			out = append(out, Expression{Name: name, Expr: strings.TrimSpace(r.Expr)})
		}
	}
	return out, nil
}

// Grafana's built-in interval variables, as the dashboard would see them with a 1m scrape
// interval and a 1h range.
var builtinVariables = map[string]string{
	"__rate_interval": "5m",
	"__interval":      "1m",
	"__interval_ms":   "60000",
	"__range":         "1h",
	"__range_s":       "3600",
	"__range_ms":      "3600000",
}

// matcherVariable is a label matcher whose value is a dashboard variable alone:
// node=~"$node", node="${node}", node=~"[[node]]".
var matcherVariable = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)\s*"(?:\$\{?[A-Za-z0-9_]+(?::[a-z]+)?\}?|\[\[[A-Za-z0-9_]+\]\])"`)

// builtinVariable is one of Grafana's $__ variables, in any of its spellings.
var builtinVariable = regexp.MustCompile(`\$\{?(__[a-z_]+)\}?|\[\[(__[a-z_]+)\]\]`)

// SubstituteVariables replaces a dashboard's variables in expr as Grafana would for a
// dashboard whose variables are set to All: a label matcher whose value is a variable alone
// becomes label=~".+" (every series that has the label, which therefore must exist), and the
// built-in $__rate_interval, $__interval and $__range (and their _s, _ms forms) become 5m, 1m
// and 1h. Any other "$" is left alone (label_replace's "$1"), so an unknown variable in a
// position PromQL cannot parse is an error later.
func SubstituteVariables(expr string) string {
	expr = matcherVariable.ReplaceAllString(expr, `$1=~".+"`)
	return builtinVariable.ReplaceAllStringFunc(expr, func(v string) string {
		m := builtinVariable.FindStringSubmatch(v)
		name := m[1] + m[2]
		if value, ok := builtinVariables[name]; ok {
			return value
		}
		return v
	})
}

var legendLabel = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)

// DashboardExpressions returns the expr of every target of every panel of a Grafana
// dashboard (including the panels of collapsed rows), with SubstituteVariables applied.
func DashboardExpressions(data []byte) ([]Expression, error) {
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			RefID        string `json:"refId"`
			Expr         string `json:"expr"`
			LegendFormat string `json:"legendFormat"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var d struct {
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("reading the dashboard: %w", err)
	}
	var out []Expression
	var walk func([]json.RawMessage) error
	walk = func(panels []json.RawMessage) error {
		for _, raw := range panels {
			var p panel
			if err := json.Unmarshal(raw, &p); err != nil {
				return fmt.Errorf("reading the dashboard: %w", err)
			}
			for i, t := range p.Targets {
				if strings.TrimSpace(t.Expr) == "" {
					continue
				}
				ref := t.RefID
				if ref == "" {
					ref = fmt.Sprint(i)
				}
				var legend []string
				for _, m := range legendLabel.FindAllStringSubmatch(t.LegendFormat, -1) {
					legend = append(legend, m[1])
				}
				out = append(out, Expression{
					Name:   fmt.Sprintf("panel %q %s", p.Title, ref),
					Expr:   SubstituteVariables(strings.TrimSpace(t.Expr)),
					Legend: legend,
				})
			}
			if err := walk(p.Panels); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(d.Panels); err != nil {
		return nil, err
	}
	return out, nil
}

// ReadExpressions reads the alert expressions of the PrometheusRule at rulesPath and the
// target expressions of the dashboard at dashboardPath; an empty path is skipped.
func ReadExpressions(rulesPath, dashboardPath string) ([]Expression, error) {
	var out []Expression
	for _, f := range []struct {
		path string
		read func([]byte) ([]Expression, error)
	}{{rulesPath, AlertExpressions}, {dashboardPath, DashboardExpressions}} {
		if f.path == "" {
			continue
		}
		data, err := os.ReadFile(f.path)
		if err != nil {
			return nil, err
		}
		exprs, err := f.read(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.path, err)
		}
		out = append(out, exprs...)
	}
	return out, nil
}
