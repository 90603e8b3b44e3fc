package conformance

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/host/sandbox"
)

// A handler author outside this repository can write every type the kit's API uses: no
// exported function, method, type or field of the package names a type of an internal package
// (which Go forbids importing from another module).
func TestKitAPINamesNoInternalType(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var problems []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		internal := map[string]string{} // local name -> import path, for internal packages
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if !strings.Contains(path, "/internal/") && !strings.HasSuffix(path, "/internal") {
				continue
			}
			local := path[strings.LastIndex(path, "/")+1:]
			if imp.Name != nil {
				local = imp.Name.Name
			}
			internal[local] = path
		}
		// check reports the internal types named in the type expression e of what.
		check := func(what string, e ast.Expr) {
			ast.Inspect(e, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if id, ok := sel.X.(*ast.Ident); ok && internal[id.Name] != "" {
					problems = append(problems, fmt.Sprintf("%s: %s names %s.%s (%s)", fset.Position(sel.Pos()), what, id.Name, sel.Sel.Name, internal[id.Name]))
				}
				return true
			})
		}
		fields := func(what string, fl *ast.FieldList, exportedOnly bool) {
			if fl == nil {
				return
			}
			for _, fd := range fl.List {
				if exportedOnly && len(fd.Names) > 0 && !slices.ContainsFunc(fd.Names, func(id *ast.Ident) bool { return id.IsExported() }) {
					continue
				}
				check(what, fd.Type)
			}
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				what := d.Name.Name
				if d.Recv != nil {
					recv := d.Recv.List[0].Type
					if st, ok := recv.(*ast.StarExpr); ok {
						recv = st.X
					}
					if id, ok := recv.(*ast.Ident); !ok || !id.IsExported() {
						continue
					}
					what = recv.(*ast.Ident).Name + "." + what
				}
				fields(what, d.Type.Params, false)
				fields(what, d.Type.Results, false)
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						switch tt := s.Type.(type) {
						case *ast.StructType:
							fields(s.Name.Name, tt.Fields, true)
						case *ast.InterfaceType:
							fields(s.Name.Name, tt.Methods, false)
						default:
							check(s.Name.Name, s.Type)
						}
					case *ast.ValueSpec:
						if slices.ContainsFunc(s.Names, func(id *ast.Ident) bool { return id.IsExported() }) && s.Type != nil {
							check(s.Names[0].Name, s.Type)
						}
					}
				}
			}
		}
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// The defaults Options documents are the daemon's.
func TestKitDocumentedDefaults(t *testing.T) {
	if sandbox.DefaultCallTimeout != 5*time.Second || sandbox.DefaultMemoryLimit != 64<<20 {
		t.Errorf("the daemon's defaults are %v and %d bytes; Options.Timeout and Options.MemoryLimit say 5s and 64 MiB",
			sandbox.DefaultCallTimeout, sandbox.DefaultMemoryLimit)
	}
}
