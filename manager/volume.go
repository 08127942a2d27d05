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
	"sync"
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
// owners ask for them through its methods. mu guards the attempt in flight, and orders every
// change: the flags, the pod, the logger and the last write are written under it and read without
// it, so that reading them (a turn does, often) never waits. Holding mu, a method calls nothing
// else but the attempt's cancel (volume -> context in the package doc's lock order). The registry
// calls the volume's methods under its lock, and the status under its own.
type managedVolume struct {
	id        string
	managedAt time.Time

	mu    sync.Mutex
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
	// inFlight is the attempt running for the volume; nil between attempts.
	inFlight *attemptInFlight
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

// attemptInFlight is an attempt of the volume that is running: how to end it, and, while its
// WriteKeypair runs, a channel closed when that returns.
type attemptInFlight struct {
	end     context.CancelCauseFunc
	writing chan struct{}
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
// volume is closed (flagClosed).
func (v *managedVolume) startsLoop() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.flags.Load()&(flagLoopStarted|flagClosed) != 0 {
		return false
	}
	v.flags.Or(flagLoopStarted)
	return true
}

// is reports whether every flag of f is set.
func (v *managedVolume) is(f volumeFlags) bool {
	return v.flags.Load()&f == f
}

// attemptStarted records the attempt starting, with the cancel that ends it (at once, with
// errStopped, if the registration has ended); attemptDone clears it.
func (v *managedVolume) attemptStarted(end context.CancelCauseFunc) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.flags.Load()&flagClosed != 0 {
		end(errStopped)
		return
	}
	v.inFlight = &attemptInFlight{end: end}
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
	v.flags.Or(flagTerminating)
	if v.inFlight != nil {
		v.inFlight.end(ErrPodTerminating)
	}
}

// setPod gives the volume the pod its metadata names; it reports the UID of the pod it had, and
// whether the UID changed (only then is the pod replaced).
func (v *managedVolume) setPod(pod *volumePod) (old types.UID, changed bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
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
	v.mu.Lock()
	defer v.mu.Unlock()
	v.flags.Or(flagClosed)
	if v.inFlight != nil && v.inFlight.end != nil {
		v.inFlight.end(errStopped)
	}
	return v.pod.Load().UID()
}

// ended reports whether the registration has ended (close).
func (v *managedVolume) ended() bool {
	return v.is(flagClosed)
}

// writeStarts reports whether the attempt in flight may call WriteKeypair: false once the
// volume is fenced. Until writeEnded, fence waits for the write.
func (v *managedVolume) writeStarts() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.flags.Load()&flagFenced != 0 {
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
		v.lastWrite.Store(written)
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
	v.flags.Or(flagFenced)
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
	return v.lastWrite.Load()
}

// podRef is the reference to the volume's pod, for Events; nil while not fully known.
func (v *managedVolume) podRef() *corev1.ObjectReference {
	return v.pod.Load().ref()
}

// conditionPod is what the pod condition needs of the volume: its pod's reference (nil while not
// fully known) and whether the volume was resumed at start-up.
func (v *managedVolume) conditionPod() (ref *corev1.ObjectReference, resumed bool) {
	return v.pod.Load().ref(), v.is(flagResumed)
}

// logger is the manager's logger with the volume's ID and, once known, its pod's name.
func (v *managedVolume) logger() logr.Logger {
	return *v.log.Load()
}
