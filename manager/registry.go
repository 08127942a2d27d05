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
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// registry is which volumes are managed: each registration by its volume ID and by its pod's
// UID, and the pods known to be terminating. It owns these maps and guards them with mu.
//
// Invariants: a volume is in byID from register until end (or Stop), and then closed (see
// managedVolume.close); a volume in byID is filed in byPod under the UID of the pod its volume
// holds, if that UID is known; a pod in terminating terminates every volume filed under it.
//
// Holding mu, the registry calls only the volume's methods (registry -> volume in the package
// doc's lock order), and never another owner.
type registry struct {
	mu      sync.Mutex
	stopped bool
	byID    map[string]*managedVolume
	// byPod holds the IDs of each pod's volumes: a slice, as a pod rarely has more than one.
	byPod map[types.UID][]string
	// terminating holds the pods known to be terminating, with when that was learned; their
	// volumes make no attempt. Entries go after terminatingMemory.
	terminating map[types.UID]time.Time
}

// terminatingMemory is how long the registry remembers a terminating pod, so that a publish
// that comes after PodTerminating is refused too.
const terminatingMemory = time.Hour

func newRegistry() *registry {
	return &registry{
		byID:        make(map[string]*managedVolume),
		byPod:       make(map[types.UID][]string),
		terminating: make(map[types.UID]time.Time),
	}
}

// add registers v, with the pod its metadata names (nil: none known; see setPod); false if its
// ID is registered already, and errStopped if the manager stopped.
func (r *registry) add(v *managedVolume, pod *volumePod) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.stopped:
		return false, errStopped
	case r.byID[v.id] != nil:
		return false, nil
	}
	r.byID[v.id] = v
	r.setPodLocked(v, pod)
	return true, nil
}

// remove takes v out of the registry and closes it; false if v is not registered (another
// registration of the ID may be).
func (r *registry) remove(v *managedVolume) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byID[v.id] != v {
		return false
	}
	delete(r.byID, v.id)
	r.unfileLocked(v.id, v.close())
	return true
}

// get is the registration of the volume ID; nil if it is not managed.
func (r *registry) get(id string) *managedVolume {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byID[id]
}

// setPod gives the registered volume v the pod its metadata names (nil: no UID known) and files
// it under that pod; a pod known to be terminating terminates it at once. A volume's pod changes
// only here, under mu, so a pod already the volume's needs no lock (a turn finds it so).
func (r *registry) setPod(v *managedVolume, pod *volumePod) {
	if v.pod.Load().UID() == pod.UID() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byID[v.id] == v {
		r.setPodLocked(v, pod)
	}
}

func (r *registry) setPodLocked(v *managedVolume, pod *volumePod) {
	old, changed := v.setPod(pod)
	if !changed {
		return
	}
	r.unfileLocked(v.id, old)
	if uid := pod.UID(); uid != "" {
		r.byPod[uid] = append(r.byPod[uid], v.id)
		if _, ok := r.terminating[uid]; ok {
			v.podTerminates()
		}
	}
}

// unfileLocked takes the volume ID from under the pod's UID.
func (r *registry) unfileLocked(id string, uid types.UID) {
	ids := slices.DeleteFunc(r.byPod[uid], func(other string) bool { return other == id })
	if len(ids) == 0 {
		delete(r.byPod, uid)
	} else {
		r.byPod[uid] = ids
	}
}

// podVolumes is the IDs of the pod's registered volumes.
func (r *registry) podVolumes(uid types.UID) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.byPod[uid])
}

// podTerminates remembers the pod terminating from now (forgetting the pods learned more than
// terminatingMemory ago) and terminates its registered volumes; it returns how many it has.
func (r *registry) podTerminates(uid types.UID, now time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	maps.DeleteFunc(r.terminating, func(_ types.UID, since time.Time) bool { return now.Sub(since) > terminatingMemory })
	if _, ok := r.terminating[uid]; !ok {
		r.terminating[uid] = now
	}
	for _, id := range r.byPod[uid] {
		r.byID[id].podTerminates()
	}
	return len(r.byPod[uid])
}

// stop refuses every registration from now on and returns the registered volumes, which stay
// registered until each is ended.
func (r *registry) stop() []*managedVolume {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	return slices.Collect(maps.Values(r.byID))
}
