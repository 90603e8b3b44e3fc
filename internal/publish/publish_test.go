package publish_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wasmhost/wasmhost/internal/k8sname"
	"github.com/wasmhost/wasmhost/internal/publish"
	"github.com/wasmhost/wasmhost/internal/state"
)

var csiRules = map[string]publish.Rules{
	"CSIPlugin": {Namespace: "csi.wasmhost.dev", Labels: []string{"node_id", "topology"}, Attributes: []string{"max_volumes_per_node"}},
}

// register records a registered plugin in the store, as the registrar and reconciler do.
func register(s *state.Store, socket, typ, name string, published map[string]string) {
	s.Actual().Add(state.Plugin{Socket: socket, Type: typ, Name: name, Versions: []string{"1.0.0"}, Published: published})
	s.SetStatus(state.Status{Path: socket, State: state.StateRegistered, PluginType: typ, PluginName: name})
}

func deregister(s *state.Store, socket string) {
	s.Actual().Remove(socket)
	s.DeleteStatus(socket, time.Now())
}

func TestBuild(t *testing.T) {
	s := state.New()
	register(s, "/r/a.sock", "CSIPlugin", "csi.example.com", map[string]string{
		"node_id":              "node-1",
		"topology":             "topology.example.com/zone=z1", // not a label value
		"max_volumes_per_node": "16",
		"endpoint":             "/r/a.sock", // named by no rule: stays on the node
	})
	register(s, "/r/b.sock", "OtherType", "other", map[string]string{"node_id": "x"})
	n, refused := publish.Build(s.Plugins(), csiRules, 0)

	wantLabels := map[string]string{
		"csi.wasmhost.dev/csi.example.com":         "true",
		"csi.wasmhost.dev/csi.example.com_node_id": "node-1",
	}
	if !maps.Equal(n.Labels, wantLabels) {
		t.Errorf("labels %v, want %v", n.Labels, wantLabels)
	}
	wantAttrs := map[string]string{
		"csi.example.com_node_id":              "node-1",
		"csi.example.com_topology":             "topology.example.com/zone=z1",
		"csi.example.com_max_volumes_per_node": "16",
	}
	if !maps.Equal(n.Attributes["csi.wasmhost.dev"], wantAttrs) || len(n.Attributes) != 1 {
		t.Errorf("attributes %v, want csi.wasmhost.dev: %v", n.Attributes, wantAttrs)
	}
	if len(refused) != 1 || refused[0].Key != "topology" || !refused[0].Label || !strings.Contains(refused[0].Reason, "not allowed in a label value") {
		t.Errorf("refused %v, want topology as a label, for its '/'", refused)
	}
	in := n.Instances["csi.wasmhost.dev"]
	if len(in) != 1 || in[0][publish.InstanceName] != "csi.example.com" || in[0][publish.InstanceState] != "registered" ||
		in[0][publish.InstanceSocket] != "/r/a.sock" || len(in[0]) != 5 {
		t.Errorf("instances %v", in)
	}
	for k, v := range n.Labels {
		if err := k8sname.Label(k, v); err != nil {
			t.Error(err)
		}
	}
}

// TestBuildStaysInItsNamespace: whatever a plugin is called and whatever its handler
// publishes, nothing lands outside its type's namespace, and what cannot be a label is
// refused with a reason.
func TestBuildStaysInItsNamespace(t *testing.T) {
	s := state.New()
	rules := map[string]publish.Rules{"T": {Namespace: "t.example.com", Labels: []string{"k"}, Attributes: []string{"*"}}}
	register(s, "/r/1.sock", "T", "../kubernetes.io/evil", map[string]string{"k": "v"})
	register(s, "/r/2.sock", "T", "fine", map[string]string{
		"k":                        strings.Repeat("v", 64), // too long for a label
		"node-role.kubernetes.io/": "x",
		"a=b":                      "x",
		"multi":                    "line\nnode-role.kubernetes.io/master=true",
	})
	register(s, "/r/3.sock", "T", strings.Repeat("n", 70), map[string]string{"k": "v"})
	n, refused := publish.Build(s.Plugins(), rules, 0)
	for k := range n.Labels {
		if !strings.HasPrefix(k, "t.example.com/") || strings.Count(k, "/") != 1 {
			t.Errorf("label %s outside t.example.com", k)
		}
	}
	for f, a := range n.Attributes {
		if f != "t.example.com" {
			t.Errorf("feature %s", f)
		}
		for k, v := range a {
			if strings.Contains(k, "/") || strings.Contains(k, "=") || strings.ContainsAny(v, "\n") {
				t.Errorf("attribute %s=%q", k, v)
			}
		}
	}
	if v := n.Attributes["t.example.com"]["fine_k"]; v != strings.Repeat("v", 64) {
		t.Errorf("the value too long for a label is not an attribute: %q", v)
	}
	if _, ok := n.Labels["t.example.com/"+strings.Repeat("n", 70)]; ok {
		t.Error("a 70-character plugin name became a label name")
	}
	reasons := map[string]bool{}
	for _, r := range refused {
		reasons[r.Plugin+" "+r.Key] = true
		if r.Reason == "" {
			t.Errorf("refusal without a reason: %v", r)
		}
	}
	// A name with '/' is escaped: its key stays an attribute in the type's namespace, and only
	// the label the rules ask for is refused.
	if v := n.Attributes["t.example.com"]["..%2Fkubernetes.io%2Fevil_k"]; v != "v" {
		t.Errorf("the escaped name's attribute is %q, want v", v)
	}
	for _, want := range []string{"../kubernetes.io/evil k", "fine k", "fine node-role.kubernetes.io/", "fine a=b", "fine multi", strings.Repeat("n", 70) + " "} {
		if !reasons[want] {
			t.Errorf("no refusal for %q; got %v", want, refused)
		}
	}
}

func TestBuildStandby(t *testing.T) {
	s := state.New()
	register(s, "/r/new.sock", "CSIPlugin", "d", map[string]string{"node_id": "new"})
	s.Actual().Add(state.Plugin{Socket: "/r/old.sock", Type: "CSIPlugin", Name: "d", Published: map[string]string{"node_id": "old"}, Standby: true})
	s.SetStatus(state.Status{Path: "/r/old.sock", State: state.StateStandby, PluginType: "CSIPlugin", PluginName: "d"})
	n, _ := publish.Build(s.Plugins(), csiRules, 0)
	if got := n.Labels["csi.wasmhost.dev/d_node_id"]; got != "new" {
		t.Errorf("label from %q, want the active instance's", got)
	}
	// Each value once: the active plugin's as its attribute, the standby's in its instance.
	in := n.Instances["csi.wasmhost.dev"]
	if len(in) != 2 || in[0]["node_id"] != "" || in[1]["node_id"] != "old" || n.Attributes["csi.wasmhost.dev"]["d_node_id"] != "new" {
		t.Errorf("instances %v, attributes %v: want both instances, the standby's value in its own", in, n.Attributes)
	}
}

// nfdRead reads dir as nfd-worker does: every regular file not starting with a dot, each
// refused whole past 64 KiB; it fails the test on anything nfd-worker would complain about.
func nfdRead(t *testing.T, dir string, now time.Time) (labels, features map[string]string) {
	t.Helper()
	labels, features = map[string]string{}, map[string]string{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("dot-file %s left behind", e.Name())
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > publish.MaxFeatureFileSize {
			t.Errorf("%s: %d bytes, over nfd-worker's %d", e.Name(), len(b), publish.MaxFeatureFileSize)
		}
		if fi, _ := e.Info(); fi.Mode().Perm()&0o044 != 0o044 {
			t.Errorf("%s: mode %v, nfd-worker may not read it", e.Name(), fi.Mode())
		}
		// The expiry applies to the lines after it: it must come before the first.
		for line := range strings.Lines(string(b)) {
			if strings.HasPrefix(line, publish.DirectivePrefix+publish.DirectiveExpiryTime+"=") {
				break
			}
			if !strings.HasPrefix(line, "#") {
				t.Errorf("%s: line %q comes before the expiry directive", e.Name(), line)
				break
			}
		}
		ff, err := publish.ParseFeatureFile(b, now)
		if err != nil {
			t.Errorf("%s: %v", e.Name(), err)
		}
		if len(ff.Problems) > 0 {
			t.Errorf("%s: nfd-worker would log %v", e.Name(), ff.Problems)
		}
		if ff.Expires.IsZero() {
			t.Errorf("%s: no expiry time", e.Name())
		}
		maps.Copy(labels, ff.Labels)
		maps.Copy(features, ff.Features)
	}
	for k, v := range labels {
		if err := k8sname.Label(k, v); err != nil {
			t.Errorf("nfd-master would refuse: %v", err)
		}
	}
	return labels, features
}

func TestFeatureFileAsNFDReadsIt(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	f := &publish.FeatureFile{Dir: dir, Expiry: time.Hour, Now: func() time.Time { return now }}
	s := state.New()
	register(s, "/r/a.sock", "CSIPlugin", "csi.example.com", map[string]string{"node_id": "node-1", "topology": "zone=z1", "max_volumes_per_node": "16"})
	n, _ := publish.Build(s.Plugins(), csiRules, 0)
	if err := f.Write(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	labels, features := nfdRead(t, dir, now)
	wantLabels := map[string]string{"csi.wasmhost.dev/csi.example.com": "true", "csi.wasmhost.dev/csi.example.com_node_id": "node-1"}
	if !maps.Equal(labels, wantLabels) {
		t.Errorf("nfd-worker labels %v, want %v", labels, wantLabels)
	}
	wantFeatures := map[string]string{
		"csi.wasmhost.dev/csi.example.com_node_id":              "node-1",
		"csi.wasmhost.dev/csi.example.com_topology":             "zone=z1",
		"csi.wasmhost.dev/csi.example.com_max_volumes_per_node": "16",
	}
	if !maps.Equal(features, wantFeatures) {
		t.Errorf("nfd-worker features %v, want %v", features, wantFeatures)
	}
	// Read back as a restarted daemon does.
	got, err := f.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := n
	want.Instances = map[string][]map[string]string{} // the file has no place for them
	if !got.Equal(want) {
		t.Errorf("Load: %+v, want %+v", got, want)
	}
	// Past its expiry nfd-worker drops it, and so does Load.
	later := now.Add(time.Hour + time.Second)
	if labels, _ := nfdRead(t, dir, later); len(labels) != 0 {
		t.Errorf("labels past the expiry: %v", labels)
	}
	f.Now = func() time.Time { return later }
	if got, _ := f.Load(context.Background()); len(got.Labels) != 0 {
		t.Errorf("Load past the expiry: %v", got.Labels)
	}
}

// TestFeatureFileSplits: past 64 KiB the lines go to further files, each within the limit;
// when fewer are needed again, the extra files go.
func TestFeatureFileSplits(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	f := &publish.FeatureFile{Dir: dir}
	s := state.New()
	rules := map[string]publish.Rules{"T": {Namespace: "t.example.com", Labels: []string{"id"}, Attributes: []string{"info"}}}
	for i := range 1000 {
		register(s, fmt.Sprintf("/r/%d.sock", i), "T", fmt.Sprintf("plugin-%d", i), map[string]string{"id": fmt.Sprintf("id-%d", i), "info": strings.Repeat("x", 100)})
	}
	n, refused := publish.Build(s.Plugins(), rules, publish.MaxMaxBytes)
	if len(refused) > 0 {
		t.Fatal(refused)
	}
	if err := f.Write(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) < 3 {
		t.Fatalf("%d files for 1,000 plugins, want the lines split over several", len(ents))
	}
	labels, features := nfdRead(t, dir, now)
	if len(labels) != 2000 || len(features) != 2000 {
		t.Errorf("%d labels and %d features, want 2,000 of each", len(labels), len(features))
	}
	for i := range 999 {
		deregister(s, fmt.Sprintf("/r/%d.sock", i))
	}
	n, _ = publish.Build(s.Plugins(), rules, publish.MaxMaxBytes)
	if err := f.Write(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	ents, _ = os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != "wasmhost" {
		t.Errorf("files left: %v, want wasmhost alone", ents)
	}
	labels, _ = nfdRead(t, dir, now)
	if len(labels) != 2 || labels["t.example.com/plugin-999_id"] != "id-999" {
		t.Errorf("labels %v", labels)
	}
}

// fakeSink records its writes; its writes fail while failing is set.
type fakeSink struct {
	mu      sync.Mutex
	held    publish.Node
	writes  int
	failing error
	refresh time.Duration
	at      []time.Time // of each write
}

func (f *fakeSink) SinkName() string            { return "fake" }
func (f *fakeSink) Target() string              { return "memory" }
func (f *fakeSink) RefreshAfter() time.Duration { return f.refresh }
func (f *fakeSink) Load(context.Context) (publish.Node, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.held.Labels == nil {
		return publish.Empty(), nil
	}
	return f.held, nil
}

func (f *fakeSink) Write(_ context.Context, n publish.Node) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failing != nil {
		return f.failing
	}
	f.held, f.writes = n, f.writes+1
	f.at = append(f.at, time.Now())
	return nil
}

func (f *fakeSink) get() (publish.Node, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.held, f.writes
}

func runPublisher(t *testing.T, cfg publish.Config) (*publish.Publisher, func()) {
	t.Helper()
	p, err := publish.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	return p, func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// TestBurstIsAHandfulOfWrites: a thousand registrations over two seconds are written in a
// few writes, and when the plugins go their labels go.
func TestBurstIsAHandfulOfWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := state.New()
		sink := &fakeSink{}
		_, stop := runPublisher(t, publish.Config{Store: s, Rules: csiRules, Sinks: []publish.Sink{sink}, Coalesce: time.Second, MaxBytes: publish.MaxMaxBytes})
		defer stop()
		synctest.Wait()
		for i := range 1000 {
			register(s, fmt.Sprintf("/r/%d.sock", i), "CSIPlugin", fmt.Sprintf("d%d", i), map[string]string{"node_id": "n"})
			if i%100 == 0 {
				time.Sleep(200 * time.Millisecond)
			}
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		n, writes := sink.get()
		if len(n.Labels) != 2000 {
			t.Fatalf("%d labels, want 2,000", len(n.Labels))
		}
		if writes > 5 {
			t.Errorf("%d writes for a burst of 1,000 over 2 s, want a handful", writes)
		}
		for i := range 1000 {
			deregister(s, fmt.Sprintf("/r/%d.sock", i))
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if n, _ := sink.get(); len(n.Labels) != 0 || len(n.Attributes) != 0 || len(n.Instances) != 0 {
			t.Errorf("after the plugins went: %d labels, %v, %v", len(n.Labels), n.Attributes, n.Instances)
		}
	})
}

// TestFailingSinkRetriesWithBackoff: a sink that fails is shown failing with its error and
// retried on a growing backoff; once it works it catches up with the latest state.
func TestFailingSinkRetriesWithBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := state.New()
		sink := &fakeSink{failing: errors.New("connection refused")}
		p, stop := runPublisher(t, publish.Config{Store: s, Rules: csiRules, Sinks: []publish.Sink{sink}, InitialBackoff: time.Second, MaxBackoff: 8 * time.Second})
		defer stop()
		register(s, "/r/a.sock", "CSIPlugin", "a", nil)
		time.Sleep(30 * time.Second)
		synctest.Wait()
		st := p.Status().Sinks[0]
		if st.State != publish.SinkFailing || !strings.Contains(st.LastError, "connection refused") || st.NextRetry.IsZero() {
			t.Errorf("status %+v, want failing with the error", st)
		}
		// 1, 2, 4, 8, 8 … seconds (less up to a fifth): about 6 to 9 attempts in 30 s.
		if st.Failures < 5 || st.Failures > 10 {
			t.Errorf("%d attempts in 30 s, want a backoff of 1 s doubling to 8 s", st.Failures)
		}
		register(s, "/r/b.sock", "CSIPlugin", "b", nil)
		sink.mu.Lock()
		sink.failing = nil
		sink.mu.Unlock()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if n, _ := sink.get(); n.Labels["csi.wasmhost.dev/a"] != "true" || n.Labels["csi.wasmhost.dev/b"] != "true" {
			t.Errorf("after recovery: %v", n.Labels)
		}
		if st := p.Status().Sinks[0]; st.State != publish.SinkOK || st.Labels != 2 {
			t.Errorf("status %+v, want ok with 2 labels", st)
		}
	})
}

// TestRestartKeepsWhatWasThere: at start, what the sink held stays until the plugins found
// at start are registered again (no label taken off and put back), then what is gone goes.
func TestRestartKeepsWhatWasThere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := state.New()
		held := publish.Empty()
		held.Labels["csi.wasmhost.dev/a"] = "true"
		held.Labels["csi.wasmhost.dev/gone"] = "true"
		sink := &fakeSink{held: held}
		ready := make(chan struct{})
		settled := func() bool {
			select {
			case <-ready:
				return true
			default:
				return false
			}
		}
		// Sockets found at start, not yet registered.
		s.SetStatus(state.Status{Path: "/r/a.sock", State: state.StatePending})
		p, stop := runPublisher(t, publish.Config{Store: s, Rules: csiRules, Sinks: []publish.Sink{sink}, Settled: settled, StartGrace: time.Hour})
		defer stop()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		n, _ := sink.get()
		if n.Labels["csi.wasmhost.dev/a"] != "true" || n.Labels["csi.wasmhost.dev/gone"] != "true" {
			t.Fatalf("labels while starting %v, want what was there kept", n.Labels)
		}
		if !p.Status().Sinks[0].Holding && p.Status().Sinks[0].Writes > 0 {
			t.Error("status does not say it holds what was there")
		}
		register(s, "/r/a.sock", "CSIPlugin", "a", nil)
		close(ready)
		time.Sleep(3 * time.Second)
		synctest.Wait()
		n, _ = sink.get()
		if n.Labels["csi.wasmhost.dev/a"] != "true" || n.Labels["csi.wasmhost.dev/gone"] != "" {
			t.Errorf("labels once settled %v, want a only", n.Labels)
		}
	})
}

// TestFeatureFileRefreshed: the file is rewritten before it expires, with nothing changed.
func TestFeatureFileRefreshed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		s := state.New()
		register(s, "/r/a.sock", "CSIPlugin", "a", nil)
		f := &publish.FeatureFile{Dir: dir, Expiry: 10 * time.Minute}
		_, stop := runPublisher(t, publish.Config{Store: s, Rules: csiRules, Sinks: []publish.Sink{f}})
		defer stop()
		for range 5 {
			time.Sleep(9 * time.Minute)
			synctest.Wait()
			if labels, _ := nfdRead(t, dir, time.Now()); labels["csi.wasmhost.dev/a"] != "true" {
				t.Fatalf("at %s the label is gone: %v", time.Now().Format(time.TimeOnly), labels)
			}
		}
	})
}

// TestRefreshJittered: with nothing changing, a sink is written again 9 to 10 minutes
// (RefreshAfter, less up to a tenth) after its last write, never later, and not at the same
// interval each time: nodes started together do not refresh together.
func TestRefreshJittered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := state.New()
		register(s, "/r/a.sock", "CSIPlugin", "a", nil)
		sink := &fakeSink{refresh: 10 * time.Minute}
		_, stop := runPublisher(t, publish.Config{Store: s, Rules: csiRules, Sinks: []publish.Sink{sink}})
		defer stop()
		time.Sleep(200 * time.Minute)
		synctest.Wait()
		sink.mu.Lock()
		at := slices.Clone(sink.at)
		sink.mu.Unlock()
		if len(at) < 20 || len(at) > 24 {
			t.Fatalf("%d writes in 200 minutes, want one at start and one every 9 to 10 minutes", len(at))
		}
		intervals := map[time.Duration]bool{}
		for i := 1; i < len(at); i++ {
			d := at[i].Sub(at[i-1])
			if d < 9*time.Minute || d > 10*time.Minute {
				t.Errorf("write %d came %s after the one before, want 9m to 10m", i, d)
			}
			intervals[d] = true
		}
		if len(intervals) < len(at)/2 {
			t.Errorf("%d different intervals between %d writes: the refresh is not jittered", len(intervals), len(at))
		}
	})
}

// TestBuildNotRegistered: a plugin of a published type that is not registered is an instance
// with its state and no facts, so that the fleet view shows it; a retry in progress after a
// failure shows as failing, not as a change at every attempt.
func TestBuildNotRegistered(t *testing.T) {
	s := state.New()
	register(s, "/r/ok.sock", "CSIPlugin", "ok", map[string]string{"node_id": "n"})
	s.SetStatus(state.Status{Path: "/r/rej.sock", State: state.StateRejected, PluginType: "CSIPlugin", PluginName: "rej", LastError: "refused"})
	s.SetStatus(state.Status{Path: "/r/retry.sock", State: state.StatePending, PluginType: "CSIPlugin", PluginName: "retry", LastError: "dial: refused"})
	s.SetStatus(state.Status{Path: "/r/new.sock", State: state.StatePending, PluginType: "CSIPlugin", PluginName: "new"})
	s.SetStatus(state.Status{Path: "/r/other.sock", State: state.StateRejected, PluginType: "OtherType", PluginName: "o"})
	n, _ := publish.Build(s.Plugins(), csiRules, 0)
	states := map[string]string{}
	for _, in := range n.Instances["csi.wasmhost.dev"] {
		states[in[publish.InstanceName]] = in[publish.InstanceState]
		if in[publish.InstanceName] != "ok" && len(in) != 5 {
			t.Errorf("%s: %v, want only the plugin's own attributes", in[publish.InstanceName], in)
		}
	}
	if want := map[string]string{"ok": "registered", "rej": "rejected", "retry": "failing"}; !maps.Equal(states, want) {
		t.Errorf("instances by state %v, want %v", states, want)
	}
	if len(n.Labels) != 2 {
		t.Errorf("labels %v: want the registered plugin's only", n.Labels)
	}
}
