package main

import (
	"maps"
	"testing"

	"github.com/wasmhost/wasmhost/internal/publish"
	"github.com/wasmhost/wasmhost/internal/state"
)

// TestClusterPluginsReadsTheKeyScheme: `wasmhost cluster plugins` shows what each plugin
// published, an active plugin's from its type's attributes and a standby's from its instance,
// and a plugin whose name spells another's key shows only its own.
func TestClusterPluginsReadsTheKeyScheme(t *testing.T) {
	s := state.New()
	add := func(socket, name string, standby bool, published map[string]string) {
		s.Actual().Add(state.Plugin{Socket: socket, Type: "CSIPlugin", Name: name, Versions: []string{"1.0.0"}, Published: published, Standby: standby})
		st := state.StateRegistered
		if standby {
			st = state.StateStandby
		}
		s.SetStatus(state.Status{Path: socket, State: st, PluginType: "CSIPlugin", PluginName: name})
	}
	add("/r/a.sock", "csi.example.com", false, map[string]string{"node_id": "node-1"})
	add("/r/b.sock", "csi.example.com", true, map[string]string{"node_id": "old"})
	add("/r/c.sock", "csi.example.com.node_id", false, map[string]string{"node_id": "c"})
	add("/r/d.sock", "csi.example.com_node", false, map[string]string{"id": "d"})
	rules := map[string]publish.Rules{"CSIPlugin": {Namespace: "csi.wasmhost.dev", Labels: []string{"node_id"}, Attributes: []string{"*"}}}
	n, _ := publish.Build(s.Plugins(), rules, 0)
	want := map[string]map[string]string{
		"/r/a.sock": {"node_id": "node-1"}, "/r/b.sock": {"node_id": "old"}, "/r/c.sock": {"node_id": "c"}, "/r/d.sock": {"id": "d"},
	}
	ps := clusterPlugins("node-a", n)
	if len(ps) != len(want) {
		t.Fatalf("%d plugins, want %d: %+v", len(ps), len(want), ps)
	}
	for _, p := range ps {
		if !maps.Equal(p.Published, want[p.Socket]) {
			t.Errorf("%s (%s, %s) published %v, want %v", p.Socket, p.Name, p.State, p.Published, want[p.Socket])
		}
	}
}
