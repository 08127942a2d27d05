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

// Command lockcount counts the locks of the library's owners that one first publish and one
// renewal take (docs/benchmarks.md). It is in the hack module; from the repository's root:
//
//	(cd hack && go run ./lockcount)        # the table
//	(cd hack && go run ./lockcount -v)     # and every acquisition with its stack
//
// It exports the repository's HEAD (git archive; -rev another commit) into a temporary directory, rewrites that copy
// so that every acquisition of an owner's mutex under manager/ and internal/ (a Lock or RLock
// call on a struct's sync.Mutex or sync.RWMutex field, and keylock's per-key lock) is followed,
// on the same line, by a call that counts it under the owner's name (package.Type), adds the
// counting package and a test of package manager to the copy, runs that test, and prints the
// acquisitions per owner. The test drives, on a fake clock, with a PodCondition and an
// EventRecorder, Metrics nil and a MemoryFS:
//   - a first publish as the node server makes it (ManageVolumeForPublish on the metadata it
//     registered and read), counted on the publishing goroutine from entry to return; the
//     goroutines it started (the volume's first loop turn) are counted apart;
//   - a renewal: the clock stepped to the renewal point, counted on every goroutine that step
//     started, until all have ended (the loop waits again).
//
// Goroutines are told apart by their creators (GODEBUG=tracebackancestors): the informer's
// handlers and the pod-condition writer were started before either operation, and their
// acquisitions while it ran are shown as "other". The rewrite stops, rather than count fewer
// locks, when the source has a shape it does not follow; the command fails when the
// operations took no lock or did not complete.
package main

import (
	"archive/tar"
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

//go:embed testdata/lockcount.go
var counterSource []byte

//go:embed testdata/zz_lockcount_test.go
var testSource []byte

// instrumentedDirs are the directories, of the repository's root, whose owners are counted.
var instrumentedDirs = []string{"manager", "internal"}

// classes are the table's columns: a window's operation, or the other goroutines in it.
var classes = []struct{ window, class, title string }{
	{"publish", "publish", "publish"},
	{"publish", "first turn", "first turn"},
	{"renewal", "renewal", "renewal"},
	{"publish", "other", "other: publish"},
	{"renewal", "other", "other: renewal"},
}

type hit struct {
	Owner string `json:"owner"`
	Class string `json:"class"`
	G     uint64 `json:"g"`
	Stack string `json:"stack"`
}

type window struct {
	Name string `json:"name"`
	Hits []hit  `json:"hits"`
}

func main() {
	repo := flag.String("repo", "", "the repository to measure (default: the git repository of the working directory)")
	rev := flag.String("rev", "HEAD", "the commit to measure")
	keep := flag.Bool("keep", false, "keep the instrumented copy and print where it is")
	verbose := flag.Bool("v", false, "print every instrumented site and every acquisition with its stack")
	flag.Parse()
	if err := run(*repo, *rev, *keep, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "lockcount:", err)
		os.Exit(1)
	}
}

func run(repo, rev string, keep, verbose bool) error {
	if repo == "" {
		top, err := output("", "git", "rev-parse", "--show-toplevel")
		if err != nil {
			return err
		}
		repo = top
	}
	commit, err := output(repo, "git", "rev-parse", "--short=12", rev+"^{commit}")
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "lockcount-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Println("instrumented copy kept in", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	if err := export(repo, commit, dir); err != nil {
		return err
	}
	ins, err := instrument(dir, instrumentedDirs, counterSource)
	if err != nil {
		return fmt.Errorf("instrumenting %s: %w", commit, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manager", "zz_lockcount_test.go"), testSource, 0o644); err != nil {
		return err
	}
	if verbose {
		for _, s := range ins.sites {
			fmt.Printf("site %-28s %s:%d\n", s.owner, s.file, s.line)
		}
	}

	result := filepath.Join(dir, "lockcount.json")
	goCmd := os.Getenv("GO")
	if goCmd == "" {
		goCmd = "go"
	}
	cmd := exec.Command(goCmd, "test", "-count=1", "-run", "^TestLockCount$", "./manager/")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GODEBUG=tracebackancestors=100", "GOWORK=off", "LOCKCOUNT_OUT="+result)
	var testOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &testOut, &testOut
	if err := cmd.Run(); err != nil {
		os.Stderr.Write(testOut.Bytes())
		return fmt.Errorf("the counting test failed in the instrumented copy: %w", err)
	}
	data, err := os.ReadFile(result)
	if err != nil {
		return fmt.Errorf("the counting test wrote no result: %w", err)
	}
	var windows []window
	if err := json.Unmarshal(data, &windows); err != nil {
		return fmt.Errorf("reading the result: %w", err)
	}
	if verbose {
		for _, w := range windows {
			for i, h := range w.Hits {
				fmt.Printf("%s %3d g%-5d %-12s %-28s %s\n", w.Name, i+1, h.G, h.Class, h.Owner, frames(h.Stack, dir))
			}
		}
	}
	return printTable(os.Stdout, commit, ins, windows)
}

// printTable prints the acquisitions per owner and column, with totals, and fails when an
// operation took no lock or a hit names an owner the rewrite did not instrument.
func printTable(w io.Writer, commit string, ins *instrumented, windows []window) error {
	counts := map[string][]int{}
	owners := make([]string, 0, len(ins.owners))
	for o := range ins.owners {
		owners = append(owners, o)
		counts[o] = make([]int, len(classes))
	}
	sort.Strings(owners)
	totals := make([]int, len(classes))
	seen := map[string]bool{}
	testHits := 0
	for _, win := range windows {
		seen[win.Name] = true
		for _, h := range win.Hits {
			if _, ok := counts[h.Owner]; !ok {
				return fmt.Errorf("an acquisition of %q, an owner the rewrite did not instrument", h.Owner)
			}
			if h.Class == "test" {
				testHits++
				continue
			}
			col := -1
			for i, c := range classes {
				if c.window == win.Name && c.class == h.Class {
					col = i
				}
			}
			if col < 0 {
				return fmt.Errorf("an acquisition in window %q of class %q, which the table has no column for", win.Name, h.Class)
			}
			counts[h.Owner][col]++
			totals[col]++
		}
	}
	for _, name := range []string{"publish", "renewal"} {
		if !seen[name] {
			return fmt.Errorf("the result has no %s", name)
		}
	}

	packages := map[string]bool{}
	for _, s := range ins.sites {
		packages[strings.SplitN(s.owner, ".", 2)[0]] = true
	}
	fmt.Fprintf(w, "Lock acquisitions per owner, at %s: one first publish and one renewal on a fake clock\n", commit)
	fmt.Fprintf(w, "(PodCondition and EventRecorder on, Metrics nil, MemoryFS); %d acquisition sites of %d owners in %d packages instrumented\n\n",
		len(ins.sites), len(owners), len(packages))
	width := len("owner")
	for _, o := range owners {
		width = max(width, len(o))
	}
	row := func(name string, cells []string) {
		fmt.Fprintf(w, "  %-*s", width, name)
		for i, c := range cells {
			fmt.Fprintf(w, "  %*s", len(classes[i].title), c)
		}
		fmt.Fprintln(w)
	}
	titles := make([]string, len(classes))
	for i, c := range classes {
		titles[i] = c.title
	}
	row("owner", titles)
	numbers := func(ns []int) []string {
		out := make([]string, len(ns))
		for i, n := range ns {
			out[i] = strconv.Itoa(n)
		}
		return out
	}
	for _, o := range owners {
		row(o, numbers(counts[o]))
	}
	row("total", numbers(totals))
	fmt.Fprintln(w, "\npublish: the publishing goroutine, ManageVolumeForPublish's entry to return; first turn: the goroutines")
	fmt.Fprintln(w, "the publish started, until they ended; renewal: the goroutines the clock's step to the renewal point")
	fmt.Fprintln(w, "started, until they ended (the loop waits again); other: goroutines started before the operation (the")
	fmt.Fprintln(w, "informer's handlers, the pod-condition writer) while it was counted, which varies with timing.")
	if testHits > 0 {
		fmt.Fprintf(w, "(%d acquisitions on the test's own goroutine left out)\n", testHits)
	}
	if totals[0] == 0 || totals[2] == 0 {
		return errors.New("the publish or the renewal took no counted lock: the instrumentation or the test no longer matches the library")
	}
	return nil
}

// export writes the files of repo's commit into dir.
func export(repo, commit, dir string) error {
	cmd := exec.Command("git", "archive", "--format=tar", commit)
	cmd.Dir = repo
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	files := 0
	tr := tar.NewReader(out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			cmd.Wait()
			return fmt.Errorf("reading git archive: %w", err)
		}
		name := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(name, dir+string(filepath.Separator)) {
			cmd.Wait()
			return fmt.Errorf("git archive holds a path outside the copy: %s", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(name, 0o755)
		case tar.TypeReg:
			err = writeFile(name, tr, os.FileMode(h.Mode)&0o755|0o600)
			files++
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, name)
		}
		if err != nil {
			cmd.Wait()
			return err
		}
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("git archive: %w: %s", err, stderr.String())
	}
	if files == 0 {
		return fmt.Errorf("git archive %s gave no files", commit)
	}
	return nil
}

func writeFile(name string, r io.Reader, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func output(dir string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}

// frames shortens a goroutine's stack to its first library and test frames, "function
// file:line" joined by " <- ", without the counting package's own.
func frames(stack, dir string) string {
	lines := strings.Split(stack, "\n")
	var out []string
	for i := 1; i+1 < len(lines) && len(out) < 8; i += 2 {
		fn, loc := strings.TrimSpace(lines[i]), strings.TrimSpace(lines[i+1])
		if strings.Contains(fn, "lockcount.") || fn == "" {
			continue
		}
		if j := strings.LastIndex(fn, "("); j > 0 {
			fn = fn[:j]
		}
		if j := strings.LastIndex(fn, "/"); j >= 0 {
			fn = fn[j+1:]
		}
		if j := strings.Index(loc, " +0x"); j >= 0 {
			loc = loc[:j]
		}
		loc = strings.TrimPrefix(loc, dir+"/")
		if j := strings.LastIndex(loc, "/pkg/mod/"); j >= 0 {
			loc = loc[j+len("/pkg/mod/"):]
		}
		out = append(out, fn+" "+loc)
	}
	return strings.Join(out, " <- ")
}
