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

// Command filepairs shows how the files of one Go package use each other, by Go's type checker:
// file A uses file B when A refers to something B declares (a package-level name, a method, a
// struct field). It prints the pairs of files that use each other both ways, with the names used
// each way, then for each file how many of its sibling files it uses. Test files are left out.
//
//	go run ./hack/filepairs ./manager
package main

import (
	"fmt"
	"go/ast"
	"go/types"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/tools/go/packages"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: filepairs PACKAGE")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "filepairs:", err)
		os.Exit(1)
	}
}

func run(pattern string) error {
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo}
	pkgs, err := packages.Load(cfg, pattern)
	if err != nil {
		return err
	}
	if len(pkgs) != 1 {
		return fmt.Errorf("%q is %d packages, want one", pattern, len(pkgs))
	}
	pkg := pkgs[0]
	if len(pkg.Errors) > 0 {
		return pkg.Errors[0]
	}
	uses := fileUses(pkg)
	files := make([]string, 0, len(pkg.GoFiles))
	for _, f := range pkg.GoFiles {
		files = append(files, filepath.Base(f))
	}
	sort.Strings(files)

	var pairs []string
	for i, a := range files {
		for _, b := range files[i+1:] {
			ab, ba := uses[a][b], uses[b][a]
			if len(ab) > 0 && len(ba) > 0 {
				pairs = append(pairs, fmt.Sprintf("  %s <-> %s\n    %s uses %s\n    %s uses %s", a, b, a, names(ab), b, names(ba)))
			}
		}
	}
	fmt.Printf("%s: %d files, %d pairs of files that use each other both ways\n", pkg.PkgPath, len(files), len(pairs))
	for _, p := range pairs {
		fmt.Println(p)
	}
	fmt.Println("sibling files each file uses:")
	for _, f := range files {
		used := make([]string, 0, len(uses[f]))
		for g := range uses[f] {
			used = append(used, g)
		}
		sort.Strings(used)
		fmt.Printf("  %-16s %2d  %s\n", f, len(used), strings.Join(used, " "))
	}
	return nil
}

// fileUses maps a file to the sibling files whose declarations it refers to, with the names.
func fileUses(pkg *packages.Package) map[string]map[string]map[string]bool {
	out := map[string]map[string]map[string]bool{}
	for _, file := range pkg.Syntax {
		from := filepath.Base(pkg.Fset.Position(file.Pos()).Filename)
		ast.Inspect(file, func(n ast.Node) bool {
			id, ok := n.(*ast.Ident)
			if !ok {
				return true
			}
			obj := pkg.TypesInfo.Uses[id]
			if obj == nil || obj.Pkg() != pkg.Types || !obj.Pos().IsValid() {
				return true
			}
			if _, isPkgName := obj.(*types.PkgName); isPkgName {
				return true
			}
			to := filepath.Base(pkg.Fset.Position(obj.Pos()).Filename)
			if to == from {
				return true
			}
			if out[from] == nil {
				out[from] = map[string]map[string]bool{}
			}
			if out[from][to] == nil {
				out[from][to] = map[string]bool{}
			}
			out[from][to][obj.Name()] = true
			return true
		})
	}
	return out
}

func names(set map[string]bool) string {
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
