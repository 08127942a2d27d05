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

// Package keylock provides a set of mutexes addressed by string key, such as a volume ID.
//
// Each key's lock is created on first use and freed when nobody holds or waits for it, so the
// set's size follows the number of keys in use, not the number ever seen. Lock waits until the
// key is free or the context ends, which lets a gRPC handler give up with its own deadline.
//
// # Why not k8s.io/utils/keymutex
//
// keymutex.NewHashed shares a fixed number of mutexes among all keys (one per CPU by default),
// so a volume waits for an unrelated one whose lock hashes alike: with one volume's lock held,
// 50 of 100 other volumes wait with NewHashed(2), as on a 2-core node, and none here
// (keymutex_test.go). Its LockKey takes no context either, so a publish waiting behind a slow
// write could not give up at its deadline.
package keylock

import (
	"context"
	"sync"
)

// Locks is a set of per-key mutexes. The zero value is ready to use.
type Locks struct {
	mu    sync.Mutex
	locks map[string]*entry
}

type entry struct {
	sem  chan struct{} // holds one token while the key is locked
	refs int           // holders plus waiters
}

// Lock acquires the lock for key, waiting until it is free or ctx is done. On success it returns
// the function that releases the lock; it must be called exactly once.
func (l *Locks) Lock(ctx context.Context, key string) (unlock func(), err error) {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = make(map[string]*entry)
	}
	e, ok := l.locks[key]
	if !ok {
		e = &entry{sem: make(chan struct{}, 1)}
		l.locks[key] = e
	}
	e.refs++
	l.mu.Unlock()

	select {
	case e.sem <- struct{}{}:
		var once sync.Once
		return func() { once.Do(func() { <-e.sem; l.release(key, e) }) }, nil
	case <-ctx.Done():
		l.release(key, e)
		return nil, ctx.Err()
	}
}

// LockNoContext acquires the lock for key, waiting as long as it takes.
func (l *Locks) LockNoContext(key string) (unlock func()) {
	unlock, _ = l.Lock(context.Background(), key)
	return unlock
}

func (l *Locks) release(key string, e *entry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e.refs--
	if e.refs == 0 {
		delete(l.locks, key)
	}
}
