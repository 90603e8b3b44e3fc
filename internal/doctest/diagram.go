package doctest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TextBlock returns the first ```text block after the line heading of the page at path, and
// the page's text after that block (the table that explains a diagram, say); it fails the test
// when there is none.
func TextBlock(t testing.TB, path, heading string) (block, after string) {
	t.Helper()
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), heading)
	_, rest, ok2 := strings.Cut(rest, "```text\n")
	block, after, ok3 := strings.Cut(rest, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatalf("%s has no text block under %q", path, heading)
	}
	return block, after
}

// StringConstants returns the values of the string constants of each of the named types
// declared in the Go files of dir (its tests left out), by type name, read from the source:
// what a diagram drawn with the code's own names must show.
func StringConstants(t testing.TB, dir string, types ...string) map[string][]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	out := map[string][]string{}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				id, ok := vs.Type.(*ast.Ident)
				if !ok || !slices.Contains(types, id.Name) {
					continue
				}
				for _, v := range vs.Values {
					if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						s, _ := strconv.Unquote(lit.Value)
						out[id.Name] = append(out[id.Name], s)
					}
				}
			}
		}
	}
	return out
}
