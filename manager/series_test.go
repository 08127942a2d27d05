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

package manager

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"testing"
	"time"

	testclock "k8s.io/utils/clock/testing"
)

// seriesModel is the retention rule on its own: a retired volume's series are deleted once
// MetricSeriesRetention has passed since its latest retirement, unless it was kept (managed
// again) in between.
type seriesModel struct {
	now     time.Time
	retired map[string]time.Time
}

func (m *seriesModel) retire(id string) { m.retired[id] = m.now }
func (m *seriesModel) keep(id string)   { delete(m.retired, id) }

// step moves the clock and returns the IDs whose series are deleted, sorted.
func (m *seriesModel) step(d time.Duration) []string {
	m.now = m.now.Add(d)
	var gone []string
	for id, at := range m.retired {
		if !m.now.Before(at.Add(MetricSeriesRetention)) {
			gone = append(gone, id)
			delete(m.retired, id)
		}
	}
	slices.Sort(gone)
	return gone
}

// TestSeriesRetentionFollowsTheModel drives seriesRetention on a fake clock with random
// retirements, re-registrations and clock steps (fixed seeds) and compares every deletion with
// the model's.
func TestSeriesRetentionFollowsTheModel(t *testing.T) {
	ids := []string{"v1", "v2", "v3"}
	steps := []time.Duration{time.Second, time.Minute, 3 * time.Minute, 9*time.Minute + 59*time.Second, MetricSeriesRetention}
	for seed := int64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			clk := testclock.NewFakeClock(start)
			deleted := make(chan string, 64)
			r := newSeriesRetention(clk, func(id string) { deleted <- id })
			model := &seriesModel{now: start, retired: map[string]time.Time{}}
			for op := 0; op < 60; op++ {
				id := ids[rng.Intn(len(ids))]
				switch rng.Intn(3) {
				case 0:
					r.retire(id)
					model.retire(id)
				case 1:
					r.keep(id)
					model.keep(id)
				default:
					d := steps[rng.Intn(len(steps))]
					want := model.step(d)
					clk.Step(d)
					got := receiveDeletions(t, deleted, len(want))
					if !slices.Equal(got, want) {
						t.Fatalf("op %d, step %v: deleted %v, model %v", op, d, got, want)
					}
				}
			}
			r.stop()
			if w := clk.Waiters(); w != 0 {
				t.Fatalf("stop left %d timers", w)
			}
			select {
			case id := <-deleted:
				t.Fatalf("a deletion the model did not make: %s", id)
			default:
			}
		})
	}
}

// receiveDeletions waits (bounded) for n deletions, which run on goroutines of their own, and
// returns them sorted.
func receiveDeletions(t *testing.T, deleted <-chan string, n int) []string {
	t.Helper()
	var got []string
	timeout := time.After(pollTimeout)
	for len(got) < n {
		select {
		case id := <-deleted:
			got = append(got, id)
		case <-timeout:
			t.Fatalf("got deletions %v, waiting for %d", got, n)
		}
	}
	slices.Sort(got)
	return got
}

// TestRetiredSeriesGoAfterTheRetentionUnlessManagedAgain: a failed first publish's series (its
// attempt and its error) stay through UnmanageVolume and a retirement; a publish again within
// the retention keeps them for good, and a retirement not followed by one deletes them once the
// retention has passed on the manager's clock.
func TestRetiredSeriesGoAfterTheRetentionUnlessManagedAgain(t *testing.T) {
	e := newEnv(t, nil)
	e.failKeygen.Store(true)
	m := e.start()
	for _, id := range []string{"kept", "gone"} {
		e.register(id, false)
		if _, err := m.ManageVolumeImmediate(context.Background(), id); err == nil {
			t.Fatal("the attempt did not fail")
		}
		m.UnmanageVolume(id)
		m.RetireVolumeMetricSeries(id)
	}
	e.clock.Step(MetricSeriesRetention / 2)
	// kubelet's retry of "kept" within the retention: managed again, it fails again.
	if _, err := m.ManageVolumeImmediate(context.Background(), "kept"); err == nil {
		t.Fatal("the retry did not fail")
	}
	e.clock.Step(MetricSeriesRetention/2 - time.Nanosecond)
	if e.counter(issueErrors, "gone") != 1 || e.counter(issueErrors, "kept") != 2 {
		t.Fatal("a series went before the retention ended")
	}
	e.clock.Step(time.Nanosecond)
	e.poll("the retired series to go", func() bool { return e.counter(issueCalls, "gone") == 0 && e.counter(issueErrors, "gone") == 0 })
	e.clock.Step(MetricSeriesRetention)
	if e.counter(issueCalls, "kept") != 2 || e.counter(issueErrors, "kept") != 2 {
		t.Fatal("the series of a volume managed again went")
	}
}
