package state_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	adminv1 "github.com/wasmhost/wasmhost/admin/v1"
	"github.com/wasmhost/wasmhost/internal/doctest"
)

// TestDiagramHasEveryState: docs/plugin-life.md draws a plugin's life with the code's own
// state names. Every state of the code (the PluginState constants of this package) is in the
// diagram and has a row in the table below it; the diagram and the table name no state the
// code does not have; and the admin API's states (adminv1.PluginState, as wasmhost plugins
// names them) are the same set. A state added to either without its place in the doc fails
// here.
func TestDiagramHasEveryState(t *testing.T) {
	diagram, after := doctest.TextBlock(t, "../../docs/plugin-life.md", "# A plugin's life")
	code := doctest.StringConstants(t, ".", "PluginState")["PluginState"]
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
