package manager

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
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
	// terminating holds the pods known to be terminating, with when that was learned; their
	// volumes make no attempt. Entries go after terminatingMemory.
	terminating map[types.UID]time.Time
	// showCounts is told the counts after every change, under the lock; it must not keep them.
	showCounts func(counts map[string]int)
}

func newVolumeTable(showCounts func(counts map[string]int)) *volumeTable {
	return &volumeTable{
		byID:        make(map[string]*volume),
		byPod:       make(map[types.UID][]string),
		terminating: make(map[types.UID]time.Time),
		counts:      make(map[string]int),
		showCounts:  showCounts,
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
		if _, ok := t.terminating[uid]; ok {
			v.podTerminates()
		}
	}
	return true
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
		t.byID[id].podTerminates()
	}
	return len(t.byPod[uid])
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

// volume is the manager's state for one registration of a volume: from ManageVolume (or a
// publish, or the resumption at start-up) to UnmanageVolume, Stop or the loss of its metadata.
type volume struct {
	id        string
	managedAt time.Time

	// ctx ends with the registration; the contexts of its attempts derive from it.
	ctx volumeContext

	// requeue holds at most one pending Requeue.
	requeue chan struct{}
	// lastWrite is the last key pair written for this registration; nil before the first.
	lastWrite atomic.Pointer[keypairWrite]
	// log is the manager's logger; logger adds the volume's ID and its pod's name, known once
	// the metadata was read. Nothing more is kept per volume: a logger with values can cost
	// hundreds of bytes.
	log     logr.Logger
	podName atomic.Pointer[string]
	// podRef names the volume's Pod for Events and the pod condition, once its metadata named
	// it fully (name, namespace and UID); it never changes after that.
	podRef atomic.Pointer[corev1.ObjectReference]

	// fence is held while WriteKeypair runs; fenced is set under it by UnmanageVolume, after
	// which nothing writes for this registration any more.
	fence  sync.Mutex
	fenced bool

	// attemptMu guards endAttempt: the cancel of the attempt in flight, nil between attempts.
	attemptMu  sync.Mutex
	endAttempt context.CancelCauseFunc
	// terminating: the volume's pod is terminating; no attempt is made any more.
	terminating atomic.Bool

	// resumed: registered at start-up from stored state (a volume mounted before this
	// process), not by a publish or a ManageVolume call.
	resumed bool

	// Guarded by the volume table's lock while the volume is registered.
	podUID      types.UID
	loopStarted bool
	shown       shownVolume
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

// volumeStatus is what a volume's state in certmanager_csi_volumes is derived from.
type volumeStatus struct {
	hasCertificate   bool
	last             outcome
	overdue, expired bool
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

// certificateWatch is what the board knows of the certificate in a volume, and the timers that
// fire when it becomes overdue and when it expires.
type certificateWatch struct {
	notAfter time.Time
	// expiryUnknown: the volume has a certificate from before a restart whose expiry could not
	// be learned (its request is gone); it counts as valid.
	expiryUnknown bool
	renewAt       time.Time // the renewal time the timers were armed for
	generation    uint64    // changes with every certificate written; stale timers do nothing
	stops         []func() bool
	// gatePendingSince is when the gate started saying "not yet"; zero when it is not.
	gatePendingSince time.Time
	gateEventSent    bool
}

func newVolume(id string, now time.Time, log logr.Logger) *volume {
	v := &volume{id: id, managedAt: now, requeue: make(chan struct{}, 1), log: log}
	v.ctx.done = make(chan struct{})
	return v
}

// attemptStarted records the cancel of the attempt starting; attemptDone clears it.
func (v *volume) attemptStarted(cancel context.CancelCauseFunc) {
	v.attemptMu.Lock()
	v.endAttempt = cancel
	v.attemptMu.Unlock()
}

func (v *volume) attemptDone() {
	v.attemptMu.Lock()
	v.endAttempt = nil
	v.attemptMu.Unlock()
}

// podTerminates marks the volume's pod terminating and ends the attempt in flight, if any, with
// ErrPodTerminating.
func (v *volume) podTerminates() {
	v.terminating.Store(true)
	v.attemptMu.Lock()
	defer v.attemptMu.Unlock()
	if v.endAttempt != nil {
		v.endAttempt(ErrPodTerminating)
	}
}

// logger is the manager's logger with the volume's ID and, once known, its pod's name.
func (v *volume) logger() logr.Logger {
	if pod := v.podName.Load(); pod != nil {
		return v.log.WithValues("volume_id", v.id, "pod", *pod)
	}
	return v.log.WithValues("volume_id", v.id)
}

// volumeContext is a context that ends when cancel is called, and for no other reason: no
// parent, deadline or values. A volume is idle most of its life, so it costs one channel and no
// more: the contexts derived from it register through its AfterFunc (which the context package
// uses for a parent that offers it) and leave nothing behind once they are done, where a
// context.WithCancel would keep a map of children for the rest of the volume's life.
type volumeContext struct {
	done chan struct{}

	mu    sync.Mutex
	ended bool
	funcs []*func() // AfterFunc's, until called or stopped
}

var _ context.Context = (*volumeContext)(nil)

func (c *volumeContext) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *volumeContext) Done() <-chan struct{}       { return c.done }
func (c *volumeContext) Value(any) any               { return nil }

// Err is context.Canceled once cancel was called, nil before.
func (c *volumeContext) Err() error {
	select {
	case <-c.done:
		return context.Canceled
	default:
		return nil
	}
}

// AfterFunc calls f on a goroutine of its own once the context ends (at once if it has), unless
// the returned stop is called first; stop reports whether it prevented the call.
func (c *volumeContext) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		go f()
		return func() bool { return false }
	}
	entry := &f
	c.funcs = append(c.funcs, entry)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, e := range c.funcs {
			if e == entry {
				c.funcs = append(c.funcs[:i], c.funcs[i+1:]...)
				if len(c.funcs) == 0 {
					c.funcs = nil
				}
				return true
			}
		}
		return false
	}
}

// cancel ends the context and calls the functions registered with AfterFunc. Only the first call
// does anything.
func (c *volumeContext) cancel() {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return
	}
	c.ended = true
	close(c.done)
	funcs := c.funcs
	c.funcs = nil
	c.mu.Unlock()
	for _, f := range funcs {
		go (*f)()
	}
}
