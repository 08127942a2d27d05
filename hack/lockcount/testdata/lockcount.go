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

// Package lockcount records lock acquisitions. hack/lockcount writes it into a throwaway copy
// of the repository, whose owners' Lock calls it has rewritten to call Count; it is never part
// of the library.
//
// Each record carries the goroutine that took the lock and the goroutines that created it, so
// that a test can tell an operation's goroutines from the informer's and its own. The creators
// are known only when the process runs with GODEBUG=tracebackancestors=N.
package lockcount

import (
	"bytes"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Hit is one acquisition.
type Hit struct {
	Owner string
	// G is the goroutine that took the lock; Ancestors, the goroutines that created it, its
	// parent first.
	G         uint64
	Ancestors []uint64
	// Stack is the goroutine's stack at the acquisition, without its ancestors'.
	Stack string
}

var (
	recording atomic.Bool
	mu        sync.Mutex
	hits      []Hit
)

// Count records that owner's lock was just taken, while recording.
func Count(owner string) {
	if !recording.Load() {
		return
	}
	g, anc, stack := parse(stackOf(false))
	mu.Lock()
	hits = append(hits, Hit{Owner: owner, G: g, Ancestors: anc, Stack: stack})
	mu.Unlock()
}

// Start begins recording, from no hits.
func Start() {
	mu.Lock()
	hits = nil
	mu.Unlock()
	recording.Store(true)
}

// Stop ends recording and returns the hits recorded since Start.
func Stop() []Hit {
	recording.Store(false)
	mu.Lock()
	defer mu.Unlock()
	out := hits
	hits = nil
	return out
}

// Goid returns the calling goroutine's ID, and the IDs of the goroutines that created it.
func Goid() (uint64, []uint64) {
	g, anc, _ := parse(stackOf(false))
	return g, anc
}

// Goroutines returns every live goroutine's ID with the IDs of its creators.
func Goroutines() map[uint64][]uint64 {
	all := stackOf(true)
	out := map[uint64][]uint64{}
	for _, block := range bytes.Split(all, []byte("\n\ngoroutine ")) {
		if !bytes.HasPrefix(block, []byte("goroutine ")) {
			block = append([]byte("goroutine "), block...)
		}
		g, anc, _ := parse(block)
		out[g] = anc
	}
	return out
}

// Descends reports whether a goroutine with creators anc (parent first) was created, directly
// or not, by root.
func Descends(anc []uint64, root uint64) bool {
	for _, a := range anc {
		if a == root {
			return true
		}
	}
	return false
}

func stackOf(all bool) []byte {
	buf := make([]byte, 16<<10)
	for {
		n := runtime.Stack(buf, all)
		if n < len(buf) {
			return buf[:n]
		}
		buf = make([]byte, 2*len(buf))
	}
}

// parse reads one goroutine's traceback: "goroutine N [...]:", its frames, then with
// tracebackancestors one "[originating from goroutine M]:" section per creator.
func parse(tb []byte) (g uint64, ancestors []uint64, stack string) {
	s := string(tb)
	if rest, ok := strings.CutPrefix(s, "goroutine "); ok {
		if i := strings.IndexByte(rest, ' '); i > 0 {
			g, _ = strconv.ParseUint(rest[:i], 10, 64)
		}
	}
	const origin = "[originating from goroutine "
	stack = s
	if i := strings.Index(s, origin); i >= 0 {
		stack = s[:i]
	}
	for rest := s; ; {
		i := strings.Index(rest, origin)
		if i < 0 {
			break
		}
		rest = rest[i+len(origin):]
		j := strings.IndexByte(rest, ']')
		if j < 0 {
			break
		}
		if id, err := strconv.ParseUint(rest[:j], 10, 64); err == nil {
			ancestors = append(ancestors, id)
		}
	}
	return g, ancestors, stack
}
