package forward_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/internal/doctest"
)

// TestDiagramHasEveryState: docs/forward.md draws a forwarded plugin's life with the code's
// own state names: every socket state (state.PluginState) and every standing with the kubelet
// (state.KubeletState, drawn kubelet:<state>) is in the diagram, and the diagram names no
// kubelet state the code does not have. A state added to internal/state without its place in
// the diagram fails here.
func TestDiagramHasEveryState(t *testing.T) {
	diagram, _ := doctest.TextBlock(t, "../../../docs/forward.md", "## A forwarded plugin's life")
	consts := doctest.StringConstants(t, "../../state", "PluginState", "KubeletState")
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
