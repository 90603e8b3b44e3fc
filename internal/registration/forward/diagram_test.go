package forward_test

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
)

// TestDiagramHasEveryState: docs/forward.md draws a forwarded plugin's life with the code's
// own state names: every socket state (state.PluginState) and every standing with the kubelet
// (state.KubeletState, drawn kubelet:<state>) is in the diagram, and the diagram names no
// kubelet state the code does not have. A state added to internal/state without its place in
// the diagram fails here.
func TestDiagramHasEveryState(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/forward.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "## A forwarded plugin's life")
	_, rest, ok2 := strings.Cut(rest, "```text\n")
	diagram, _, ok3 := strings.Cut(rest, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/forward.md has no text block under \"## A forwarded plugin's life\"")
	}
	consts := stateConstants(t)
	if len(consts["PluginState"]) < 7 || len(consts["KubeletState"]) < 4 {
		t.Fatalf("found %v in internal/state: fewer states than there are", consts)
	}
	// Outside the kubelet:<state> tokens, a socket state is a word of its own.
	socketText := regexp.MustCompile(`kubelet:[a-z-]+`).ReplaceAllString(diagram, " ")
	for _, s := range consts["PluginState"] {
		if !regexp.MustCompile(`(^|[^a-z-])` + regexp.QuoteMeta(s) + `($|[^a-z-])`).MatchString(socketText) {
			t.Errorf("the diagram does not show the socket state %q", s)
		}
	}
	for _, s := range consts["KubeletState"] {
		if !strings.Contains(diagram, "kubelet:"+s) {
			t.Errorf("the diagram does not show the kubelet state %q (as kubelet:%s)", s, s)
		}
	}
	for _, m := range regexp.MustCompile(`kubelet:([a-z-]+)`).FindAllStringSubmatch(diagram, -1) {
		if !slices.Contains(consts["KubeletState"], m[1]) {
			t.Errorf("the diagram shows kubelet:%s, which is no state of the code", m[1])
		}
	}
}

// stateConstants returns the values of the constants of type PluginState and KubeletState
// declared in internal/state, by type name.
func stateConstants(t *testing.T) map[string][]string {
	t.Helper()
	const dir = "../../state"
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
		{
			for _, d := range f.Decls {
				g, ok := d.(*ast.GenDecl)
				if !ok || g.Tok != token.CONST {
					continue
				}
				for _, spec := range g.Specs {
					vs := spec.(*ast.ValueSpec)
					id, ok := vs.Type.(*ast.Ident)
					if !ok || (id.Name != "PluginState" && id.Name != "KubeletState") {
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
	}
	return out
}
