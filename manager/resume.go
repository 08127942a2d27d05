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

// resume picks up where the previous process left off: the keys the store's start-up sweep kept
// wait for their volumes' next publish, and every stored volume whose metadata says a publish
// succeeded is registered, with a loop that starts from the metadata read here. A volume whose
// metadata cannot be read is logged and skipped.
//
// A kept key whose request the informer's cache does not hold is removed, unless the cache did
// not sync (synced is false: its list was refused): then every kept key is kept, since its
// request may exist, and the grace period ends those no publish takes back.
func (m *Manager) resume(synced bool) {
	requestExists := m.requests.Exists
	if !synced {
		requestExists = func(string) bool { return true }
	}
	m.keys.LoadSwept(requestExists, m.opts.Clock, m.expireSweptKeys)
	ids, err := m.opts.MetadataReader.ListVolumes()
	if err != nil {
		m.log.Error(err, "Cannot list stored volumes; none resumed")
		return
	}
	resumed := 0
	for _, id := range ids {
		meta, err := m.opts.MetadataReader.ReadMetadata(id)
		if err != nil {
			m.log.Error(err, "Cannot read volume metadata; not resuming it", "volume_id", id)
			continue
		}
		if !meta.Mounted {
			m.log.V(2).Info("Not resuming volume whose publish never succeeded", "volume_id", id)
			continue
		}
		if v, _ := m.register(id, &meta, true); v != nil {
			m.startLoop(v, &meta)
			resumed++
		}
	}
	m.log.Info("Resumed management of mounted volumes", "count", resumed, "stored", len(ids))
}

// expireSweptKeys ends the grace period of the keys the start-up sweep kept.
func (m *Manager) expireSweptKeys() {
	tr := m.life.Track()
	if tr == nil {
		return
	}
	defer tr.Done()
	m.keys.ExpireSwept()
}
