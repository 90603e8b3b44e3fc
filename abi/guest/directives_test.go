package guest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/abi"
)

// TestDirectives parses the SDK's sources (this package and its subpackages, every build tag)
// and checks each //go:wasmimport and //go:wasmexport directive against package abi: module and
// names must be abi constants, and the Go signature must lower to the WebAssembly signature in
// abi.ImportSignatures or abi.ExportSignatures. Go requires the names to be literal in the
// directives; this test makes the constants their single source all the same. It also checks
// that the SDK covers every import and required export.
func TestDirectives(t *testing.T) {
	imports, exports := map[string]bool{}, map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Doc == nil {
				continue
			}
			for _, c := range fn.Doc.List {
				fields := strings.Fields(c.Text)
				if len(fields) == 0 {
					continue
				}
				pos := fset.Position(c.Pos())
				if fields[0] != "//go:wasmimport" && fields[0] != "//go:wasmexport" {
					continue
				}
				params, results := lowered(t, fset, fn)
				switch fields[0] {
				case "//go:wasmimport":
					if len(fields) != 3 || fields[1] != abi.ImportModule {
						t.Errorf("%s: %q: want //go:wasmimport %s <name>", pos, c.Text, abi.ImportModule)
						continue
					}
					sig, ok := abi.ImportSignatures[fields[2]]
					if !ok {
						t.Errorf("%s: import %q is not in abi.ImportSignatures", pos, fields[2])
						continue
					}
					if params != len(sig.Params) || results != len(sig.Results) {
						t.Errorf("%s: %s lowers to %d params and %d results, abi says %d and %d", pos, fields[2], params, results, len(sig.Params), len(sig.Results))
					}
					imports[fields[2]] = true
				case "//go:wasmexport":
					if len(fields) != 2 {
						t.Errorf("%s: %q: want //go:wasmexport <name>", pos, c.Text)
						continue
					}
					sig, ok := abi.ExportSignatures[fields[1]]
					if !ok {
						t.Errorf("%s: export %q is not in abi.ExportSignatures", pos, fields[1])
						continue
					}
					if params != len(sig.Params) || results != len(sig.Results) {
						t.Errorf("%s: %s lowers to %d params and %d results, abi says %d and %d", pos, fields[1], params, results, len(sig.Params), len(sig.Results))
					}
					exports[fields[1]] = true
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name := range abi.ImportSignatures {
		if !imports[name] {
			t.Errorf("the SDK has no //go:wasmimport for %s", name)
		}
	}
	for _, name := range abi.RequiredExports {
		if !exports[name] {
			t.Errorf("the SDK has no //go:wasmexport for %s", name)
		}
	}
	if len(imports) == 0 || len(exports) == 0 {
		t.Fatal("found no directives: is the test running in abi/guest?")
	}
}

// lowered counts the WebAssembly parameters and results that fn's Go signature lowers to: a
// string is two i32 (pointer and length); the other types the SDK uses are one i32 each. It
// fails the test on a type that is not one of those.
func lowered(t *testing.T, fset *token.FileSet, fn *ast.FuncDecl) (params, results int) {
	count := func(fl *ast.FieldList) int {
		n := 0
		if fl == nil {
			return 0
		}
		for _, f := range fl.List {
			names := max(len(f.Names), 1)
			var typ string
			switch x := f.Type.(type) {
			case *ast.Ident:
				typ = x.Name
			case *ast.SelectorExpr:
				if id, ok := x.X.(*ast.Ident); ok {
					typ = id.Name + "." + x.Sel.Name
				}
			}
			switch {
			case typ == "string":
				n += 2 * names
			case slices.Contains([]string{"int32", "uint32", "unsafe.Pointer"}, typ):
				n += names
			default:
				t.Errorf("%s: %s: parameter or result type %q is not one the ABI uses", fset.Position(f.Pos()), fn.Name.Name, typ)
			}
		}
		return n
	}
	return count(fn.Type.Params), count(fn.Type.Results)
}
