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
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/cert-manager/csi-lib/internal/clockutil"
)

// MetricSeriesRetention is how long a volume's per-volume metric series outlive the volume
// (RetireVolumeMetricSeries), on Options.Clock: long enough for every scrape to see the final
// counts, short enough that a long-lived node does not keep series for every pod it ever ran.
const MetricSeriesRetention = 10 * time.Minute

// seriesRetention deletes the per-volume metric series of retired volumes once
// MetricSeriesRetention has passed without the volume being registered again. It owns its map
// of pending deletions and the lock that guards it; the deletion itself runs outside that lock.
type seriesRetention struct {
	clock  clock.Clock
	delete func(volumeID string)

	mu      sync.Mutex
	stopped bool
	// pending holds each retired volume's deletion; an entry is a pointer so that a timer that
	// fires after its entry was replaced or kept can tell.
	pending map[string]*retirement
}

type retirement struct{ stop func() bool }

func newSeriesRetention(clk clock.Clock, deleteSeries func(volumeID string)) *seriesRetention {
	return &seriesRetention{clock: clk, delete: deleteSeries, pending: make(map[string]*retirement)}
}

// retire schedules the deletion of the volume's series MetricSeriesRetention from now,
// replacing a deletion already scheduled for it.
func (r *seriesRetention) retire(volumeID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	if old := r.pending[volumeID]; old != nil {
		old.stop()
	}
	entry := &retirement{}
	entry.stop = clockutil.AfterFunc(r.clock, MetricSeriesRetention, func() { r.expire(volumeID, entry) })
	r.pending[volumeID] = entry
}

// expire deletes the volume's series if entry is still its scheduled deletion.
func (r *seriesRetention) expire(volumeID string, entry *retirement) {
	r.mu.Lock()
	if r.stopped || r.pending[volumeID] != entry {
		r.mu.Unlock()
		return
	}
	delete(r.pending, volumeID)
	r.mu.Unlock()
	r.delete(volumeID)
}

// keep cancels the volume's scheduled deletion, if any: it is managed again.
func (r *seriesRetention) keep(volumeID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if entry := r.pending[volumeID]; entry != nil {
		entry.stop()
		delete(r.pending, volumeID)
	}
}

// stop cancels every scheduled deletion; the series stay with the process.
func (r *seriesRetention) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	for id, entry := range r.pending {
		entry.stop()
		delete(r.pending, id)
	}
}
