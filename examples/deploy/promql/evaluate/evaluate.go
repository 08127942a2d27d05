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

// Package evaluate checks the example deployment's alert and dashboard expressions against one
// scrape of a driver's /metrics, with Prometheus's own storage and PromQL engine.
//
// Evaluate loads the scrape (the Prometheus text exposition, or OpenMetrics) into a
// Prometheus test storage, with the labels a Prometheus operator PodMonitor gives the target
// (namespace, pod, container, endpoint, job, instance: the caller's map) added to every series
// as Prometheus does with honor_labels false (a scraped label of the same name is kept as
// exported_<name>). The same values are loaded every Options.Interval over the longest range
// any expression reads (at least an hour) up to the evaluation time, so rate() and increase()
// have samples to work on: counters stay flat, their rates are 0 and an alert that compares a
// rate with 0 evaluates to no series, which is fine: the check is that each expression
// evaluates and reads series the driver serves, not that it fires.
//
// Each expression is evaluated as an instant query at that time, and fails when:
//   - it does not parse or its evaluation returns an error or a warning annotation;
//   - a vector selector in it selects no series (a metric, or a label value, the driver does
//     not serve), unless the metric is in Options.AbsentOK;
//   - a label matcher names a label no series of the selector's metric carries (label=""
//     excepted: it asks for the label's absence);
//   - a by (...) label of an aggregation, or an on (...) label of a binary operation, is on no
//     series of the expression it groups or matches (an alert that groups by a label only a
//     PodMonitor adds, evaluated without it, or by a label the driver does not emit);
//   - a dashboard target's legendFormat names a label no series of its result carries (when
//     the result has series).
package evaluate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/teststorage"
)

// lookback is the engine's lookback delta, Prometheus's default.
const lookback = 5 * time.Minute

// Options tune Evaluate. The zero value is the default.
type Options struct {
	// Interval is the time between the copies of the scrape loaded into the storage: the
	// scrape interval. 30s when zero.
	Interval time.Duration
	// AbsentOK are metric names that may be missing from the scrape: a family whose series
	// exist only once something happened (an error counter before the first error). A
	// selector of one of them that selects nothing is a note, not a problem.
	AbsentOK []string
}

// Selector is one vector selector of an expression.
type Selector struct {
	// Selector is the selector as the parser prints it.
	Selector string
	// Series is the number of series of the scrape it selects.
	Series int
}

// Result is the outcome of one expression.
type Result struct {
	Expression
	// Series is the number of series of the instant query's result (1 for a scalar).
	Series int
	// Selectors are the expression's vector selectors, in the order they appear.
	Selectors []Selector
	// Problems say why the expression failed; none when it passed.
	Problems []string
	// Notes are the engine's info annotations, and the AbsentOK selectors that selected
	// nothing.
	Notes []string
}

// Failed reports whether the expression has a problem.
func (r Result) Failed() bool { return len(r.Problems) > 0 }

// Evaluate loads scrape, with the target labels added to every series, and evaluates each of
// exprs at the time at (see the package documentation for the checks). It returns an error only
// when the scrape cannot be parsed or loaded, or holds no sample; a failing expression is
// reported in its Result.
func Evaluate(ctx context.Context, scrape []byte, target map[string]string, at time.Time, exprs []Expression, opts Options) ([]Result, error) {
	if opts.Interval <= 0 {
		opts.Interval = 30 * time.Second
	}
	samples, err := parseScrape(scrape, target)
	if err != nil {
		return nil, err
	}
	if len(samples) == 0 {
		return nil, errors.New("the scrape holds no sample")
	}

	p := parser.NewParser(parser.Options{})
	parsed := make([]parser.Expr, len(exprs))
	parseErrs := make([]error, len(exprs))
	span := time.Hour
	for i, e := range exprs {
		parsed[i], parseErrs[i] = p.ParseExpr(e.Expr)
		if parseErrs[i] == nil {
			span = max(span, reach(parsed[i]))
		}
	}
	span += lookback

	db, err := teststorage.NewWithError()
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if err := load(ctx, db, samples, at, span, opts.Interval); err != nil {
		return nil, err
	}

	ev := &evaluator{
		ctx: ctx,
		db:  db,
		engine: promql.NewEngine(promql.EngineOpts{
			MaxSamples:           50_000_000,
			Timeout:              time.Minute,
			LookbackDelta:        lookback,
			EnableAtModifier:     true,
			EnableNegativeOffset: true,
		}),
		at:       at,
		mint:     at.Add(-span),
		absentOK: map[string]bool{},
	}
	for _, name := range opts.AbsentOK {
		ev.absentOK[name] = true
	}
	results := make([]Result, len(exprs))
	for i, e := range exprs {
		results[i] = ev.check(e, parsed[i], parseErrs[i])
	}
	return results, nil
}

// reach is how far back from the evaluation time expr reads, without the lookback: the sum of
// its ranges and offsets, an upper bound.
func reach(expr parser.Expr) time.Duration {
	var d time.Duration
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		switch n := node.(type) {
		case *parser.MatrixSelector:
			d += n.Range
		case *parser.SubqueryExpr:
			d += n.Range + max(n.OriginalOffset, 0)
		case *parser.VectorSelector:
			d += max(n.OriginalOffset, 0)
		}
		return nil
	})
	return d
}

type sample struct {
	lset  labels.Labels
	value float64
}

// parseScrape reads the exposition's float samples (a classic histogram's buckets, sum and
// count are float samples too), with the target labels added. Timestamps in the exposition are
// ignored.
func parseScrape(scrape []byte, target map[string]string) ([]sample, error) {
	contentType := "text/plain"
	if bytes.HasSuffix(bytes.TrimSpace(scrape), []byte("# EOF")) {
		contentType = "application/openmetrics-text"
	}
	p, err := textparse.New(scrape, contentType, nil, textparse.ParserOptions{})
	if p == nil {
		return nil, fmt.Errorf("reading the scrape: %w", err)
	}
	var out []sample
	for {
		entry, err := p.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading the scrape: %w", err)
		}
		switch entry {
		case textparse.EntrySeries:
			var l labels.Labels
			p.Labels(&l)
			_, _, v := p.Series()
			out = append(out, sample{lset: withTarget(l, target), value: v})
		case textparse.EntryHistogram:
			return nil, errors.New("reading the scrape: native histograms are not supported")
		}
	}
}

// withTarget adds the target's labels to a scraped series as Prometheus does with
// honor_labels false: the target's value wins, and a scraped label of the same name is kept as
// exported_<name>. A target label with an empty value is not added.
func withTarget(l labels.Labels, target map[string]string) labels.Labels {
	names := make([]string, 0, len(target))
	for n := range target {
		names = append(names, n)
	}
	sort.Strings(names)
	b := labels.NewBuilder(l)
	for _, n := range names {
		if target[n] == "" {
			continue
		}
		if old := l.Get(n); old != "" {
			exported := "exported_" + n
			for l.Has(exported) || target[exported] != "" {
				exported = "exported_" + exported
			}
			b.Set(exported, old)
		}
		b.Set(n, target[n])
	}
	return b.Labels()
}

// load appends the samples every interval from at-span to at.
func load(ctx context.Context, db storage.Appendable, samples []sample, at time.Time, span, interval time.Duration) error {
	app := db.Appender(ctx)
	for k := int64(span / interval); k >= 0; k-- {
		ts := at.Add(-time.Duration(k) * interval).UnixMilli()
		for _, s := range samples {
			if _, err := app.Append(0, s.lset, ts, s.value); err != nil {
				_ = app.Rollback()
				return fmt.Errorf("loading %s: %w", s.lset, err)
			}
		}
	}
	return app.Commit()
}

type evaluator struct {
	ctx      context.Context
	db       storage.Queryable
	engine   *promql.Engine
	at, mint time.Time
	absentOK map[string]bool
}

// check evaluates one expression and walks its AST.
func (ev *evaluator) check(e Expression, expr parser.Expr, parseErr error) Result {
	r := Result{Expression: e}
	if parseErr != nil {
		r.Problems = append(r.Problems, fmt.Sprintf("does not parse: %v", parseErr))
		return r
	}
	res := ev.query(e.Expr)
	if res.Err != nil {
		r.Problems = append(r.Problems, fmt.Sprintf("evaluation: %v", res.Err))
	} else {
		warnings, infos := res.Warnings.AsStrings(e.Expr, 0, 0)
		for _, w := range warnings {
			r.Problems = append(r.Problems, "warning: "+w)
		}
		r.Notes = append(r.Notes, infos...)
		var have map[string]bool
		switch v := res.Value.(type) {
		case promql.Vector:
			r.Series = len(v)
			have = vectorLabels(v)
		case promql.Matrix:
			r.Series = len(v)
		case promql.Scalar, promql.String:
			r.Series = 1
		}
		if len(have) > 0 {
			for _, l := range e.Legend {
				if !have[l] {
					r.Problems = append(r.Problems, fmt.Sprintf("legend {{%s}}: no series of the result carries label %q", l, l))
				}
			}
		}
	}

	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		switch n := node.(type) {
		case *parser.VectorSelector:
			ev.selector(&r, n)
		case *parser.AggregateExpr:
			if !n.Without && len(n.Grouping) > 0 {
				ev.labelsPresent(&r, n.Expr, n.Grouping, fmt.Sprintf("%s by (%s)", n.Op, strings.Join(n.Grouping, ", ")))
			}
		case *parser.BinaryExpr:
			vm := n.VectorMatching
			if vm != nil && vm.On && len(vm.MatchingLabels) > 0 {
				what := fmt.Sprintf("%s on (%s)", n.Op, strings.Join(vm.MatchingLabels, ", "))
				ev.labelsPresent(&r, n.LHS, vm.MatchingLabels, what)
				ev.labelsPresent(&r, n.RHS, vm.MatchingLabels, what)
			}
		}
		return nil
	})
	return r
}

func (ev *evaluator) query(qs string) *promql.Result {
	q, err := ev.engine.NewInstantQuery(ev.ctx, ev.db, nil, qs, ev.at)
	if err != nil {
		return &promql.Result{Err: err}
	}
	defer q.Close()
	return q.Exec(ev.ctx)
}

// selector checks one vector selector: its metric is in the scrape, each of its matchers'
// labels is on a series of the metric, and it selects a series.
func (ev *evaluator) selector(r *Result, vs *parser.VectorSelector) {
	s := Selector{Selector: vs.String()}
	var nameMatchers []*labels.Matcher
	for _, m := range vs.LabelMatchers {
		if m.Name == labels.MetricName {
			nameMatchers = append(nameMatchers, m)
		}
	}
	selected := ev.series(vs.LabelMatchers)
	s.Series = len(selected)
	r.Selectors = append(r.Selectors, s)

	family := selected
	metric := "its series"
	if len(nameMatchers) > 0 {
		family = ev.series(nameMatchers)
		metric = vs.Name
		if metric == "" {
			metric = fmt.Sprint(nameMatchers)
		}
	}
	if len(family) == 0 {
		msg := fmt.Sprintf("%s selects no series: the scrape has no %s", s.Selector, metric)
		if ev.absentOK[vs.Name] {
			r.Notes = append(r.Notes, msg+" (absent allowed)")
		} else {
			r.Problems = append(r.Problems, msg)
		}
		return
	}
	have := seriesLabels(family)
	missing := false
	for _, m := range vs.LabelMatchers {
		if m.Name == labels.MetricName || (m.Type == labels.MatchEqual && m.Value == "") {
			continue
		}
		if !have[m.Name] {
			missing = true
			r.Problems = append(r.Problems, fmt.Sprintf("%s: no series of %s carries label %q", s.Selector, metric, m.Name))
		}
	}
	if len(selected) == 0 && !missing {
		r.Problems = append(r.Problems, fmt.Sprintf("%s selects no series (the scrape has %d series of %s, none matches)", s.Selector, len(family), metric))
	}
}

// series returns the labels of the series matching all of matchers.
func (ev *evaluator) series(matchers []*labels.Matcher) []labels.Labels {
	q, err := ev.db.Querier(ev.mint.UnixMilli(), ev.at.UnixMilli())
	if err != nil {
		return nil
	}
	defer q.Close()
	var out []labels.Labels
	set := q.Select(ev.ctx, false, nil, matchers...)
	for set.Next() {
		out = append(out, set.At().Labels())
	}
	return out
}

// labelsPresent checks that each of want is on a series of inner, the operand of a by() or
// one side of an on(): on a series of inner's instant result when it has any, else (a filter
// such as "> 0" left none) on a series its selectors select, or among the labels its
// label_replace, label_join or count_values create. It reports nothing when neither has a
// series: the selectors' own problems say why.
func (ev *evaluator) labelsPresent(r *Result, inner parser.Expr, want []string, what string) {
	if inner.Type() != parser.ValueTypeVector {
		return
	}
	var have map[string]bool
	if v, err := ev.query(inner.String()).Vector(); err == nil && len(v) > 0 {
		have = vectorLabels(v)
	} else {
		have = map[string]bool{}
		parser.Inspect(inner, func(node parser.Node, _ []parser.Node) error {
			switch n := node.(type) {
			case *parser.VectorSelector:
				for l := range seriesLabels(ev.series(n.LabelMatchers)) {
					have[l] = true
				}
			case *parser.Call:
				if (n.Func.Name == "label_replace" || n.Func.Name == "label_join") && len(n.Args) > 1 {
					if s, ok := n.Args[1].(*parser.StringLiteral); ok {
						have[s.Val] = true
					}
				}
			case *parser.AggregateExpr:
				if s, ok := n.Param.(*parser.StringLiteral); ok && n.Op == parser.COUNT_VALUES {
					have[s.Val] = true
				}
			}
			return nil
		})
		if len(have) == 0 {
			return
		}
	}
	for _, l := range want {
		if !have[l] && !slices.Contains(r.Problems, problemLabel(what, inner, l)) {
			r.Problems = append(r.Problems, problemLabel(what, inner, l))
		}
	}
}

func problemLabel(what string, inner parser.Expr, label string) string {
	return fmt.Sprintf("%s: no series of %s carries label %q", what, inner, label)
}

func vectorLabels(v promql.Vector) map[string]bool {
	have := map[string]bool{}
	for _, s := range v {
		s.Metric.Range(func(l labels.Label) { have[l.Name] = true })
	}
	return have
}

func seriesLabels(series []labels.Labels) map[string]bool {
	have := map[string]bool{}
	for _, s := range series {
		s.Range(func(l labels.Label) { have[l.Name] = true })
	}
	return have
}
