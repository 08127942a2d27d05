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
	"context"
	"sync"
	"testing"
)

// keysInUse returns how many keys of l have a holder or a waiter.
func keysInUse(l *Locks) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.locks)
}

func TestSerialisesOneKey(t *testing.T) {
	var l Locks
	var inside, maxInside int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			unlock := l.LockNoContext("a")
			mu.Lock()
			inside++
			if inside > maxInside {
				maxInside = inside
			}
			mu.Unlock()
			mu.Lock()
			inside--
			mu.Unlock()
			unlock()
		}()
	}
	wg.Wait()
	if maxInside != 1 {
		t.Fatalf("%d holders at once, want 1", maxInside)
	}
	if keysInUse(&l) != 0 {
		t.Fatalf("%d entries left, want 0", keysInUse(&l))
	}
}

func TestContextEndsWait(t *testing.T) {
	var l Locks
	unlock := l.LockNoContext("a")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Lock(ctx, "a"); err == nil {
		t.Fatal("expected the cancelled context to end the wait")
	}
	// Another key is independent.
	u2, err := l.Lock(ctx, "b")
	if err == nil {
		u2()
		// A cancelled context may still win the select when the lock is free; both are fine.
	}
	unlock()
	unlock() // a second call is harmless
	if keysInUse(&l) != 0 {
		t.Fatalf("%d entries left, want 0", keysInUse(&l))
	}
	u3, err := l.Lock(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	u3()
}
