package publish_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wasmhost/wasmhost/internal/publish"
	"github.com/wasmhost/wasmhost/internal/state"
)

// registerAt is register with the socket's change time set: the age Build orders by.
func registerAt(s *state.Store, socket string, ctime int64, typ, name string, published map[string]string) {
	s.Actual().Add(state.Plugin{Socket: socket, ID: state.Identity{Ino: uint64(ctime), Ctime: ctime}, Type: typ, Name: name, Versions: []string{"1.0.0"}, Published: published})
	s.SetStatus(state.Status{Path: socket, State: state.StateRegistered, PluginType: typ, PluginName: name})
}

// TestKeyNamesCannotCollide: whatever the plugins are called, no plugin's name spells another
// plugin's key or presence, as a label or as an attribute: every name splits back into the
// plugin and key whose value it holds.
func TestKeyNamesCannotCollide(t *testing.T) {
	names := []string{
		"csi.example.com", "csi.example.com.node_id", "csi.example.com_node_id", "csi.example.com%5Fnode_id",
		"csi.example.com%5Fnode%5Fid", "csi.example.com%", "csi.example.com%25", "csi.example.com_", "_csi.example.com",
		"csi.example.com__node_id", "csi.example.com.node", "a", "a_b", "a%5Fb", "a%b", "%", "%25", "%%5F", "_", "__",
		"CSI.example.com", "csi.example.com.", "ünïcode.example.com", "x.y_z",
	}
	rules := map[string]publish.Rules{"CSIPlugin": {Namespace: "csi.wasmhost.dev", Labels: []string{"node_id", "id_node"}, Attributes: []string{"*"}}}
	s := state.New()
	for i, name := range names {
		// Each publishes values that say whose they are, under keys that look like others'.
		registerAt(s, fmt.Sprintf("/r/%d.sock", i), int64(i+1), "CSIPlugin", name, map[string]string{
			"node_id": fmt.Sprintf("p%d", i), "id_node": fmt.Sprintf("q%d", i), "b_node_id": fmt.Sprintf("r%d", i), "node": fmt.Sprintf("s%d", i),
		})
	}
	n, refused := publish.Build(s.Plugins(), rules, publish.MaxMaxBytes)
	index := map[string]int{}
	for i, name := range names {
		index[name] = i
	}
	wantValue := func(plugin, key string) string {
		i := index[plugin]
		return map[string]string{"node_id": fmt.Sprintf("p%d", i), "id_node": fmt.Sprintf("q%d", i), "b_node_id": fmt.Sprintf("r%d", i), "node": fmt.Sprintf("s%d", i)}[key]
	}
	check := func(what, name, value string) {
		t.Helper()
		plugin, key, ok := publish.SplitKeyName(name)
		if !ok {
			if _, isPlugin := index[name]; isPlugin && value == "true" && publish.EscapeName(name) == name {
				return // a plugin's presence
			}
			t.Errorf("%s %s=%s names no plugin's key", what, name, value)
			return
		}
		if _, known := index[plugin]; !known || wantValue(plugin, key) != value {
			t.Errorf("%s %s=%s: split into plugin %q key %q, whose value is %q", what, name, value, plugin, key, wantValue(plugin, key))
		}
	}
	for k, v := range n.Labels {
		check("label", strings.TrimPrefix(k, "csi.wasmhost.dev/"), v)
	}
	for k, v := range n.Attributes["csi.wasmhost.dev"] {
		check("attribute", k, v)
	}
	// Every plugin's four keys are attributes: nothing was lost to a collision.
	if got, want := len(n.Attributes["csi.wasmhost.dev"]), 4*len(names); got != want {
		t.Errorf("%d attributes, want %d (refused: %v)", got, want, refused)
	}
	// The shape: the driver named csi.example.com.node_id leaves csi.example.com's
	// node id as it was.
	if got := n.Labels["csi.wasmhost.dev/csi.example.com_node_id"]; got != wantValue("csi.example.com", "node_id") {
		t.Errorf("csi.example.com's node_id label is %q", got)
	}
	// Its own name holds '_', which no label name can hold escaped: its facts are attributes.
	if got := n.Attributes["csi.wasmhost.dev"]["csi.example.com.node%5Fid_node_id"]; got != wantValue("csi.example.com.node_id", "node_id") {
		t.Errorf("the node_id attribute of the driver named csi.example.com.node_id is %q", got)
	}
	if got := n.Labels["csi.wasmhost.dev/csi.example.com.node"]; got != "true" {
		t.Errorf("the presence label of the driver named csi.example.com.node is %q", got)
	}
	for _, name := range names {
		if p, k, ok := publish.SplitKeyName(publish.KeyName(name, "node_id")); !ok || p != name || k != "node_id" {
			t.Errorf("KeyName(%q) splits into %q, %q, %v", name, p, k, ok)
		}
	}
}

// A device plugin's name is its extended resource's (example.com/gpu): its facts reach the
// cluster as attributes under the escaped name, with no refusal, and split back into the
// plugin and key.
func TestDevicePluginNamesPublish(t *testing.T) {
	rules := map[string]publish.Rules{"DevicePlugin": {Namespace: "deviceplugin.wasmhost.dev", Labels: []string{"count"}, Attributes: []string{"*"}}}
	s := state.New()
	registerAt(s, "/r/gpu.sock", 1, "DevicePlugin", "example.com/gpu", map[string]string{"count": "4", "model": "x1"})
	n, refused := publish.Build(s.Plugins(), rules, publish.MaxMaxBytes)
	attrs := n.Attributes["deviceplugin.wasmhost.dev"]
	if attrs["example.com%2Fgpu_count"] != "4" || attrs["example.com%2Fgpu_model"] != "x1" {
		t.Errorf("attributes %v, want example.com%%2Fgpu_count=4 and example.com%%2Fgpu_model=x1", attrs)
	}
	for k := range n.Labels {
		t.Errorf("label %s: no label name can hold an escaped name", k)
	}
	// The label the rules ask for cannot be written: that one key's label is refused, said why.
	if len(refused) != 1 || refused[0].Key != "count" {
		t.Errorf("refused %+v, want the count key's label alone", refused)
	}
	if p, k, ok := publish.SplitKeyName("example.com%2Fgpu_count"); !ok || p != "example.com/gpu" || k != "count" {
		t.Errorf("SplitKeyName: %q %q %v", p, k, ok)
	}
}

// hostileNode builds what a node with hostile plugins publishes, beside one of each good type.
func hostileNode(t *testing.T, maxBytes int) (publish.Node, []publish.Refusal, map[string]publish.Rules) {
	t.Helper()
	rules := map[string]publish.Rules{
		"CSIPlugin": {Namespace: "csi.wasmhost.dev", Labels: []string{"node_id"}, Attributes: []string{"*"}},
		"DRAPlugin": {Namespace: "dra.wasmhost.dev", Labels: []string{"driver"}, Attributes: []string{"*"}},
	}
	s := state.New()
	registerAt(s, "/r/good-csi.sock", 1, "CSIPlugin", "good.csi.example.com", map[string]string{"node_id": "node-1"})
	registerAt(s, "/r/good-dra.sock", 2, "DRAPlugin", "good.dra.example.com", map[string]string{"driver": "gpu"})
	// The issue's: a 65,300-byte node id, as the CSI handler publishes it.
	registerAt(s, "/r/long.sock", 3, "CSIPlugin", "long.csi.example.com", map[string]string{"node_id": strings.Repeat("n", 65300), "version": "1.0.0"})
	// Many keys just under the per-key bound, escapes that JSON makes six bytes, a long name.
	many := map[string]string{}
	for i := range 64 {
		many[fmt.Sprintf("k%02d", i)] = strings.Repeat("<", 300)
	}
	registerAt(s, "/r/many.sock", 4, "CSIPlugin", "many.csi.example.com", many)
	s.Actual().Add(state.Plugin{Socket: "/r/name.sock", ID: state.Identity{Ctime: 5}, Type: "CSIPlugin", Name: strings.Repeat("x", 60000), Versions: []string{strings.Repeat("1", 60000)}})
	s.SetStatus(state.Status{Path: "/r/name.sock", State: state.StateRegistered, PluginType: "CSIPlugin", PluginName: strings.Repeat("x", 60000)})
	// A flood of newcomers of both types, each with 60 KB values.
	for i := range 200 {
		typ := []string{"CSIPlugin", "DRAPlugin"}[i%2]
		registerAt(s, fmt.Sprintf("/r/flood-%03d.sock", i), int64(100+i), typ, fmt.Sprintf("flood-%03d.example.com", i),
			map[string]string{"node_id": strings.Repeat("f", 60000), "driver": "d", "small": "v"})
	}
	n, refused := publish.Build(s.Plugins(), rules, maxBytes)
	return n, refused, rules
}

// TestBoundsHold: whatever the plugins answer, what the node publishes stays within its
// total, the good plugins of both types keep their labels, the oversized entries are left
// out with a reason naming the plugin and key, and the feature file takes all of it.
func TestBoundsHold(t *testing.T) {
	for _, maxBytes := range []int{0, 64 << 10, publish.MaxMaxBytes} {
		n, refused, _ := hostileNode(t, maxBytes)
		limit := maxBytes
		if limit == 0 {
			limit = publish.DefaultMaxBytes
		}
		if c := n.Cost(); c > limit {
			t.Errorf("maxBytes %d: the node costs %d", maxBytes, c)
		}
		for k, v := range map[string]string{"csi.wasmhost.dev/good.csi.example.com_node_id": "node-1", "dra.wasmhost.dev/good.dra.example.com_driver": "gpu",
			"csi.wasmhost.dev/long.csi.example.com": "true", "csi.wasmhost.dev/many.csi.example.com": "true"} {
			if n.Labels[k] != v {
				t.Errorf("maxBytes %d: label %s=%q, want %q", maxBytes, k, n.Labels[k], v)
			}
		}
		if v := n.Attributes["csi.wasmhost.dev"]["long.csi.example.com_version"]; v != "1.0.0" {
			t.Errorf("maxBytes %d: the long node id took its plugin's other key: version %q", maxBytes, v)
		}
		found := false
		for _, r := range refused {
			if r.Plugin == "long.csi.example.com" && r.Key == "node_id" && !r.Label && r.Socket == "/r/long.sock" &&
				strings.Contains(r.Reason, "a 65300-byte value") && strings.Contains(r.Reason, fmt.Sprint(publish.MaxKeyBytes)) {
				found = true
			}
		}
		if !found {
			t.Errorf("maxBytes %d: no refusal of the 65,300-byte node id: %v", maxBytes, refused)
		}
		for _, in := range n.Instances {
			for _, m := range in {
				for k, v := range m {
					if len(v) > 256 {
						t.Errorf("instance attribute %s of %d bytes", k, len(v))
					}
				}
			}
		}
		files, leftOut := (&publish.FeatureFile{Dir: t.TempDir()}).Render(n, time.Now())
		if len(leftOut) > 0 {
			t.Errorf("maxBytes %d: the feature file left out %v", maxBytes, leftOut)
		}
		total := 0
		for _, f := range files {
			if len(f) > publish.MaxFeatureFileSize {
				t.Errorf("a feature file of %d bytes", len(f))
			}
			total += len(f)
		}
		if maxBytes == 0 && len(files) != 1 {
			t.Errorf("the default total takes %d feature files, want 1", len(files))
		}
		t.Logf("maxBytes %d: cost %d, %d refusals, feature files %d bytes in %d", limit, n.Cost(), len(refused), total, len(files))
	}
}

// TestOlderSocketsKeepTheirPlace: over a type's share, the plugins of the oldest sockets
// keep their facts and a newcomer is left out whole, whatever order the store lists them
// in and however large or small the newcomer is; the other type's share is untouched.
func TestOlderSocketsKeepTheirPlace(t *testing.T) {
	rules := map[string]publish.Rules{"T": {Namespace: "t.example.com", Labels: []string{"id"}}, "U": {Namespace: "u.example.com", Labels: []string{"id"}}}
	build := func(order []int) (publish.Node, []publish.Refusal) {
		s := state.New()
		registerAt(s, "/r/u.sock", 1000, "U", "u", map[string]string{"id": "u"})
		for _, i := range order {
			registerAt(s, fmt.Sprintf("/r/%03d.sock", 999-i), int64(i+1), "T", fmt.Sprintf("p%03d", i), map[string]string{"id": fmt.Sprintf("v%d", i)})
		}
		return publish.Build(s.Plugins(), rules, 8<<10)
	}
	var order []int
	for i := range 100 {
		order = append(order, i)
	}
	n, refused := build(order)
	slices.Reverse(order)
	n2, _ := build(order)
	if !n.Equal(n2) {
		t.Error("what is kept depends on the order the plugins are listed in")
	}
	kept := 0
	for i := range 100 {
		if n.Labels[fmt.Sprintf("t.example.com/p%03d_id", i)] != "" {
			if kept != i {
				t.Fatalf("p%03d kept after an older one was left out", i)
			}
			kept++
		}
	}
	if kept == 0 || kept == 100 {
		t.Fatalf("%d of 100 kept in a 4 KiB share", kept)
	}
	if n.Labels["u.example.com/u_id"] != "u" {
		t.Error("type T's flood took type U's share")
	}
	left := 0
	for _, r := range refused {
		if r.Key == "" && strings.Contains(r.Reason, "left out whole") {
			left++
		}
	}
	if left != 100-kept {
		t.Errorf("%d plugins refused whole, want %d", left, 100-kept)
	}
	if n.Cost() > 8<<10 {
		t.Errorf("cost %d over 8 KiB", n.Cost())
	}
}

// TestHeldKeptWithinTheBound: what a sink held from before (here far over the bound, as an
// older daemon might have left it) is kept at start only within the node's total.
func TestHeldKeptWithinTheBound(t *testing.T) {
	held := publish.Empty()
	held.Attributes["csi.wasmhost.dev"] = map[string]string{}
	for i := range 100 {
		held.Labels[fmt.Sprintf("csi.wasmhost.dev/old-%d", i)] = "true"
		held.Attributes["csi.wasmhost.dev"][fmt.Sprintf("old-%d_node_id", i)] = strings.Repeat("n", 60000)
	}
	synctest.Test(t, func(t *testing.T) {
		s := state.New()
		registerAt(s, "/r/a.sock", 1, "CSIPlugin", "a", map[string]string{"node_id": "n"})
		sink := &fakeSink{held: held}
		_, stop := runPublisher(t, publish.Config{Store: s, Rules: csiRules, Sinks: []publish.Sink{sink}, Settled: func() bool { return false }, StartGrace: time.Hour})
		defer stop()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		n, _ := sink.get()
		checkHeld(t, n)
	})
}

func checkHeld(t *testing.T, n publish.Node) {
	t.Helper()
	if n.Cost() > publish.DefaultMaxBytes || n.Labels["csi.wasmhost.dev/a_node_id"] != "n" || n.Labels["csi.wasmhost.dev/old-0"] != "true" {
		t.Errorf("merged: cost %d, %d labels; want a's and what fits of old", n.Cost(), len(n.Labels))
	}
	if len(n.Attributes["csi.wasmhost.dev"]) != 1 {
		t.Errorf("merged attributes %v, want only a's (the held ones are too large)", slices.Collect(maps.Keys(n.Attributes["csi.wasmhost.dev"])))
	}
}

// BenchmarkBuild: the desired state of 1,000 plugins, built at every coalesced write; with
// ordinary values, and with each plugin publishing a 60,000-byte value (refused by its size
// before its characters are looked at).
func BenchmarkBuild(b *testing.B) {
	for _, tc := range []struct {
		name  string
		value string
	}{{"values=small", "node-1"}, {"values=60KB", strings.Repeat("n", 60000)}} {
		b.Run(tc.name, func(b *testing.B) {
			s := state.New()
			for i := range 1000 {
				registerAt(s, fmt.Sprintf("/r/%d.sock", i), int64(i), "CSIPlugin", fmt.Sprintf("csi-%d.example.com", i),
					map[string]string{"node_id": tc.value, "topology": "zone=z1", "max_volumes_per_node": "16", "endpoint": "/r/x.sock"})
			}
			views := s.Plugins()
			b.ReportAllocs()
			for b.Loop() {
				publish.Build(views, csiRules, publish.MaxMaxBytes)
			}
		})
	}
}

// TestFeatureFileLeavesOutWhatCannotFit: an entry too large for any feature file (only what a
// file held from before could be one: Build makes none) is left out and named, and the rest is
// written, where the whole write used to fail ("a line of 65347 bytes cannot fit").
func TestFeatureFileLeavesOutWhatCannotFit(t *testing.T) {
	dir := t.TempDir()
	f := &publish.FeatureFile{Dir: dir}
	n := publish.Empty()
	n.Labels["csi.wasmhost.dev/a"] = "true"
	n.Attributes["csi.wasmhost.dev"] = map[string]string{"long_node_id": strings.Repeat("n", 65300), "a_node_id": "node-1"}
	if err := f.Write(t.Context(), n); err != nil {
		t.Fatalf("the write failed for one entry: %v", err)
	}
	if lo := f.LeftOut(); !slices.Equal(lo, []string{"csi.wasmhost.dev/long_node_id"}) {
		t.Errorf("left out %v", lo)
	}
	labels, features := nfdRead(t, dir, time.Now())
	if labels["csi.wasmhost.dev/a"] != "true" || features["csi.wasmhost.dev/a_node_id"] != "node-1" {
		t.Errorf("labels %v, features %v: want the rest written", labels, features)
	}
}
