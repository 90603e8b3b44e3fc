package state_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	adminv1 "github.com/wasmhost/wasmhost/admin/v1"
)

// TestDiagramHasEveryState: docs/plugin-life.md draws a plugin's life with the code's own
// state names. Every state of the code (the PluginState constants of this package) is in the
// diagram and has a row in the table below it; the diagram and the table name no state the
// code does not have; and the admin API's states (adminv1.PluginState, as wasmhost plugins
// names them) are the same set. A state added to either without its place in the doc fails
// here.
func TestDiagramHasEveryState(t *testing.T) {
	doc, err := os.ReadFile("../../docs/plugin-life.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "# A plugin's life")
	_, rest, ok2 := strings.Cut(rest, "```text\n")
	diagram, after, ok3 := strings.Cut(rest, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/plugin-life.md has no text block under \"# A plugin's life\"")
	}
	code := pluginStates(t)
	if len(code) < 7 {
		t.Fatalf("found %v in internal/state: fewer states than there are", code)
	}

	for _, s := range code {
		if !regexp.MustCompile(`(^|[^a-z-])` + regexp.QuoteMeta(s) + `($|[^a-z-])`).MatchString(diagram) {
			t.Errorf("the diagram does not show the state %q", s)
		}
	}
	// A state in the diagram is a word an arrow points at, or one that starts a line at the
	// diagram's indent of six spaces.
	drawn := regexp.MustCompile(`(?m)(?:▶ |^ {6})([a-z][a-z-]*)`).FindAllStringSubmatch(diagram, -1)
	if len(drawn) < len(code) {
		t.Fatalf("the diagram draws %d states (%v), fewer than the code's %d", len(drawn), drawn, len(code))
	}
	for _, m := range drawn {
		if !slices.Contains(code, m[1]) {
			t.Errorf("the diagram shows %q, which is no state of the code (%v)", m[1], code)
		}
	}

	var rows []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z-]+)` \\|").FindAllStringSubmatch(after, -1) {
		rows = append(rows, m[1])
	}
	for _, s := range code {
		if !slices.Contains(rows, s) {
			t.Errorf("the table under the diagram has no row for the state %q", s)
		}
	}
	for _, s := range rows {
		if !slices.Contains(code, s) {
			t.Errorf("the table under the diagram has a row for %q, which is no state of the code", s)
		}
	}

	var api []string
	for n, name := range adminv1.PluginState_name {
		if n == int32(adminv1.PluginState_PLUGIN_STATE_UNSPECIFIED) {
			continue
		}
		api = append(api, strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(name, "PLUGIN_STATE_")), "_", "-"))
	}
	slices.Sort(api)
	if sorted := slices.Sorted(slices.Values(code)); !slices.Equal(api, sorted) {
		t.Errorf("the admin API's states are %v, the code's %v: the diagram draws the code's", api, sorted)
	}
}

// pluginStates returns the values of the constants of type PluginState declared in this
// package, read from its source.
func pluginStates(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var out []string
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(".", e.Name()), nil, 0)
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
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "PluginState" {
					continue
				}
				for _, v := range vs.Values {
					if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						s, _ := strconv.Unquote(lit.Value)
						out = append(out, s)
					}
				}
			}
		}
	}
	return out
}
