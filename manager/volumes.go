/*
Copyright 2026 The cert-manager Authors.

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
	"sync"
	"time"

	"github.com/cert-manager/csi-lib/metadata"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// volumeTable is the set of managed volumes and what is shown of each, under one lock: a
// volume's registration, its place under its pod, its state and the count of volumes in each
// state change together, so registering and unregistering are single steps and nothing shown
// outlives, or precedes, a registration. Every change to what is shown of a volume goes through
// changeLocked, which keeps the counts and tells the observer (the board): that is the one
// place a volume's state moves.
//
// The table's lock guards the table; a volume's own lock guards the volume, and the table takes
// it after its own.
type volumeTable struct {
	mu      sync.Mutex
	stopped bool
	byID    map[string]*managedVolume
	// byPod holds the IDs of each pod's volumes: a slice, as a pod rarely has more than one.
	byPod  map[types.UID][]string
	counts map[string]int // registered volumes by state
	// terminating holds the pods known to be terminating, with when that was learned; their
	// volumes make no attempt. Entries go after terminatingMemory.
	terminating map[types.UID]time.Time
	// observer is told of every change, under the table's lock and the volume's.
	observer tableObserver
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
		byID:        make(map[string]*managedVolume),
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
	t.byID[v.id] = v
	v.mu.Lock()
	defer v.mu.Unlock()
	t.counts[v.shown.status.state()]++
	t.observer.countsChanged(t.counts)
	if meta != nil {
		t.noteLocked(v, *meta)
	}
	return true
}

// remove unregisters v, takes it off the counts and tells the observer, under the table's lock
// and v's, so a volume registered again under the same ID is never touched by it. It reports
// false, and does nothing, if v is not, or no longer, registered.
func (t *volumeTable) remove(v *managedVolume) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byID[v.id] != v {
		return false
	}
	delete(t.byID, v.id)
	v.mu.Lock()
	defer v.mu.Unlock()
	t.dropPodLocked(v)
	t.counts[v.shown.status.state()]--
	t.observer.countsChanged(t.counts)
	t.observer.removed(v, &v.shown)
	return true
}

// update runs change on a registered volume's shown state (see changeLocked). It reports false,
// and runs nothing, if v is not registered.
func (t *volumeTable) update(v *managedVolume, change func(s *shownVolume)) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byID[v.id] != v {
		return false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	t.changeLocked(v, change)
	return true
}

// changeLocked runs change on v's shown state, keeps the counts in step with the state it
// leaves, and tells the observer. The table's lock and v's are held.
func (t *volumeTable) changeLocked(v *managedVolume, change func(s *shownVolume)) {
	before := v.shown.status.state()
	change(&v.shown)
	if after := v.shown.status.state(); after != before {
		t.counts[before]--
		t.counts[after]++
		t.observer.countsChanged(t.counts)
	}
	t.observer.shown(v, &v.shown)
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
	return t.byID[id]
}

// note records what a registered volume's metadata says: its pod (filed under the pod's UID,
// for RequeuePod and PodTerminating; a volume of a pod known to be terminating is marked so)
// and whether it has a certificate.
func (t *volumeTable) note(v *managedVolume, meta metadata.Metadata) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byID[v.id] != v {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	t.noteLocked(v, meta)
}

func (t *volumeTable) noteLocked(v *managedVolume, meta metadata.Metadata) {
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
	t.changeLocked(v, func(s *shownVolume) {
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
		t.byID[id].podTerminates()
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

// markLoopStarted records that v's loop starts; false if it has started already, v is no
// longer registered or the table is stopped.
func (t *volumeTable) markLoopStarted(v *managedVolume) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped || t.byID[v.id] != v {
		return false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.flags&flagLoopStarted != 0 {
		return false
	}
	v.flags |= flagLoopStarted
	return true
}

func (t *volumeTable) isStopped() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stopped
}

// stop refuses further registrations and returns the registered volumes, which stay registered.
func (t *volumeTable) stop() []*managedVolume {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	vols := make([]*managedVolume, 0, len(t.byID))
	for _, v := range t.byID {
		vols = append(vols, v)
	}
	return vols
}

// managedVolume is the manager's state for one registration of a volume: from ManageVolume (or a
// publish, or the resumption at start-up) to UnmanageVolume, Stop or the loss of its metadata.
//
// The volume owns its state and guards all of it with mu; what other owners need of it they ask
// for through its methods. The volume table takes mu, after its own lock, when it files the
// volume under its pod, marks its loop started or changes what the board shows of it (the
// shown state and the table's counts change together); nothing holding mu takes another lock of
// the manager's, except the pod conditions' from the board while it shows a volume.
type managedVolume struct {
	id        string
	managedAt time.Time
	// ctx ends with the registration; the contexts of its attempts derive from it. It is a
	// context and keeps its own lock, as every context does.
	ctx volumeContext
	// requeue holds at most one pending Requeue.
	requeue chan struct{}

	mu    sync.Mutex
	flags volumeFlags
	// pod is the volume's pod as its metadata names it; nil until a metadata naming a pod UID
	// was read.
	pod *volumePod
	// lastWrite is the last key pair written for this registration; nil before the first.
	lastWrite *keypairWrite
	// inFlight is the attempt running for the volume; nil between attempts.
	inFlight *attemptInFlight
	// shown is what the board shows of the volume.
	shown shownVolume
}

// volumeFlags are the facts of a volume's registration that only ever become true.
type volumeFlags uint8

const (
	// resumed: registered at start-up from stored state (a volume mounted before this
	// process), not by a publish or a ManageVolume call.
	flagResumed volumeFlags = 1 << iota
	// loopStarted: the volume's renewal loop has started.
	flagLoopStarted
	// terminating: the volume's pod is terminating; no attempt is made any more.
	flagTerminating
	// fenced: UnmanageVolume has run; nothing writes for this registration any more.
	flagFenced
)

// volumePod is the volume's pod as its metadata names it: its UID (for RequeuePod and
// PodTerminating), its name (for the log) and namespace. The strings are the metadata's own.
type volumePod struct {
	uid             types.UID
	namespace, name string
}

// ref is the reference that Events and the pod condition name; nil unless name, namespace and
// UID are all known. It is made on each call: only a volume that is shown needs one.
func (p *volumePod) ref() *corev1.ObjectReference {
	if p == nil || p.name == "" || p.namespace == "" {
		return nil
	}
	return &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Name: p.name, Namespace: p.namespace, UID: p.uid}
}

// attemptInFlight is an attempt of the volume that is running: how to end it, and, while its
// WriteKeypair runs, a channel closed when that returns.
type attemptInFlight struct {
	end     context.CancelCauseFunc
	writing chan struct{}
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

func newVolume(id string, now time.Time, resumed bool) *managedVolume {
	v := &managedVolume{id: id, managedAt: now, requeue: make(chan struct{}, 1)}
	if resumed {
		v.flags = flagResumed
	}
	v.ctx.done = make(chan struct{})
	return v
}

// is reports whether every flag of f is set.
func (v *managedVolume) is(f volumeFlags) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.flags&f == f
}

// attemptStarted records the attempt starting, with the cancel that ends it; attemptDone
// clears it.
func (v *managedVolume) attemptStarted(end context.CancelCauseFunc) {
	v.mu.Lock()
	v.inFlight = &attemptInFlight{end: end}
	v.mu.Unlock()
}

func (v *managedVolume) attemptDone() {
	v.mu.Lock()
	v.inFlight = nil
	v.mu.Unlock()
}

// podTerminates marks the volume's pod terminating and ends the attempt in flight, if any, with
// ErrPodTerminating.
func (v *managedVolume) podTerminates() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.podTerminatesLocked()
}

func (v *managedVolume) podTerminatesLocked() {
	v.flags |= flagTerminating
	if v.inFlight != nil {
		v.inFlight.end(ErrPodTerminating)
	}
}

// writeStarts reports whether the attempt in flight may call WriteKeypair: false once the
// volume is fenced. Until writeEnded, fence waits for the write.
func (v *managedVolume) writeStarts() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.flags&flagFenced != 0 {
		return false
	}
	if v.inFlight == nil {
		v.inFlight = &attemptInFlight{}
	}
	v.inFlight.writing = make(chan struct{})
	return true
}

// writeEnded records the end of a WriteKeypair that writeStarts allowed, and, if it wrote, the
// key pair written.
func (v *managedVolume) writeEnded(written *keypairWrite) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if written != nil {
		v.lastWrite = written
	}
	if v.inFlight != nil && v.inFlight.writing != nil {
		close(v.inFlight.writing)
		v.inFlight.writing = nil
	}
}

// fence makes sure nothing writes for this registration any more: it waits for a WriteKeypair
// already running, and no other starts.
func (v *managedVolume) fence() {
	v.mu.Lock()
	v.flags |= flagFenced
	var writing chan struct{}
	if v.inFlight != nil {
		writing = v.inFlight.writing
	}
	v.mu.Unlock()
	if writing != nil {
		<-writing
	}
}

// lastWritten is the last key pair written for this registration; nil before the first.
func (v *managedVolume) lastWritten() *keypairWrite {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.lastWrite
}

// podRef is the reference to the volume's pod, for Events; nil while not fully known.
func (v *managedVolume) podRef() *corev1.ObjectReference {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.podRefLocked()
}

func (v *managedVolume) podRefLocked() *corev1.ObjectReference {
	return v.pod.ref()
}

// logger is log with the volume's ID and, once known, its pod's name.
func (v *managedVolume) logger(log logr.Logger) logr.Logger {
	v.mu.Lock()
	pod := v.pod
	v.mu.Unlock()
	if pod != nil {
		return log.WithValues("volume_id", v.id, "pod", pod.name)
	}
	return log.WithValues("volume_id", v.id)
}
