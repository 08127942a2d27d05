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

package main

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeTree writes files (path -> source) under a new directory and returns it.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, src := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const ownerSource = `package reg

import "sync"

type registry struct {
	mu sync.Mutex
	n  int
}

type other struct {
	lock sync.RWMutex
}

func (r *registry) add() {
	r.mu.Lock() // the registry's lock
	defer r.mu.Unlock()
	r.n++
}

func (o *other) read(r *registry) int {
	o.lock.RLock()
	defer o.lock.RUnlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}
`

const keylockSource = `package keylock

import "sync"

type Locks struct {
	mu    sync.Mutex
	locks map[string]chan struct{}
}

type entry struct{ sem chan struct{} }

func (l *Locks) Lock(e *entry, done <-chan struct{}) bool {
	l.mu.Lock()
	l.mu.Unlock()
	select {
	case e.sem <- struct{}{}:
		return true
	case <-done:
		return false
	}
}
`

func TestInstrumentCountsEveryOwnerOnTheSameLines(t *testing.T) {
	root := writeTree(t, map[string]string{
		"manager/reg.go":              ownerSource,
		"manager/reg_test.go":         "package reg\n\nfunc helper(r *registry) { r.mu.Lock() }\n",
		"internal/keylock/keylock.go": keylockSource,
	})
	ins, err := instrument(root, []string{"manager", "internal"}, []byte("package lockcount\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"reg.registry": 2, "reg.other": 1, "keylock.Locks": 1, perKeyOwner: 1}
	if len(ins.owners) != len(want) {
		t.Fatalf("owners %v, want %v", ins.owners, want)
	}
	for o, n := range want {
		if ins.owners[o] != n {
			t.Errorf("owner %s: %d sites, want %d (all: %v)", o, ins.owners[o], n, ins.owners)
		}
	}
	for path, before := range map[string]string{"manager/reg.go": ownerSource, "internal/keylock/keylock.go": keylockSource} {
		after, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := parser.ParseFile(token.NewFileSet(), path, after, 0); err != nil {
			t.Fatalf("%s does not parse after the rewrite: %v\n%s", path, err, after)
		}
		b, a := strings.Split(before, "\n"), strings.Split(string(after), "\n")
		if len(a) != len(b) {
			t.Fatalf("%s: %d lines after the rewrite, %d before", path, len(a), len(b))
		}
		for i := range b {
			acquires := strings.Contains(b[i], "Lock()") || strings.Contains(b[i], "e.sem <-")
			if acquires != strings.Contains(a[i], "lockcount.Count(") {
				t.Errorf("%s:%d: %q became %q", path, i+1, b[i], a[i])
			}
		}
	}
	if got, _ := os.ReadFile(filepath.Join(root, "manager/reg_test.go")); strings.Contains(string(got), "lockcount") {
		t.Error("a test file was instrumented")
	}
	if _, err := os.Stat(filepath.Join(root, "internal/lockcount/lockcount.go")); err != nil {
		t.Errorf("the counting package was not written: %v", err)
	}
	site := ins.sites[0]
	if site.file == "" || site.line == 0 {
		t.Errorf("a site without its place: %+v", site)
	}
}

func TestInstrumentStopsOnShapesItDoesNotFollow(t *testing.T) {
	for name, tc := range map[string]struct {
		files map[string]string
		want  string
	}{
		"no owner at all": {
			files: map[string]string{"manager/a.go": "package a\n\nfunc f() {}\n"},
			want:  "no lock owner",
		},
		"an owner whose Lock calls are gone": {
			files: map[string]string{"manager/a.go": "package a\n\nimport \"sync\"\n\ntype t struct{ mu sync.Mutex }\n\nfunc (x *t) f() { x.mu.TryLock() }\n"},
			want:  "no Lock or RLock call",
		},
		"an embedded mutex": {
			files: map[string]string{"manager/a.go": "package a\n\nimport \"sync\"\n\ntype t struct{ sync.Mutex }\n\nfunc (x *t) f() { x.Lock() }\n"},
			want:  "embeds a mutex",
		},
		"a mutex variable": {
			files: map[string]string{"manager/a.go": ownerSource + "\nvar global sync.Mutex\n"},
			want:  "a mutex variable",
		},
		"a Lock on something not an owner's field": {
			files: map[string]string{"manager/a.go": ownerSource + "\nfunc g(l interface{ Lock() }) { l.Lock() }\n"},
			want:  "not on a struct's mutex field",
		},
		"a Lock outside any function declaration": {
			files: map[string]string{"manager/a.go": ownerSource + "\nvar g = func(r *registry) { r.mu.Lock() }\n"},
			want:  "in function bodies the rewrite instrumented",
		},
		"a deferred Lock": {
			files: map[string]string{"manager/a.go": ownerSource + "\nfunc (r *registry) g() { defer r.mu.Lock() }\n"},
			want:  "deferred",
		},
		"keylock without its per-key acquisition": {
			files: map[string]string{
				"manager/a.go":                ownerSource,
				"internal/keylock/keylock.go": strings.Replace(keylockSource, "e.sem <- struct{}{}", "e.token <- struct{}{}", 1),
			},
			want: "per-key acquisition",
		},
		"a package with locks of its own": {
			files: map[string]string{"manager/a.go": strings.Replace(ownerSource, `import "sync"`, "import (\n\t\"sync\"\n\n\t_ \"k8s.io/utils/keymutex\"\n)", 1)},
			want:  "whose locks the rewrite cannot count",
		},
	} {
		t.Run(name, func(t *testing.T) {
			if _, ok := tc.files["internal/keylock/keylock.go"]; !ok {
				tc.files["internal/none/none.go"] = "package none\n"
			}
			root := writeTree(t, tc.files)
			_, err := instrument(root, []string{"manager", "internal"}, []byte("package lockcount\n"))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

const queueSource = `package podcondition

import (
	"sync"

	"k8s.io/client-go/util/workqueue"
)

type Writer struct {
	mu    sync.Mutex
	queue workqueue.TypedRateLimitingInterface[string]
}

func (w *Writer) Set(uid string) {
	w.mu.Lock()
	w.mu.Unlock()
	w.queue.Add(uid)
}

func (w *Writer) Run() {
	for {
		uid, shutdown := w.queue.Get()
		if shutdown {
			return
		}
		w.queue.Done(uid)
	}
}
`

func TestInstrumentCountsCallsOnAClientGoWorkqueue(t *testing.T) {
	root := writeTree(t, map[string]string{"internal/podcondition/podcondition.go": queueSource})
	ins, err := instrument(root, []string{"internal"}, []byte("package lockcount\n"))
	if err != nil {
		t.Fatal(err)
	}
	if n := ins.owners["podcondition.Writer.queue (client-go workqueue)"]; n != 3 {
		t.Errorf("%d workqueue calls counted, want 3 (owners %v)", n, ins.owners)
	}
	after, err := os.ReadFile(filepath.Join(root, "internal/podcondition/podcondition.go"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parser.ParseFile(token.NewFileSet(), "podcondition.go", after, 0); err != nil {
		t.Fatalf("does not parse after the rewrite: %v\n%s", err, after)
	}
	if !strings.Contains(string(after), `lockcount.Count("podcondition.Writer.queue (client-go workqueue)"); uid, shutdown := w.queue.Get()`) {
		t.Errorf("the count is not before the statement that calls Get:\n%s", after)
	}

	loopHeader := strings.Replace(queueSource, "\tfor {\n", "\tfor w.queue.Len() > 0 {\n", 1)
	root = writeTree(t, map[string]string{"internal/podcondition/podcondition.go": loopHeader})
	if _, err := instrument(root, []string{"internal"}, []byte("package lockcount\n")); err == nil || !strings.Contains(err.Error(), "loop's header") {
		t.Errorf("a workqueue call in a loop's header: got %v, want an error", err)
	}
}
