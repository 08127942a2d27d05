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

package docs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// apacheLines is the Apache License 2.0's notice, line by line, after the copyright line (the
// licence upstream csi-lib has too).
var apacheLines = []string{
	``,
	`Licensed under the Apache License, Version 2.0 (the "License");`,
	`you may not use this file except in compliance with the License.`,
	`You may obtain a copy of the License at`,
	``,
	`    http://www.apache.org/licenses/LICENSE-2.0`,
	``,
	`Unless required by applicable law or agreed to in writing, software`,
	`distributed under the License is distributed on an "AS IS" BASIS,`,
	`WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.`,
	`See the License for the specific language governing permissions and`,
	`limitations under the License.`,
}

// copyrightLine is cert-manager's copyright line, with or without the year (its newer
// repositories drop the year; csi-lib's files carry the year they were written).
var copyrightLine = regexp.MustCompile(`^Copyright( [0-9]{4})? The csi-lib fork authors\.$`)

// headerFor returns the header a source file in the given comment style must open with:
// "go" is a block comment, "hash" is lines starting with "# ".
func headerFor(style string) []string {
	var out []string
	switch style {
	case "go":
		out = append(out, "/*", "")
		out = append(out, apacheLines...)
		out = append(out, "*/")
	case "hash":
		out = append(out, "")
		for _, l := range apacheLines {
			out = append(out, strings.TrimRight("# "+l, " "))
		}
	}
	return out
}

// headerStyle says which header a file needs, or "" for files that carry none (Markdown,
// go.mod and go.sum, JSON and test data, which have no comment syntax or are not source).
func headerStyle(rel string) string {
	base := filepath.Base(rel)
	switch {
	case strings.HasSuffix(base, ".go"):
		return "go"
	case strings.HasSuffix(base, ".sh"), strings.HasSuffix(base, ".yaml"),
		base == "Makefile", base == "Dockerfile", rel == ".ci/run":
		return "hash"
	}
	return ""
}

// checkHeader reports what is wrong with a file's header, or "" when it is upstream's. Lines a
// header may follow (a shebang, Go build constraints and the blank line after them) are skipped.
func checkHeader(style string, content string) string {
	lines := strings.Split(content, "\n")
	i := 0
	for i < len(lines) && (strings.HasPrefix(lines[i], "#!") || strings.HasPrefix(lines[i], "//go:build") || lines[i] == "") {
		i++
	}
	want := headerFor(style)
	// The copyright line is the second line of a Go header and the first of a hash header.
	copyrightAt := 1
	if style == "hash" {
		copyrightAt = 0
	}
	for j, w := range want {
		if i+j >= len(lines) {
			return "the file ends inside the header"
		}
		got := lines[i+j]
		if j == copyrightAt {
			text := got
			if style == "hash" {
				text = strings.TrimPrefix(got, "# ")
			}
			if !copyrightLine.MatchString(text) {
				return fmt.Sprintf("line %d is %q, not the project's copyright line", i+j+1, got)
			}
			continue
		}
		if got != w {
			return fmt.Sprintf("line %d is %q, want %q", i+j+1, got, w)
		}
	}
	return ""
}

// TestSourceFilesCarryTheHeader checks that every source file of every module in the repository
// opens with the Apache-2.0 notice under the project's own copyright line: the code was written
// here, anew, so no header may name upstream's authors.
func TestSourceFilesCarryTheHeader(t *testing.T) {
	root := ".."
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == "bin" || rel == ".git" || strings.HasPrefix(d.Name(), "cover") || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		style := headerStyle(filepath.ToSlash(rel))
		if style == "" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checked++
		if problem := checkHeader(style, string(b)); problem != "" {
			t.Errorf("%s: %s", rel, problem)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked %d source files; the walk did not find the repository", checked)
	}
}

// TestCheckHeaderRefuses shows the check failing on the headers it must refuse.
func TestCheckHeaderRefuses(t *testing.T) {
	good := strings.Join(append([]string{"/*", "Copyright 2026 The csi-lib fork authors."}, append(apacheLines, "*/", "", "package x")...), "\n")
	if p := checkHeader("go", good); p != "" {
		t.Fatalf("the project's header refused: %s", p)
	}
	for name, content := range map[string]string{
		"upstream's authors": strings.Replace(good, "The csi-lib fork authors.", "The cert-manager Authors.", 1),
		"no header":          "package x\n",
		"licence edited":     strings.Replace(good, "limitations under the License.", "limitations.", 1),
	} {
		if checkHeader("go", content) == "" {
			t.Errorf("%s: accepted", name)
		}
	}
	hash := "#!/usr/bin/env bash\n" + strings.Join(append([]string{"# Copyright The csi-lib fork authors."}, headerFor("hash")[1:]...), "\n") + "\nset -e\n"
	if p := checkHeader("hash", hash); p != "" {
		t.Fatalf("the project's shell header refused: %s", p)
	}
	if checkHeader("hash", "#!/usr/bin/env bash\n# Copyright 2026 Someone.\nset -e\n") == "" {
		t.Error("a shell header naming other authors was accepted")
	}
}
