package host

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
)

// The package's three jobs (package doc) by file. Every non-test file is in one list, so that
// a new file says which job it does.
var (
	// The sandbox: a module loaded and called, and what a host's modules share.
	sandboxFiles = []string{
		"budget.go", "cachedirs.go", "cacheintegrity.go", "callstack.go", "compile.go", "hostfuncs.go",
		"idle.go", "inspect.go", "kvcas.go", "loader.go", "memory.go", "module.go", "printable.go",
		"procs.go", "reactor.go", "record.go", "sandbox.go",
	}
	// The policy layer over it, the reloader beside it, and the Host that holds them.
	upperFiles = []string{"dir.go", "host.go", "quarantine.go", "revisions.go", "rollback.go", "serve.go", "shadow.go"}
	// What both use: the configuration and the file permission checks.
	sharedFiles = []string{"config.go", "perm_unix.go"}
)

// TestSandboxNamesNoPolicyNorReloader: the sandbox's files name nothing that the policy layer,
// the reloader or the Host declare (a type, function, variable or constant of their files):
// the sandbox reaches the layer only through the policy it is given for a call (Module.serve),
// so that it could be a package below them.
func TestSandboxNamesNoPolicyNorReloader(t *testing.T) {
	fset := token.NewFileSet()
	files := map[string]*ast.File{}
	ents, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		if !slices.Contains(sandboxFiles, name) && !slices.Contains(upperFiles, name) && !slices.Contains(sharedFiles, name) {
			t.Errorf("%s is in none of sandboxFiles, upperFiles, sharedFiles: say which job it does", name)
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = f
	}
	// What the upper files declare at the top level (methods are reached through their types).
	upper := map[string]string{}
	for _, name := range upperFiles {
		f := files[name]
		if f == nil {
			t.Fatalf("%s is listed in upperFiles and missing", name)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					upper[d.Name.Name] = name
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						upper[s.Name.Name] = name
					case *ast.ValueSpec:
						for _, n := range s.Names {
							upper[n.Name] = name
						}
					}
				}
			}
		}
	}
	if upper["Host"] == "" || upper["served"] == "" || upper["reloader"] == "" {
		t.Fatalf("the upper files declare %d names, without Host, served or reloader", len(upper))
	}
	for _, name := range sandboxFiles {
		f := files[name]
		if f == nil {
			t.Fatalf("%s is listed in sandboxFiles and missing", name)
		}
		// The names a file declares itself (locals, parameters, fields) are not uses.
		own := map[*ast.Ident]bool{}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SelectorExpr:
				own[n.Sel] = true // x.name: a field or method, reached through x
			case *ast.Field:
				for _, id := range n.Names {
					own[id] = true
				}
			case *ast.KeyValueExpr:
				if id, ok := n.Key.(*ast.Ident); ok {
					own[id] = true // a field name in a composite literal
				}
			case *ast.FuncDecl:
				own[n.Name] = true
			case *ast.AssignStmt:
				if n.Tok == token.DEFINE {
					for _, l := range n.Lhs {
						if id, ok := l.(*ast.Ident); ok {
							own[id] = true
						}
					}
				}
			case *ast.ValueSpec:
				for _, id := range n.Names {
					own[id] = true
				}
			}
			return true
		})
		var found []string
		ast.Inspect(f, func(n ast.Node) bool {
			id, ok := n.(*ast.Ident)
			if !ok || own[id] {
				return true
			}
			if from := upper[id.Name]; from != "" {
				found = append(found, fset.Position(id.Pos()).String()+": "+id.Name+" ("+from+")")
			}
			return true
		})
		sort.Strings(found)
		for _, s := range found {
			t.Errorf("the sandbox names what the layer or the reloader declares: %s", s)
		}
	}
}
