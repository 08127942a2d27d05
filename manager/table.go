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

	"k8s.io/apimachinery/pkg/types"

	"github.com/cert-manager/csi-lib/metadata"
)

// volumeTable is the set of managed volumes and what is shown of each, under one lock: a
// volume's registration, its place under its pod, its state and the count of volumes in each
// state change together, so registering and unregistering are single steps and nothing shown
// outlives, or precedes, a registration. Every change to what is shown of a volume goes through
// changeLocked, which keeps the counts and tells the observer (the board): that is the one
// place a volume's state moves.
//
// The table's lock guards the table and what is shown of each volume; a volume's own lock guards
// the volume, and the table takes it after its own.
type volumeTable struct {
	mu      sync.Mutex
	stopped bool
	byID    map[string]*tableEntry
	// byPod holds the IDs of each pod's volumes: a slice, as a pod rarely has more than one.
	byPod  map[types.UID][]string
	counts map[string]int // registered volumes by state
	// terminating holds the pods known to be terminating, with when that was learned; their
	// volumes make no attempt. Entries go after terminatingMemory.
	terminating map[types.UID]time.Time
	// observer is told of every change, under the table's lock and the volume's.
	observer tableObserver
}

// tableEntry is a registered volume and what is shown of it.
type tableEntry struct {
	v     *managedVolume
	shown shownVolume
}

// tableObserver is what the table tells of its changes, under its lock and the volume's; it
// must not keep counts, nor take the table's lock.
type tableObserver interface {
	// countsChanged: the number of volumes in some state changed.
	countsChanged(counts map[string]int)
	// shown: what is shown of a registered volume may have changed.
	shown(v *managedVolume, s *shownVolume)
	// removed: the volume is no longer registered.
	removed(v *managedVolume, s *shownVolume)
}

func newVolumeTable() *volumeTable {
	return &volumeTable{
		byID:        make(map[string]*tableEntry),
		byPod:       make(map[types.UID][]string),
		terminating: make(map[types.UID]time.Time),
		counts:      make(map[string]int),
	}
}

// add registers v, counts it in its state and, if meta is not nil, notes what the volume's
// metadata says (see note); false if its ID is already registered or the table is stopped.
func (t *volumeTable) add(v *managedVolume, meta *metadata.Metadata) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped || t.byID[v.id] != nil {
		return false
	}
	e := &tableEntry{v: v}
	t.byID[v.id] = e
	v.mu.Lock()
	defer v.mu.Unlock()
	t.counts[e.shown.status.state()]++
	t.observer.countsChanged(t.counts)
	if meta != nil {
		t.noteLocked(e, *meta)
	}
	return true
}

// remove unregisters v, takes it off the counts and tells the observer, under the table's lock
// and v's, so a volume registered again under the same ID is never touched by it. It reports
// false, and does nothing, if v is not, or no longer, registered.
func (t *volumeTable) remove(v *managedVolume) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.entryLocked(v)
	if e == nil {
		return false
	}
	delete(t.byID, v.id)
	v.mu.Lock()
	defer v.mu.Unlock()
	v.flags |= flagClosed
	t.dropPodLocked(v)
	t.counts[e.shown.status.state()]--
	t.observer.countsChanged(t.counts)
	t.observer.removed(v, &e.shown)
	return true
}

// update runs change on a registered volume's shown state (see changeLocked). It reports false,
// and runs nothing, if v is not registered.
func (t *volumeTable) update(v *managedVolume, change func(s *shownVolume)) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.entryLocked(v)
	if e == nil {
		return false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	t.changeLocked(e, change)
	return true
}

// entryLocked is v's entry; nil if v is not, or no longer, registered. The table's lock is held.
func (t *volumeTable) entryLocked(v *managedVolume) *tableEntry {
	if e := t.byID[v.id]; e != nil && e.v == v {
		return e
	}
	return nil
}

// changeLocked runs change on what is shown of e's volume, keeps the counts in step with the
// state it leaves, and tells the observer. The table's lock and the volume's are held.
func (t *volumeTable) changeLocked(e *tableEntry, change func(s *shownVolume)) {
	before := e.shown.status.state()
	change(&e.shown)
	if after := e.shown.status.state(); after != before {
		t.counts[before]--
		t.counts[after]++
		t.observer.countsChanged(t.counts)
	}
	t.observer.shown(e.v, &e.shown)
}

// showAllCounts tells the observer the counts as they are.
func (t *volumeTable) showAllCounts() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.observer.countsChanged(t.counts)
}

// get returns the registered volume with the ID, or nil.
func (t *volumeTable) get(id string) *managedVolume {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.byID[id]; e != nil {
		return e.v
	}
	return nil
}

// note records what a registered volume's metadata says: its pod (filed under the pod's UID,
// for RequeuePod and PodTerminating; a volume of a pod known to be terminating is marked so)
// and whether it has a certificate.
func (t *volumeTable) note(v *managedVolume, meta metadata.Metadata) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.entryLocked(v)
	if e == nil {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	t.noteLocked(e, meta)
}

func (t *volumeTable) noteLocked(e *tableEntry, meta metadata.Metadata) {
	v := e.v
	if pod := podOf(meta); podUID(v.pod) != podUID(pod) {
		t.dropPodLocked(v)
		v.pod = pod
		if uid := podUID(pod); uid != "" {
			t.byPod[uid] = append(t.byPod[uid], v.id)
			if _, ok := t.terminating[uid]; ok {
				v.podTerminatesLocked()
			}
		}
	}
	t.changeLocked(e, func(s *shownVolume) {
		if hasCertificate(meta) {
			s.status.apply(eventHasCertificate)
		}
	})
}

// podOf is the pod a volume's metadata names; nil when it names no pod UID.
func podOf(meta metadata.Metadata) *volumePod {
	uid := types.UID(meta.VolumeContext[metadata.PodUIDVolumeContextKey])
	if uid == "" {
		return nil
	}
	return &volumePod{
		uid:       uid,
		namespace: meta.VolumeContext[metadata.PodNamespaceVolumeContextKey],
		name:      meta.VolumeContext[metadata.PodNameVolumeContextKey],
	}
}

func podUID(p *volumePod) types.UID {
	if p == nil {
		return ""
	}
	return p.uid
}

// terminatingMemory is how long the table remembers a terminating pod: far longer than any
// grace period kubelet honours before it unpublishes the pod's volumes.
const terminatingMemory = time.Hour

// podTerminates remembers that the pod is terminating, forgets pods learned of more than
// terminatingMemory before now, and marks the pod's registered volumes (see volume.podTerminates).
// It reports how many volumes it marked.
func (t *volumeTable) podTerminates(uid types.UID, now time.Time) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	for other, since := range t.terminating {
		if now.Sub(since) > terminatingMemory {
			delete(t.terminating, other)
		}
	}
	if _, ok := t.terminating[uid]; !ok {
		t.terminating[uid] = now
	}
	for _, id := range t.byPod[uid] {
		t.byID[id].v.podTerminates()
	}
	return len(t.byPod[uid])
}

// dropPodLocked takes v out of its pod's list; the table's lock and v's are held.
func (t *volumeTable) dropPodLocked(v *managedVolume) {
	uid := podUID(v.pod)
	ids := t.byPod[uid]
	for i, id := range ids {
		if id == v.id {
			ids = append(ids[:i], ids[i+1:]...)
			break
		}
	}
	if len(ids) == 0 {
		delete(t.byPod, uid)
	} else {
		t.byPod[uid] = ids
	}
}

// podVolumes returns the IDs of the pod's registered volumes.
func (t *volumeTable) podVolumes(uid types.UID) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.byPod[uid]...)
}

func (t *volumeTable) isStopped() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stopped
}

// stop refuses further registrations, closes every registered volume to a loop (flagClosed),
// stops its certificate timers and returns the registered volumes, which stay registered and keep
// their counts; the observer is not told.
func (t *volumeTable) stop() []*managedVolume {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	vols := make([]*managedVolume, 0, len(t.byID))
	for _, e := range t.byID {
		vols = append(vols, e.v)
		e.v.mu.Lock()
		e.v.flags |= flagClosed
		e.v.mu.Unlock()
		stopWatch(e.shown.watch)
	}
	return vols
}

// shownVolume is what the board shows of a volume: its state, and what it watches of the
// volume's certificate.
type shownVolume struct {
	status volumeStatus
	// watch exists only when the board watches certificates.
	watch *certificateWatch
}

// outcome is the class of a volume's last attempt, for its state.
type outcome int

const (
	outcomeNone outcome = iota
	outcomeGatePending
	outcomeFailed
)

// volumeStatus is what a volume's state in certmanager_csi_volumes is derived from. It changes
// only through apply.
type volumeStatus struct {
	hasCertificate   bool
	last             outcome
	overdue, expired bool
}

// volumeEvent is what moves a volume's status (see the package documentation's diagram).
type volumeEvent int

const (
	// eventHasCertificate: the volume's metadata records a certificate.
	eventHasCertificate volumeEvent = iota
	// eventWritten: a key pair was written; what was wrong before is over.
	eventWritten
	// eventGatePending: the readiness gate said "not yet".
	eventGatePending
	// eventFailed: an attempt failed with an issuance error.
	eventFailed
	// eventOverdue: the certificate is past its renewal point by the margin, not renewed.
	eventOverdue
	// eventExpired: the certificate is past its NotAfter, not renewed.
	eventExpired
)

// apply moves the status by ev, and reports whether it changed: the one place where a volume's
// status changes.
func (s *volumeStatus) apply(ev volumeEvent) bool {
	before := *s
	switch ev {
	case eventHasCertificate:
		s.hasCertificate = true
	case eventWritten:
		*s = volumeStatus{hasCertificate: true}
	case eventGatePending:
		s.last = outcomeGatePending
	case eventFailed:
		s.last = outcomeFailed
	case eventOverdue:
		s.overdue = true
	case eventExpired:
		s.expired = true
	}
	return *s != before
}

// state names the volume's state (metrics.VolumeStates); the worst condition wins.
func (s volumeStatus) state() string {
	switch {
	case s.expired:
		return "expired"
	case s.overdue:
		return "overdue"
	case s.last == outcomeFailed:
		return "failing"
	case s.last == outcomeGatePending:
		return "gate_pending"
	case s.hasCertificate:
		return "issued"
	default:
		return "pending"
	}
}
