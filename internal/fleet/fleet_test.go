package fleet

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/wasmhost/wasmhost/internal/kube"
	"github.com/wasmhost/wasmhost/internal/publish"
	"github.com/wasmhost/wasmhost/internal/state"
)

// TestPluginsReadsTheKeyScheme: the fleet view shows what each plugin published, an active
// plugin's from its type's attributes and a standby's from its instance, and a plugin whose
// name spells another's key shows only its own.
func TestPluginsReadsTheKeyScheme(t *testing.T) {
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
	ps := Plugins(n)
	if len(ps) != len(want) {
		t.Fatalf("%d plugins, want %d: %+v", len(ps), len(want), ps)
	}
	for _, p := range ps {
		if !maps.Equal(p.Published, want[p.Socket]) {
			t.Errorf("%s (%s, %s) published %v, want %v", p.Socket, p.Name, p.State, p.Published, want[p.Socket])
		}
	}
}

// object returns node's NodeFeature as its daemon writes it, renewed at, every 10m, with a
// registered plugin of each of types and one failing.
func object(node string, at time.Time, types ...string) *unstructured.Unstructured {
	n := publish.Empty()
	for _, typ := range types {
		ns := typ + ".wasmhost.dev"
		n.Instances[ns] = []map[string]string{
			{publish.InstanceType: typ, publish.InstanceName: "p-" + node, publish.InstanceState: "registered", publish.InstanceSocket: "/r/p.sock"},
			{publish.InstanceType: typ, publish.InstanceName: "q-" + node, publish.InstanceState: "failing", publish.InstanceSocket: "/r/q.sock"},
		}
	}
	obj := kube.ToNodeFeature("wasmhost", node, n)
	if !at.IsZero() {
		kube.SetRenewed(obj, at, 10*time.Minute)
	}
	return obj
}

func list(t *testing.T, o Options) ([]Node, Stats) {
	t.Helper()
	var got []Node
	st, err := List(context.Background(), o, func(n Node) error { got = append(got, n); return nil })
	if err != nil {
		t.Fatal(err)
	}
	return got, st
}

func names(ns []Node) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.Name)
	}
	return out
}

type fixedNodes map[string]string

func (f fixedNodes) Ready(context.Context, []string) (map[string]string, error) { return f, nil }

// forbiddenNodes is a reader who may not list Nodes: what it read is partial.
type forbiddenNodes struct{}

func (forbiddenNodes) Ready(context.Context, []string) (map[string]string, error) {
	return map[string]string{}, errors.New("nodes is forbidden")
}

// TestListFiltersAndStaleness: the fleet view reads only wasmhost's objects (not nfd-worker's
// of the same node); a node is stale after two renewals missed, beside its Node's Ready
// condition; the filters take nodes, types, states and staleness.
func TestListFiltersAndStaleness(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	nfdWorker := object("fresh", now)
	nfdWorker.SetName("fresh-nfd-worker")
	nfdWorker.SetLabels(map[string]string{kube.NodeNameLabel: "fresh"})
	objs := []runtime.Object{
		object("fresh", now.Add(-9*time.Minute), "csi", "dra"),
		object("late", now.Add(-19*time.Minute), "csi"), // one renewal missed: not yet stale
		object("stale", now.Add(-20*time.Minute), "dra"),
		object("old", time.Time{}, "csi"), // no renewal said: never stale
		nfdWorker,
	}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{kube.NodeFeatureResource: "NodeFeatureList"}, objs...)
	o := Options{Client: client, Nodes: fixedNodes{"fresh": "Ready", "stale": "NotReady", "late": "Ready"}, Now: func() time.Time { return now }}

	got, st := list(t, o)
	if !slices.Equal(names(got), []string{"fresh", "late", "old", "stale"}) || st.Objects != 4 {
		t.Fatalf("nodes %v (%d objects), want fresh, late, old, stale: nfd-worker's own object is not wasmhost's", names(got), st.Objects)
	}
	byName := map[string]Node{}
	for _, n := range got {
		byName[n.Name] = n
	}
	for name, want := range map[string]struct {
		missed       int
		stale, known bool
		ready        string
	}{"fresh": {0, false, true, "Ready"}, "late": {1, false, true, "Ready"}, "stale": {2, true, true, "NotReady"}, "old": {0, false, false, NodeMissing}} {
		n := byName[name]
		if n.Missed != want.missed || n.Stale != want.stale || n.Renewed != want.known || n.Ready != want.ready {
			t.Errorf("%s: missed %d stale %v renewed %v ready %q, want %+v", name, n.Missed, n.Stale, n.Renewed, n.Ready, want)
		}
	}
	if n := byName["fresh"]; len(n.Plugins) != 4 || n.Plugins[0].Type != "csi" || n.Plugins[0].Name != "p-fresh" || n.Plugins[1].State != "failing" {
		t.Errorf("fresh's plugins %+v", n.Plugins)
	}

	// Nodes that could not be read are unknown (""), not missing, and the view goes on.
	o.Nodes = forbiddenNodes{}
	if got, st := list(t, o); len(got) != 4 || got[0].Ready != "" || st.NodesErr == nil {
		t.Errorf("Nodes forbidden: %d nodes, the first Ready %q, NodesErr %v", len(got), got[0].Ready, st.NodesErr)
	}
	o.Nodes = fixedNodes{"fresh": "Ready", "stale": "NotReady", "late": "Ready"}

	yes, no := true, false
	for _, c := range []struct {
		name    string
		f       Filter
		nodes   []string
		plugins int
	}{
		{"stale", Filter{Stale: &yes}, []string{"stale"}, 2},
		{"fresh", Filter{Stale: &no}, []string{"fresh", "late", "old"}, 8},
		{"node", Filter{Nodes: []string{"late", "old"}}, []string{"late", "old"}, 4},
		{"type", Filter{Types: []string{"dra"}}, []string{"fresh", "stale"}, 4},
		{"state", Filter{States: []string{"failing"}, Types: []string{"csi"}}, []string{"fresh", "late", "old"}, 3},
		{"nothing", Filter{Types: []string{"DevicePlugin"}}, nil, 0},
	} {
		o := o
		o.Filter = c.f
		got, st := list(t, o)
		if !slices.Equal(names(got), c.nodes) || st.Plugins != c.plugins {
			t.Errorf("%s: nodes %v with %d plugins, want %v with %d", c.name, names(got), st.Plugins, c.nodes, c.plugins)
		}
	}
}

// TestPruneOnlyLongStale: Prune deletes only objects that missed at least its renewals, and
// never one that does not say when it was renewed; a dry run deletes nothing.
func TestPruneOnlyLongStale(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{kube.NodeFeatureResource: "NodeFeatureList"},
		object("fresh", now), object("stale", now.Add(-25*time.Minute)), object("gone", now.Add(-61*time.Minute)), object("old", time.Time{}))
	o := Options{Client: client, Now: func() time.Time { return now }}
	if _, err := Prune(context.Background(), o, 1, false, nil); err == nil {
		t.Error("prune after 1 renewal: no error; a node is not stale before 2")
	}
	prune := func(dry bool) []string {
		var out []string
		if _, err := Prune(context.Background(), o, DefaultPruneAfter, dry, func(p Pruned) error {
			if p.Err != nil {
				t.Error(p.Err)
			}
			out = append(out, p.Name)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := prune(true); !slices.Equal(got, []string{"gone"}) {
		t.Errorf("dry run: %v, want gone", got)
	}
	if got := prune(false); !slices.Equal(got, []string{"gone"}) {
		t.Errorf("pruned %v, want gone", got)
	}
	got, _ := list(t, o)
	if !slices.Equal(names(got), []string{"fresh", "old", "stale"}) {
		t.Errorf("left %v, want fresh, old, stale", names(got))
	}
}
