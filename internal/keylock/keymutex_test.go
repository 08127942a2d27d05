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

package keylock

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"k8s.io/utils/keymutex"
)

// This file measures the figure of the package documentation: k8s.io/utils/keymutex's hashed
// key mutex, with two locks as on a 2-core node (NewHashed(0) takes one per CPU), makes a
// volume wait for an unrelated one, and this package does not:
//
//	go test -count=1 -v -run TestKeymutexMakesUnrelatedVolumesWait ./internal/keylock/

// TestKeymutexMakesUnrelatedVolumesWait: one volume's lock is held; of 100 other volumes, it
// counts those whose lock cannot be taken (the goroutine taking it blocks), with keymutex and
// with this package.
func TestKeymutexMakesUnrelatedVolumesWait(t *testing.T) {
	const volumes = 100
	km := keymutex.NewHashed(2)
	kmWaited := countWaits(t, volumes, "[sync.Mutex.Lock", func(key string) func() {
		km.LockKey(key)
		return func() { _ = km.UnlockKey(key) }
	})
	var l Locks
	ownWaited := countWaits(t, volumes, "[select", l.LockNoContext)
	t.Logf("figure: of %d volumes, while another volume's lock is held, waiting: keymutex.NewHashed(2) %d, this package %d", volumes, kmWaited, ownWaited)
	if kmWaited == 0 || ownWaited != 0 {
		t.Errorf("waited: keymutex %d (want some), this package %d (want 0)", kmWaited, ownWaited)
	}
}

// countWaits holds the lock of "held-volume", then takes the lock of each of n other volumes on
// a goroutine of its own and counts those that block (one more goroutine in the wait state
// blockedIn); it then frees the held lock and waits for every goroutine to end.
func countWaits(t *testing.T, n int, blockedIn string, lock func(key string) (unlock func())) int {
	t.Helper()
	unlockHeld := lock("held-volume")
	var wg sync.WaitGroup
	waited := 0
	for i := range n {
		key := fmt.Sprintf("volume-%d", i)
		blockedBefore := goroutinesIn(blockedIn)
		acquired := make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			unlock := lock(key)
			close(acquired)
			unlock()
		}()
		if untilAcquiredOrBlocked(t, acquired, blockedIn, blockedBefore) {
			waited++
		}
	}
	unlockHeld()
	wg.Wait()
	return waited
}

// goroutinesIn counts the goroutines whose wait state starts with state.
func goroutinesIn(state string) int {
	buf := make([]byte, 1<<20)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), state)
}

// untilAcquiredOrBlocked waits, bounded, until acquired is closed (false) or one more goroutine
// than before is in the wait state blockedIn (true).
func untilAcquiredOrBlocked(t *testing.T, acquired <-chan struct{}, blockedIn string, blockedBefore int) bool {
	t.Helper()
	for i := 0; ; i++ {
		select {
		case <-acquired:
			return false
		default:
		}
		if goroutinesIn(blockedIn) > blockedBefore {
			return true
		}
		if i > 100_000 {
			t.Fatal("a goroutine neither took its lock nor blocked")
		}
		runtime.Gosched()
	}
}
