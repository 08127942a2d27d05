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
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
)

// snippet is one ```go block of a Markdown file: its text and the line it starts on.
type snippet struct {
	file string // relative to the repository's root
	line int    // the block's first line of code
	code string
}

// goBlocks returns the ```go blocks of the Markdown file at root/rel.
func goBlocks(root, rel string) ([]snippet, error) {
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		return nil, err
	}
	var out []snippet
	var cur *snippet
	var lines []string
	for i, l := range strings.Split(string(b), "\n") {
		switch {
		case cur == nil && strings.TrimSpace(l) == "```go":
			cur, lines = &snippet{file: rel, line: i + 2}, nil
		case cur != nil && strings.TrimSpace(l) == "```":
			cur.code = strings.Join(lines, "\n")
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			lines = append(lines, l)
		}
	}
	return out, nil
}

// snippetImports are the packages a snippet may name, by the name it uses: only packages the
// root module already requires.
var snippetImports = map[string]string{
	"approval":    "github.com/cert-manager/csi-lib/approval",
	"cache":       "k8s.io/client-go/tools/cache",
	"cmapi":       "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1",
	"cmclient":    "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned",
	"cminformers": "github.com/cert-manager/cert-manager/pkg/client/informers/externalversions",
	"context":     "context",
	"corev1":      "k8s.io/api/core/v1",
	"crypto":      "crypto",
	"driver":      "github.com/cert-manager/csi-lib/driver",
	"errors":      "errors",
	"fmt":         "fmt",
	"informers":   "k8s.io/client-go/informers",
	"kubernetes":  "k8s.io/client-go/kubernetes",
	"logr":        "github.com/go-logr/logr",
	"manager":     "github.com/cert-manager/csi-lib/manager",
	"metadata":    "github.com/cert-manager/csi-lib/metadata",
	"metav1":      "k8s.io/apimachinery/pkg/apis/meta/v1",
	"metrics":     "github.com/cert-manager/csi-lib/metrics",
	"podcert":     "github.com/cert-manager/csi-lib/podcert",
	"podspec":     "github.com/cert-manager/csi-lib/approval/podspec",
	"prometheus":  "github.com/prometheus/client_golang/prometheus",
	"record":      "k8s.io/client-go/tools/record",
	"rest":        "k8s.io/client-go/rest",
	"scheme":      "k8s.io/client-go/kubernetes/scheme",
	"storage":     "github.com/cert-manager/csi-lib/storage",
	"time":        "time",
	"typedcorev1": "k8s.io/client-go/kubernetes/typed/core/v1",
	"util":        "github.com/cert-manager/csi-lib/manager/util",
	"x509":        "crypto/x509",
}

// givenNames are the names a fragment may use without declaring them, with their types: what
// the docs say a driver has at hand (docs/upgrading.md §3 names them).
var givenNames = [][2]string{
	{"ctx", "context.Context"}, {"kube", "kubernetes.Interface"}, {"kubeClient", "kubernetes.Interface"},
	{"cmClient", "cmclient.Interface"}, {"restConfig", "*rest.Config"}, {"opts", "manager.Options"},
	{"m", "*manager.Manager"}, {"log", "logr.Logger"}, {"store", "*storage.Filesystem"},
	{"nodeID", "string"}, {"version", "string"}, {"podInformer", "cache.SharedIndexInformer"},
	{"generatePrivateKey", "manager.GeneratePrivateKeyFunc"}, {"generateRequest", "manager.GenerateRequestFunc"},
	{"signRequest", "manager.SignRequestFunc"}, {"writeKeypair", "manager.WriteKeypairFunc"},
	{"podHasIP", "manager.ReadyToRequestFunc"}, {"req", "*cmapi.CertificateRequest"},
	{"subjectIsThePods", "approval.PodRule"}, {"meta", "metadata.Metadata"}, {"key", "crypto.PrivateKey"},
	{"chain", "[]byte"}, {"ca", "[]byte"},
}

// parameters is givenNames as a parameter list, less the names the fragment declares itself
// with := at its top level.
func parameters(code string) string {
	declared := map[string]bool{}
	if f, err := parser.ParseFile(token.NewFileSet(), "", "package p\nfunc f() {\n"+code+"\n}\n", parser.SkipObjectResolution); err == nil {
		for _, stmt := range f.Decls[0].(*ast.FuncDecl).Body.List {
			if as, ok := stmt.(*ast.AssignStmt); ok && as.Tok == token.DEFINE {
				for _, lhs := range as.Lhs {
					if id, ok := lhs.(*ast.Ident); ok {
						declared[id.Name] = true
					}
				}
			}
		}
	}
	var params []string
	for _, p := range givenNames {
		if !declared[p[0]] {
			params = append(params, p[0]+" "+p[1])
		}
	}
	return strings.Join(params, ", ")
}

// snippetFile turns a block into a Go file of package snippets, or of its own package when it
// is a whole file, with //line directives that point the compiler at the Markdown. A block of
// top-level declarations stays as it is; any other block becomes the body of a function whose
// parameters are givenNames. The imports are those of snippetImports the code names.
func snippetFile(s snippet, n int) (src string, ownPackage bool, err error) {
	directive := fmt.Sprintf("//line %s:%d\n", s.file, s.line)
	var body string
	switch {
	case strings.HasPrefix(strings.TrimSpace(firstCodeLine(s.code)), "package "):
		return s.code, true, nil
	case isDeclarations(s.code):
		body = directive + s.code + "\n"
	default:
		body = fmt.Sprintf("func snippet%d(%s) error {\n%s%s\n\treturn nil\n}\n", n, parameters(s.code), directive, s.code)
	}
	f, err := parser.ParseFile(token.NewFileSet(), "", "package snippets\n"+body, parser.SkipObjectResolution)
	if err != nil {
		return "", false, err
	}
	used := map[string]bool{}
	ast.Inspect(f, func(node ast.Node) bool {
		if sel, ok := node.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && snippetImports[id.Name] != "" {
				used[id.Name] = true
			}
		}
		return true
	})
	var names []string
	for name := range used {
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("package snippets\n\nimport (\n")
	for _, name := range names {
		fmt.Fprintf(&b, "\t%s %q\n", name, snippetImports[name])
	}
	b.WriteString(")\n\n")
	b.WriteString(body)
	return b.String(), false, nil
}

func firstCodeLine(code string) string {
	for _, l := range strings.Split(code, "\n") {
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "//") {
			return t
		}
	}
	return ""
}

// isDeclarations reports whether code parses as top-level declarations.
func isDeclarations(code string) bool {
	first := firstCodeLine(code)
	if !strings.HasPrefix(first, "func ") && !strings.HasPrefix(first, "type ") && !strings.HasPrefix(first, "var ") && !strings.HasPrefix(first, "const ") {
		return false
	}
	_, err := parser.ParseFile(token.NewFileSet(), "", "package snippets\n"+code, parser.SkipObjectResolution)
	return err == nil
}

// compileSnippets builds the blocks, in virtual directories of the root module (an overlay:
// nothing is written into the tree), and returns the compiler's output on failure.
func compileSnippets(t *testing.T, root string, blocks []snippet) (string, error) {
	t.Helper()
	tmp := t.TempDir()
	absRoot, err := filepath.Abs(root)
	if err != nil {
		return "", err
	}
	overlay := map[string]string{}
	var pkgs []string
	shared := filepath.Join(absRoot, "docs", "snippetscompiled")
	for i, s := range blocks {
		src, own, err := snippetFile(s, i)
		if err != nil {
			return fmt.Sprintf("%s:%d: %v", s.file, s.line, err), err
		}
		dir := shared
		if own {
			dir = filepath.Join(shared, fmt.Sprintf("file%d", i))
			pkgs = append(pkgs, dir)
		}
		real := filepath.Join(tmp, fmt.Sprintf("snippet%d.go", i))
		if err := os.WriteFile(real, []byte(src), 0o600); err != nil {
			return "", err
		}
		overlay[filepath.Join(dir, fmt.Sprintf("snippet%d.go", i))] = real
	}
	pkgs = append(pkgs, shared)
	js, err := json.Marshal(map[string]any{"Replace": overlay})
	if err != nil {
		return "", err
	}
	overlayFile := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(overlayFile, js, 0o600); err != nil {
		return "", err
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		if goBin, err = exec.LookPath("go"); err != nil {
			t.Fatalf("no go command to compile the snippets with: %v", err)
		}
	}
	args := append([]string{"build", "-overlay", overlayFile, "-o", os.DevNull}, pkgs...)
	cmd := exec.Command(goBin, args...)
	cmd.Dir = absRoot
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestEveryGoBlockCompiles compiles every ```go block of README.md and docs/*.md against this
// module: a fragment as the body of a function given the names the docs say a driver has.
func TestEveryGoBlockCompiles(t *testing.T) {
	root := ".."
	files := []string{"README.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		rel, _ := filepath.Rel(root, d)
		files = append(files, filepath.ToSlash(rel))
	}
	var blocks []snippet
	for _, f := range files {
		b, err := goBlocks(root, f)
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, b...)
	}
	if len(blocks) < 10 {
		t.Fatalf("found %d Go blocks; the docs have more", len(blocks))
	}
	if out, err := compileSnippets(t, root, blocks); err != nil {
		t.Fatalf("the docs' Go blocks do not compile (%v):\n%s", err, out)
	}
	t.Logf("%d Go blocks compiled", len(blocks))
}

// TestABrokenBlockIsNamed shows the compile failing on a block that does not compile, naming
// the Markdown file and line.
func TestABrokenBlockIsNamed(t *testing.T) {
	blocks := []snippet{
		{file: "docs/example.md", line: 7, code: "m.Stop()"},
		{file: "docs/example.md", line: 20, code: "m.Stop()\nm.NoSuchMethod()"},
	}
	out, err := compileSnippets(t, "..", blocks)
	if err == nil {
		t.Fatal("a block calling a method that does not exist compiled")
	}
	if !strings.Contains(out, "docs/example.md:21") || !strings.Contains(out, "NoSuchMethod") {
		t.Fatalf("the failure does not name docs/example.md:21 and NoSuchMethod:\n%s", out)
	}
}
