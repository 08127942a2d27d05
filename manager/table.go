package manager

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// volumeTable is the set of managed volumes and what is shown of each, under one lock: a
// volume's registration, its place under its pod, its state and the count of volumes in each
// state change together, so registering and unregistering are single steps and nothing shown
// outlives, or precedes, a registration.
//
// The table's lock guards the table and, of each registered volume, podUID, loopStarted and
// shown.
type volumeTable struct {
	mu      sync.Mutex
	stopped bool
	byID    map[string]*volume
	// byPod holds the IDs of each pod's volumes: a slice, as a pod rarely has more than one.
	byPod  map[types.UID][]string
	counts map[string]int // registered volumes by state
	// showCounts is told the counts after every change, under the lock; it must not keep them.
	showCounts func(counts map[string]int)
}

func newVolumeTable(showCounts func(counts map[string]int)) *volumeTable {
	return &volumeTable{
		byID:       make(map[string]*volume),
		byPod:      make(map[types.UID][]string),
		counts:     make(map[string]int),
		showCounts: showCounts,
	}
}

// add registers v and counts it in its state; false if its ID is already registered or the
// table is stopped.
func (t *volumeTable) add(v *volume) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped || t.byID[v.id] != nil {
		return false
	}
	t.byID[v.id] = v
	t.counts[v.shown.status.state()]++
	t.showCounts(t.counts)
	return true
}

// remove unregisters v, takes it off the counts and hands its shown state to forget, under the
// table's lock, so a volume registered again under the same ID is never touched by it. It
// reports false, and runs nothing, if v is not, or no longer, registered.
func (t *volumeTable) remove(v *volume, forget func(v *volume, s *shownVolume)) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byID[v.id] != v {
		return false
	}
	delete(t.byID, v.id)
	t.dropPodLocked(v)
	t.counts[v.shown.status.state()]--
	t.showCounts(t.counts)
	forget(v, &v.shown)
	return true
}

// update runs change on a registered volume's shown state under the table's lock, and keeps the
// counts in step with the state it leaves. It reports false, and runs nothing, if v is not
// registered.
func (t *volumeTable) update(v *volume, change func(s *shownVolume)) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byID[v.id] != v {
		return false
	}
	before := v.shown.status.state()
	change(&v.shown)
	if after := v.shown.status.state(); after != before {
		t.counts[before]--
		t.counts[after]++
		t.showCounts(t.counts)
	}
	return true
}

// showAllCounts tells showCounts the counts as they are.
func (t *volumeTable) showAllCounts() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.showCounts(t.counts)
}

// get returns the registered volume with the ID, or nil.
func (t *volumeTable) get(id string) *volume {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byID[id]
}

// setPod files a registered volume under its pod's UID. It reports whether the pod changed.
func (t *volumeTable) setPod(v *volume, uid types.UID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byID[v.id] != v || v.podUID == uid {
		return false
	}
	t.dropPodLocked(v)
	v.podUID = uid
	if uid != "" {
		t.byPod[uid] = append(t.byPod[uid], v.id)
	}
	return true
}

func (t *volumeTable) dropPodLocked(v *volume) {
	ids := t.byPod[v.podUID]
	for i, id := range ids {
		if id == v.id {
			ids = append(ids[:i], ids[i+1:]...)
			break
		}
	}
	if len(ids) == 0 {
		delete(t.byPod, v.podUID)
	} else {
		t.byPod[v.podUID] = ids
	}
}

// podVolumes returns the IDs of the pod's registered volumes.
func (t *volumeTable) podVolumes(uid types.UID) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.byPod[uid]...)
}

// markLoopStarted records that v's loop starts; false if it has started already, v is no
// longer registered or the table is stopped.
func (t *volumeTable) markLoopStarted(v *volume) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped || t.byID[v.id] != v || v.loopStarted {
		return false
	}
	v.loopStarted = true
	return true
}

func (t *volumeTable) isStopped() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stopped
}

// stop refuses further registrations and returns the registered volumes, which stay registered.
func (t *volumeTable) stop() []*volume {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	vols := make([]*volume, 0, len(t.byID))
	for _, v := range t.byID {
		vols = append(vols, v)
	}
	return vols
}
