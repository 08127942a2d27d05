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
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// counterImport is the import path of the counting package written into the copy.
const counterImport = "github.com/cert-manager/csi-lib/internal/lockcount"

// perKeyOwner names keylock's per-key lock, counted where a key's token is taken.
const perKeyOwner = "keylock.Locks (per key)"

// clientGoWorkqueue is client-go's workqueue. Its locks are inside client-go: a call of one of
// its methods on an owner's queue field is counted as one acquisition, before the statement
// that makes it (each of its methods takes the queue's or its rate limiter's lock).
const clientGoWorkqueue = "k8s.io/client-go/util/workqueue"

// foreignLockPackages are packages with locks of their own that the rewrite cannot instrument:
// a library package importing one would take locks the table leaves out, so the rewrite stops.
var foreignLockPackages = []string{
	"k8s.io/utils/keymutex",
	"golang.org/x/sync/semaphore",
	"golang.org/x/sync/singleflight",
}

// site is one lock acquisition found in the source: where the counting call goes and what it
// names.
type site struct {
	owner  string
	file   string
	line   int
	offset int // byte offset in the file where the call is inserted
	text   string
	queue  bool // a call on a client-go workqueue
}

// instrumented is what the rewrite found and changed.
type instrumented struct {
	sites       []site
	owners      map[string]int // owner -> sites
	mutexFields int            // struct fields of type sync.Mutex or sync.RWMutex
}

// instrument rewrites every non-test Go file under the given directories of root (the copy)
// so that each acquisition of a library owner's mutex is followed by a counting call on the
// same line, and writes counter (the counting package's source) into the copy. It fails when
// the source has a shape it does not understand, rather than count fewer locks.
func instrument(root string, dirs []string, counter []byte) (*instrumented, error) {
	res := &instrumented{owners: map[string]int{}}
	pkgs := map[string][]string{} // directory -> its non-test Go files
	for _, d := range dirs {
		err := filepath.WalkDir(filepath.Join(root, d), func(path string, de fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if de.IsDir() && (de.Name() == "testdata" || strings.HasPrefix(de.Name(), ".")) {
				return filepath.SkipDir
			}
			if !de.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
				pkgs[filepath.Dir(path)] = append(pkgs[filepath.Dir(path)], path)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", d, err)
		}
	}
	if len(pkgs) == 0 {
		return nil, fmt.Errorf("no Go package under %v", dirs)
	}
	dirsSorted := make([]string, 0, len(pkgs))
	for d := range pkgs {
		dirsSorted = append(dirsSorted, d)
	}
	sort.Strings(dirsSorted)
	for _, d := range dirsSorted {
		sites, fields, err := instrumentPackage(root, pkgs[d])
		if err != nil {
			return nil, err
		}
		res.mutexFields += fields
		for _, s := range sites {
			res.owners[s.owner]++
		}
		res.sites = append(res.sites, sites...)
	}
	if len(res.owners) == 0 {
		return nil, fmt.Errorf("no lock owner found under %v: the rewrite no longer matches the source", dirs)
	}
	// A second, textual count of the mutex fields, on a walk of its own: a package the walk
	// above missed shows as a difference.
	text, err := textualMutexFields(root, dirs)
	if err != nil {
		return nil, err
	}
	if text != res.mutexFields {
		return nil, fmt.Errorf("%d mutex fields declared under %v (by their text), %d found by the rewrite", text, dirs, res.mutexFields)
	}
	dir := filepath.Join(root, "internal", "lockcount")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "lockcount.go"), counter, 0o644); err != nil {
		return nil, err
	}
	return res, nil
}

// parsedFile is one file of a package with the edits to make to it.
type parsedFile struct {
	path  string
	src   []byte
	ast   *ast.File
	edits []site
}

// instrumentPackage instruments one package's files.
func instrumentPackage(root string, paths []string) ([]site, int, error) {
	fset := token.NewFileSet()
	var files []*parsedFile
	wqImports := map[string]string{} // file -> the name client-go's workqueue is imported as
	for _, p := range paths {
		src, err := os.ReadFile(p)
		if err != nil {
			return nil, 0, err
		}
		f, err := parser.ParseFile(fset, p, src, parser.ParseComments)
		if err != nil {
			return nil, 0, err
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if path == clientGoWorkqueue {
				wqName := "workqueue"
				if imp.Name != nil {
					wqName = imp.Name.Name
				}
				wqImports[p] = wqName
			}
			for _, foreign := range foreignLockPackages {
				if path == foreign {
					return nil, 0, fmt.Errorf("%s imports %s, whose locks the rewrite cannot count", rel(root, p), path)
				}
			}
		}
		files = append(files, &parsedFile{path: p, src: src, ast: f})
	}
	pkgName := files[0].ast.Name.Name

	// The package's owners: struct types with a field of type sync.Mutex or sync.RWMutex.
	// fieldOwners maps a mutex field's name to the types that have it.
	owners := map[string]bool{}
	mutexFields := 0
	fieldOwners := map[string][]string{}
	queueFields := map[string][]string{} // a client-go workqueue field's name -> the types that have it
	for _, pf := range files {
		var err error
		ast.Inspect(pf.ast, func(n ast.Node) bool {
			if err != nil {
				return false
			}
			switch n := n.(type) {
			case *ast.TypeSpec:
				st, ok := n.Type.(*ast.StructType)
				if !ok {
					return true
				}
				for _, fld := range st.Fields.List {
					if wq, ok := wqImports[pf.path]; ok && usesPackage(fld.Type, wq) {
						for _, name := range fld.Names {
							queueFields[name.Name] = append(queueFields[name.Name], n.Name.Name)
						}
						continue
					}
					if !isMutexType(fld.Type) {
						continue
					}
					if len(fld.Names) == 0 {
						err = fmt.Errorf("%s: %s embeds a mutex, which the rewrite does not follow", pos(root, pf, fld.Pos(), fset), n.Name.Name)
						return false
					}
					owners[n.Name.Name] = true
					mutexFields += len(fld.Names)
					for _, name := range fld.Names {
						fieldOwners[name.Name] = append(fieldOwners[name.Name], n.Name.Name)
					}
				}
			case *ast.ValueSpec:
				if n.Type != nil && isMutexType(n.Type) {
					err = fmt.Errorf("%s: a mutex variable outside a struct, which the rewrite does not follow", pos(root, pf, n.Pos(), fset))
					return false
				}
			}
			return true
		})
		if err != nil {
			return nil, 0, err
		}
	}

	var sites []site
	found := map[string]bool{}
	for _, pf := range files {
		for _, decl := range pf.ast.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			recvName, recvType := receiver(fn)
			var err error
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if err != nil {
					return false
				}
				switch n := n.(type) {
				case *ast.CommClause:
					// keylock's per-key lock: the case that sends the key's token.
					if send, ok := n.Comm.(*ast.SendStmt); ok && pkgName == "keylock" && selectorName(send.Chan) == "sem" {
						pf.edits = append(pf.edits, site{owner: perKeyOwner, offset: fset.Position(n.Colon).Offset + 1, text: " lockcount.Count(" + strconv.Quote(perKeyOwner) + ");"})
						found[perKeyOwner] = true
					}
				case *ast.CallExpr:
					if !isLockCall(n) {
						return true
					}
					sel := n.Fun.(*ast.SelectorExpr)
					owner, ferr := ownerOf(sel.X, recvName, recvType, owners, fieldOwners)
					if ferr != nil {
						err = fmt.Errorf("%s: %v", pos(root, pf, n.Pos(), fset), ferr)
						return false
					}
					name := pkgName + "." + owner
					pf.edits = append(pf.edits, site{owner: name, offset: fset.Position(n.End()).Offset, text: "; lockcount.Count(" + strconv.Quote(name) + ")"})
					found[owner] = true
				}
				return true
			})
			if err != nil {
				return nil, 0, err
			}
		}
	}
	for _, pf := range files {
		if _, ok := wqImports[pf.path]; !ok {
			continue
		}
		edits, err := queueCalls(root, pf, fset, pkgName, queueFields)
		if err != nil {
			return nil, 0, err
		}
		pf.edits = append(pf.edits, edits...)
		if len(edits) == 0 {
			return nil, 0, fmt.Errorf("%s imports client-go's workqueue but no call on a queue field was found: the rewrite no longer matches the source", rel(root, pf.path))
		}
	}

	// Every acquisition must be a statement of its own, so that the inserted call follows it,
	// and inside a method or function, where the search above looked.
	for _, pf := range files {
		if err := checkStatements(root, pf, fset); err != nil {
			return nil, 0, err
		}
		calls := 0
		for _, e := range pf.edits {
			if e.owner != perKeyOwner && !e.queue {
				calls++
			}
		}
		if n := countLockCalls(pf.ast); n != calls {
			return nil, 0, fmt.Errorf("%s: %d Lock or RLock calls, %d of them in function bodies the rewrite instrumented", rel(root, pf.path), n, calls)
		}
	}
	for o := range owners {
		if !found[o] {
			return nil, 0, fmt.Errorf("package %s: %s has a mutex but no Lock or RLock call on it was found: the rewrite no longer matches the source", pkgName, o)
		}
	}
	if pkgName == "keylock" && !found[perKeyOwner] {
		return nil, 0, fmt.Errorf("package keylock: the per-key acquisition (a select case sending on .sem) was not found: the rewrite no longer matches the source")
	}

	for _, pf := range files {
		if len(pf.edits) == 0 {
			continue
		}
		// The import goes on the package clause's line, so that no line moves.
		pf.edits = append(pf.edits, site{offset: fset.Position(pf.ast.Name.End()).Offset, text: "; import lockcount " + strconv.Quote(counterImport)})
		sort.SliceStable(pf.edits, func(i, j int) bool { return pf.edits[i].offset > pf.edits[j].offset })
		out := append([]byte(nil), pf.src...)
		for _, e := range pf.edits {
			out = append(out[:e.offset], append([]byte(e.text), out[e.offset:]...)...)
			if e.owner != "" {
				p := fset.Position(fset.File(pf.ast.Pos()).Pos(e.offset))
				sites = append(sites, site{owner: e.owner, file: rel(root, pf.path), line: p.Line})
			}
		}
		if err := os.WriteFile(pf.path, out, 0o644); err != nil {
			return nil, 0, err
		}
	}
	return sites, mutexFields, nil
}

// checkStatements makes sure each counted Lock call is an expression statement (not deferred,
// not in a go statement), where a call after it on the same line runs right after the lock is
// taken.
func checkStatements(root string, pf *parsedFile, fset *token.FileSet) error {
	var err error
	ast.Inspect(pf.ast, func(n ast.Node) bool {
		if err != nil {
			return false
		}
		var call *ast.CallExpr
		switch n := n.(type) {
		case *ast.DeferStmt:
			call = n.Call
		case *ast.GoStmt:
			call = n.Call
		default:
			return true
		}
		if isLockCall(call) {
			err = fmt.Errorf("%s: a deferred or go'd Lock, which the rewrite does not follow", pos(root, pf, n.Pos(), fset))
		}
		return true
	})
	return err
}

// queueCalls finds the calls of a method on a struct's client-go workqueue field
// (<x>.<field>.<Method>(...)) and returns the edits that count one acquisition before the
// statement that makes each call, named <package>.<Type>.<field> (client-go workqueue).
func queueCalls(root string, pf *parsedFile, fset *token.FileSet, pkgName string, queueFields map[string][]string) ([]site, error) {
	var edits []site
	var stack []ast.Node
	var err error
	ast.Inspect(pf.ast, func(n ast.Node) bool {
		if err != nil {
			return false
		}
		if n == nil {
			stack = stack[:len(stack)-1]
			return true
		}
		stack = append(stack, n)
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		method, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		field, ok := method.X.(*ast.SelectorExpr)
		if !ok || len(queueFields[field.Sel.Name]) == 0 {
			return true
		}
		types := queueFields[field.Sel.Name]
		if len(types) != 1 {
			err = fmt.Errorf("%s: %d types have a workqueue field %q", pos(root, pf, call.Pos(), fset), len(types), field.Sel.Name)
			return false
		}
		// The statement in a block that holds the call.
		var stmt ast.Stmt
		for i := len(stack) - 2; i >= 0 && stmt == nil; i-- {
			switch parent := stack[i].(type) {
			case *ast.BlockStmt, *ast.CaseClause, *ast.CommClause:
				stmt, _ = stack[i+1].(ast.Stmt)
			case *ast.ForStmt:
				if stack[i+1] != ast.Node(parent.Body) {
					err = fmt.Errorf("%s: a workqueue call in a loop's header, which the rewrite does not follow", pos(root, pf, call.Pos(), fset))
					return false
				}
			case *ast.RangeStmt:
				if stack[i+1] != ast.Node(parent.Body) {
					err = fmt.Errorf("%s: a workqueue call in a loop's header, which the rewrite does not follow", pos(root, pf, call.Pos(), fset))
					return false
				}
			}
		}
		if stmt == nil {
			err = fmt.Errorf("%s: a workqueue call outside a statement list, which the rewrite does not follow", pos(root, pf, call.Pos(), fset))
			return false
		}
		owner := pkgName + "." + types[0] + "." + field.Sel.Name + " (client-go workqueue)"
		edits = append(edits, site{owner: owner, queue: true, offset: fset.Position(stmt.Pos()).Offset, text: "lockcount.Count(" + strconv.Quote(owner) + "); "})
		return true
	})
	return edits, err
}

// usesPackage reports whether the type expression t names something of the package imported
// as name (such as workqueue.TypedRateLimitingInterface[types.UID]).
func usesPackage(t ast.Expr, name string) bool {
	found := false
	ast.Inspect(t, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == name {
				found = true
			}
		}
		return !found
	})
	return found
}

// mutexFieldLine matches a line declaring struct fields of type sync.Mutex or sync.RWMutex.
var mutexFieldLine = regexp.MustCompile(`^\s*(\w+(\s*,\s*\w+)*)\s+sync\.(RW)?Mutex\b`)

// textualMutexFields counts the mutex fields declared in the non-test Go files under dirs, by
// their text alone.
func textualMutexFields(root string, dirs []string) (int, error) {
	n := 0
	for _, d := range dirs {
		err := filepath.WalkDir(filepath.Join(root, d), func(path string, de fs.DirEntry, err error) error {
			if err != nil || de.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.Contains(path, "/testdata/") {
				return err
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, line := range strings.Split(string(src), "\n") {
				if m := mutexFieldLine.FindStringSubmatch(line); m != nil && !strings.HasPrefix(strings.TrimSpace(line), "var ") {
					n += len(strings.Split(m[1], ","))
				}
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
	}
	return n, nil
}

// countLockCalls counts the calls Lock() and RLock() (without arguments) anywhere in f.
func countLockCalls(f *ast.File) int {
	n := 0
	ast.Inspect(f, func(node ast.Node) bool {
		if call, ok := node.(*ast.CallExpr); ok && isLockCall(call) {
			n++
		}
		return true
	})
	return n
}

func isLockCall(call *ast.CallExpr) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	return ok && (sel.Sel.Name == "Lock" || sel.Sel.Name == "RLock") && len(call.Args) == 0
}

// ownerOf names the type whose mutex x (the receiver of a Lock call, such as r.mu) is: the
// method's receiver type when x is <receiver>.<field>, else the package's one type with such a
// field. Any other shape is an error.
func ownerOf(x ast.Expr, recvName, recvType string, owners map[string]bool, fieldOwners map[string][]string) (string, error) {
	sel, ok := x.(*ast.SelectorExpr)
	if !ok {
		return "", fmt.Errorf("a Lock call on %s, not on a struct's mutex field: the rewrite does not know its owner", exprString(x))
	}
	types := fieldOwners[sel.Sel.Name]
	if len(types) == 0 {
		return "", fmt.Errorf("a Lock call on %s: no type of the package has a mutex field %q", exprString(x), sel.Sel.Name)
	}
	if id, ok := sel.X.(*ast.Ident); ok && id.Name == recvName && owners[recvType] {
		for _, t := range types {
			if t == recvType {
				return t, nil
			}
		}
	}
	if len(types) == 1 {
		return types[0], nil
	}
	return "", fmt.Errorf("a Lock call on %s: %d types have a mutex field %q and it is not the receiver's", exprString(x), len(types), sel.Sel.Name)
}

// receiver returns a method's receiver name and type name ("" for a function).
func receiver(fn *ast.FuncDecl) (name, typ string) {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return "", ""
	}
	r := fn.Recv.List[0]
	if len(r.Names) > 0 {
		name = r.Names[0].Name
	}
	t := r.Type
	if star, ok := t.(*ast.StarExpr); ok {
		t = star.X
	}
	switch tt := t.(type) {
	case *ast.IndexExpr: // a generic type with one parameter
		t = tt.X
	case *ast.IndexListExpr:
		t = tt.X
	}
	if id, ok := t.(*ast.Ident); ok {
		typ = id.Name
	}
	return name, typ
}

// isMutexType reports whether t is sync.Mutex or sync.RWMutex.
func isMutexType(t ast.Expr) bool {
	sel, ok := t.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "sync" && (sel.Sel.Name == "Mutex" || sel.Sel.Name == "RWMutex")
}

// selectorName is the selected name of x.name, or "".
func selectorName(x ast.Expr) string {
	if sel, ok := x.(*ast.SelectorExpr); ok {
		return sel.Sel.Name
	}
	return ""
}

func exprString(x ast.Expr) string {
	switch x := x.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.SelectorExpr:
		return exprString(x.X) + "." + x.Sel.Name
	}
	return fmt.Sprintf("%T", x)
}

func pos(root string, pf *parsedFile, p token.Pos, fset *token.FileSet) string {
	return fmt.Sprintf("%s:%d", rel(root, pf.path), fset.Position(p).Line)
}

func rel(root, path string) string {
	if r, err := filepath.Rel(root, path); err == nil {
		return r
	}
	return path
}
