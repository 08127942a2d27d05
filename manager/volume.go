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
	"sync/atomic"
	"time"

	"github.com/cert-manager/csi-lib/metadata"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// managedVolume is the manager's state for one registration of a volume: from ManageVolume (or a
// publish, or the resumption at start-up) to its end (UnmanageVolume, Stop or the loss of its
// metadata: Manager.end).
//
// The volume owns its flags, its pod, its logger, its last write and its attempt in flight; other
// owners ask for them through its methods. It has no lock: each of these is one atomic word, so
// that a turn reads them without waiting and a renewal takes no lock of the volume at all. Two
// facts must be seen together, and each pair is written in an order that makes one side see the
// other (Go's atomics are sequentially consistent):
//
//   - an attempt stores itself in inFlight, then reads the flags; close and podTerminates set
//     their flag, then read inFlight. So an attempt that starts as the volume closes (or its pod
//     terminates) is ended by one side or the other, never by neither;
//   - a WriteKeypair stores its channel in writing, then reads flagFenced; fence sets the flag,
//     then reads writing. So a write either sees the fence and does not start, or fence waits
//     for it.
//
// The pod and the logger change together only in setPod, which the registry calls under its
// lock, so two changes never interleave.
type managedVolume struct {
	id        string
	managedAt time.Time

	flags atomic.Uint32 // volumeFlags
	// log is baseLog and, once known, the pod's name.
	log atomic.Pointer[logr.Logger]
	// baseLog is the manager's logger with the volume's ID.
	baseLog logr.Logger
	// pod is the volume's pod as its metadata names it; nil until a metadata naming a pod UID
	// was read.
	pod atomic.Pointer[volumePod]
	// lastWrite is the last key pair written for this registration; nil before the first.
	lastWrite atomic.Pointer[keypairWrite]
	// inFlight ends the attempt running for the volume, with a cause; nil between attempts.
	inFlight atomic.Pointer[context.CancelCauseFunc]
	// writing is closed when the WriteKeypair running for the volume returns; nil when none
	// runs.
	writing atomic.Pointer[chan struct{}]
}

// volumeFlags are the facts of a volume's registration that only ever become true.
type volumeFlags = uint32

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
	// closed: the registration ended (see close): no loop starts for it, and no attempt runs.
	flagClosed
)

// volumePod is the volume's pod as its metadata names it: its UID (for RequeuePod and
// PodTerminating), its name (for the log) and namespace. The strings are the metadata's own.
type volumePod struct {
	uid             types.UID
	namespace, name string
}

// UID is the pod's UID; empty for a nil pod.
func (p *volumePod) UID() types.UID {
	if p == nil {
		return ""
	}
	return p.uid
}

// ref is the reference that Events and the pod condition name; nil unless name, namespace and
// UID are all known. It is made on each call: only a volume that is shown needs one.
func (p *volumePod) ref() *corev1.ObjectReference {
	if p == nil || p.name == "" || p.namespace == "" {
		return nil
	}
	return &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Name: p.name, Namespace: p.namespace, UID: p.uid}
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

func newVolume(log logr.Logger, id string, now time.Time, resumed bool) *managedVolume {
	v := &managedVolume{id: id, managedAt: now}
	if resumed {
		v.flags.Store(flagResumed)
	}
	v.baseLog = log.WithValues("volume_id", id)
	v.log.Store(&v.baseLog)
	return v
}

// startsLoop records that the volume's loop starts; false if it has started already or the
// volume is closed (flagClosed). A closed volume may be marked started: no loop starts for it
// either way.
func (v *managedVolume) startsLoop() bool {
	return v.flags.Or(flagLoopStarted)&(flagLoopStarted|flagClosed) == 0
}

// is reports whether every flag of f is set.
func (v *managedVolume) is(f volumeFlags) bool {
	return v.flags.Load()&f == f
}

// attemptStarted records the attempt starting, with the cancel that ends it: at once, with
// errStopped if the registration has ended, or ErrPodTerminating if its pod terminates.
// attemptDone clears it. A volume has one attempt at a time: a publish's runs before its loop
// starts, and the queue never turns a key twice at once.
func (v *managedVolume) attemptStarted(end context.CancelCauseFunc) {
	v.inFlight.Store(&end)
	switch f := v.flags.Load(); {
	case f&flagClosed != 0:
		end(errStopped)
	case f&flagTerminating != 0:
		end(ErrPodTerminating)
	}
}

func (v *managedVolume) attemptDone() {
	v.inFlight.Store(nil)
}

// endAttempt ends the attempt in flight, if any, with cause. Ending one that has just returned
// does nothing.
func (v *managedVolume) endAttempt(cause error) {
	if end := v.inFlight.Load(); end != nil {
		(*end)(cause)
	}
}

// podTerminates marks the volume's pod terminating and ends the attempt in flight, if any, with
// ErrPodTerminating.
func (v *managedVolume) podTerminates() {
	v.flags.Or(flagTerminating)
	v.endAttempt(ErrPodTerminating)
}

// setPod gives the volume the pod its metadata names; it reports the UID of the pod it had, and
// whether the UID changed (only then is the pod replaced). The registry calls it under its lock.
func (v *managedVolume) setPod(pod *volumePod) (old types.UID, changed bool) {
	old = v.pod.Load().UID()
	if old == pod.UID() {
		return old, false
	}
	v.pod.Store(pod)
	log := v.baseLog
	if pod != nil {
		log = log.WithValues("pod", pod.name)
	}
	v.log.Store(&log)
	return old, true
}

// close ends the registration: no loop starts for it any more, and the attempt in flight, if
// any, ends with errStopped. It reports the pod's UID. The registry closes a volume as it
// removes it.
func (v *managedVolume) close() types.UID {
	v.flags.Or(flagClosed)
	v.endAttempt(errStopped)
	return v.pod.Load().UID()
}

// writeStarts reports whether the attempt in flight may call WriteKeypair: false once the
// volume is fenced. Until writeEnded, fence waits for the write.
func (v *managedVolume) writeStarts() bool {
	done := make(chan struct{})
	v.writing.Store(&done)
	if v.is(flagFenced) {
		v.writeEnded(nil)
		return false
	}
	return true
}

// writeEnded records the end of a WriteKeypair that writeStarts allowed, and, if it wrote, the
// key pair written.
func (v *managedVolume) writeEnded(written *keypairWrite) {
	if written != nil {
		v.lastWrite.Store(written)
	}
	if done := v.writing.Swap(nil); done != nil {
		close(*done)
	}
}

// fence makes sure nothing writes for this registration any more: it waits for a WriteKeypair
// already running, and no other starts.
func (v *managedVolume) fence() {
	v.flags.Or(flagFenced)
	if done := v.writing.Load(); done != nil {
		<-*done
	}
}

// lastWritten is the last key pair written for this registration; nil before the first.
func (v *managedVolume) lastWritten() *keypairWrite {
	return v.lastWrite.Load()
}

// podRef is the reference to the volume's pod, for Events and the pod condition; nil while not
// fully known.
func (v *managedVolume) podRef() *corev1.ObjectReference {
	return v.pod.Load().ref()
}

// logger is the manager's logger with the volume's ID and, once known, its pod's name.
func (v *managedVolume) logger() logr.Logger {
	return *v.log.Load()
}
