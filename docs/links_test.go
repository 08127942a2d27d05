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

// Package docs holds the project's documentation. Its tests check that every relative link in
// every Markdown file of the repository resolves, to a file and, where it names one, a heading,
// that every ```go block of README.md and docs/ compiles against this module, and that every
// source file carries the project's Apache-2.0 header.
package docs

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

var linkPattern = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestRelativeLinksResolve: every link in a Markdown file that is not a URL names a file or
// directory that exists, and a "#fragment" names a heading of the file it points to.
func TestRelativeLinksResolve(t *testing.T) {
	files := markdownFiles(t, "..")
	if len(files) < 5 {
		t.Fatalf("found %d Markdown files; the walk is broken", len(files))
	}
	checked := 0
	for _, file := range files {
		for _, link := range links(t, file) {
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			checked++
			if err := resolve(file, link); err != nil {
				t.Errorf("%s: link %q: %v", file, link, err)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link checked")
	}
}

// markdownFiles lists the Markdown files under root, outside .git and bin.
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// links returns the link targets of a Markdown file, outside fenced code blocks.
func links(t *testing.T, file string) []string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	fenced := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		for _, m := range linkPattern.FindAllStringSubmatch(line, -1) {
			out = append(out, m[1])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// resolve checks one link of file.
func resolve(file, link string) error {
	target, fragment, _ := strings.Cut(link, "#")
	path := file
	if target != "" {
		path = filepath.Join(filepath.Dir(file), target)
		if _, err := os.Stat(path); err != nil {
			return err
		}
	}
	if fragment == "" {
		return nil
	}
	if !strings.HasSuffix(path, ".md") {
		return fmt.Errorf("a fragment on a file that is not Markdown")
	}
	anchors, err := headingAnchors(path)
	if err != nil {
		return err
	}
	if !anchors[fragment] {
		return fmt.Errorf("no heading with the anchor %q in %s", fragment, path)
	}
	return nil
}

// headingAnchors returns the anchors GitHub gives the headings of a Markdown file: lower case,
// spaces to hyphens, punctuation other than hyphens and underscores dropped, "-1", "-2", ...
// after repeats.
func headingAnchors(path string) (map[string]bool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	anchors := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		anchor := b.String()
		if n := seen[anchor]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", anchor, n)] = true
		} else {
			anchors[anchor] = true
		}
		seen[anchor]++
	}
	return anchors, nil
}
