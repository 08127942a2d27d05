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

package deploy

import (
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// repositoryRoot is the images' build context: the repository's root.
const repositoryRoot = "../.."

// dockerfiles are the images' Dockerfiles, which kustomization.yaml's images name.
var dockerfiles = []string{"../csi-driver/Dockerfile", "../approver/Dockerfile"}

// buildCommand is a Dockerfile's build: the package it builds in the examples module.
var buildCommand = regexp.MustCompile(`(?m)^RUN cd examples && .*\bgo build\b.* (\./\S+)$`)

// TestImageBuildContext: the repository root's .dockerignore, read as Docker reads it (moby's
// patternmatcher), leaves out of the images' build context what no build reads (bin/'s
// binaries, .git, test binaries, coverage output), and keeps what the Dockerfiles' builds read:
// in a copy of the context alone, `go list` loads every package the Dockerfiles build, with the
// same files from this repository as here, and with the modules' go.mod and go.sum.
func TestImageBuildContext(t *testing.T) {
	pm := dockerignore(t)
	for _, out := range []string{
		".git/HEAD", "bin/envtest/1.36.3/kube-apiserver", "bin/cm-controllers/v1.21.2/cm-controllers",
		"manager/manager.test", "examples/deploy/deploy.test", "cover.out", "coverage.html", "examples/cover.out",
		"manager/cpu.prof", "test/e2e/main.go", "hack/demo/main.go",
	} {
		if excluded, err := pm.MatchesOrParentMatches(out); err != nil || !excluded {
			t.Errorf("the build context holds %s (%v)", out, err)
		}
	}

	var packages []string
	for _, f := range dockerfiles {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m := buildCommand.FindSubmatch(raw)
		if m == nil {
			t.Fatalf("%s: no `RUN cd examples && go build ... ./<package>`", f)
		}
		packages = append(packages, string(m[1]))
	}

	context := t.TempDir()
	copyContext(t, pm, context)
	inContext := listFiles(t, filepath.Join(context, "examples"), context, packages)
	here := listFiles(t, filepath.Join(repositoryRoot, "examples"), repositoryRoot, packages)
	if !slices.Equal(inContext, here) {
		t.Errorf("the build context's packages read other files than the repository's:\ncontext: %v\nhere: %v", inContext, here)
	}
	if len(here) == 0 || !slices.ContainsFunc(here, func(f string) bool { return strings.HasPrefix(f, "manager/") }) {
		t.Fatalf("the Dockerfiles' packages %v read no file of the library: %v", packages, here)
	}
}

// dockerignore reads the repository root's .dockerignore.
func dockerignore(t *testing.T) *patternmatcher.PatternMatcher {
	t.Helper()
	f, err := os.Open(filepath.Join(repositoryRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	return pm
}

// copyContext copies into dir the regular files of the repository that the patterns leave in
// the build context.
func copyContext(t *testing.T, pm *patternmatcher.PatternMatcher, dir string) {
	t.Helper()
	root, err := filepath.Abs(repositoryRoot)
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil || rel == "." {
			return err
		}
		excluded, err := pm.MatchesOrParentMatches(filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		switch {
		case excluded && d.IsDir() && !pm.Exclusions():
			return filepath.SkipDir
		case excluded:
			return nil
		case d.IsDir():
			return os.MkdirAll(filepath.Join(dir, rel), 0o755)
		case d.Type().IsRegular():
			return copyFile(path, filepath.Join(dir, rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// listFiles lists, as the Dockerfiles' builds see them (CGO_ENABLED=0, go.mod and go.sum as
// they stand), the files under root that the packages and their dependencies read: root-relative
// paths, sorted. It fails the test if go list cannot load them.
func listFiles(t *testing.T, examples, root string, packages []string) []string {
	t.Helper()
	absRoot, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", append([]string{"list", "-deps", "-f",
		`{{.Dir}}{{range .GoFiles}} {{.}}{{end}}{{range .EmbedFiles}} {{.}}{{end}}{{range .IgnoredGoFiles}} {{.}}{{end}}`}, packages...)...)
	cmd.Dir = examples
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=readonly", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list in %s: %v\n%s", examples, err, out)
	}
	var files []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		rel, err := filepath.Rel(absRoot, fields[0])
		if err != nil || strings.HasPrefix(rel, "..") {
			continue // a module of the module cache, or the standard library
		}
		for _, f := range fields[1:] {
			files = append(files, filepath.ToSlash(filepath.Join(rel, f)))
		}
	}
	for _, mod := range []string{"go.mod", "go.sum", "examples/go.mod", "examples/go.sum"} {
		if _, err := os.Stat(filepath.Join(root, mod)); err != nil {
			t.Errorf("%s: %v", mod, err)
		}
		files = append(files, mod)
	}
	slices.Sort(files)
	return files
}
