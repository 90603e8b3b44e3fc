package daemon

// Issue 27 end to end, for what reaches the cluster: hostile plugins and handlers in a running
// daemon whose plugins of other types are registered and published to both sinks, the
// feature file and the NodeFeature object (on a fake API server that refuses what the real
// one refuses for its size; test/kube runs the real one). One answer too large, many of them,
// and names that spell other plugins' keys: every other plugin's labels still reach the file
// and the object, the plugins stay registered, the admin API answers and says what was left
// out, an Event says it, and the sinks never fail.

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"

	adminv1 "github.com/wasmhost/wasmhost/admin/v1"
	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/guestbuild"
	"github.com/wasmhost/wasmhost/internal/publish"
	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
	"github.com/wasmhost/wasmhost/internal/state"
)

// keyedHandler is a native handler that publishes what publish returns for each plugin.
type keyedHandler struct {
	publish func(p registration.PluginInfo) map[string]string
}

func (keyedHandler) ValidatePlugin(context.Context, registration.PluginInfo) error { return nil }
func (h keyedHandler) RegisterPlugin(_ context.Context, p registration.PluginInfo) (map[string]string, error) {
	return h.publish(p), nil
}
func (keyedHandler) DeRegisterPlugin(context.Context, registration.PluginInfo) error { return nil }

// publishRig is a daemon publishing CSIPlugin (the shipped CSI handler, which asks each
// driver's NodeGetInfo), bigattr.example (a handler publishing a 65,000-byte attribute,
// internal/host/testdata/bigattr.wat) and OtherPlugin (a native handler) to a feature file and
// a NodeFeature on a fake API server, with Events.
type publishRig struct {
	t        *testing.T
	cfg      config.Config
	d        *Daemon
	api      *fakeAPI
	features string
	sockets  int // plugins started: their sockets' names
}

func newPublishRig(t *testing.T, maxBytes config.ByteSize) *publishRig {
	t.Helper()
	csiWasm := guestbuild.ShippedBytes(t, "csi")
	cfg, base := testDaemonConfig(t)
	r := &publishRig{t: t, features: filepath.Join(base, "f")}
	if err := os.Mkdir(r.features, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg.HandlerDir, "csi.wasm"), csiWasm, 0o644); err != nil {
		t.Fatal(err)
	}
	// A handler that publishes one attribute as large as a publish call may be.
	bigattr, err := os.ReadFile(filepath.Join("..", "host", "testdata", "bigattr.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg.HandlerDir, "bigattr.wasm"), bigattr, 0o644); err != nil {
		t.Fatal(err)
	}
	var kubeconfig string
	r.api, kubeconfig = startFakeAPI(t, base)
	cfg.Publish.FeatureFile.Dir = r.features
	cfg.Publish.NodeName, cfg.Publish.Kubeconfig = "node-a", kubeconfig
	cfg.Publish.NodeFeature.Namespace = "wasmhost"
	cfg.Publish.Events.Enabled = true
	cfg.Publish.Coalesce = config.Duration(20 * time.Millisecond)
	cfg.Publish.StartGrace = 0
	if maxBytes > 0 {
		cfg.Publish.MaxBytes = maxBytes
	}
	cfg.Handlers.Types = map[string]config.TypeConfig{
		"CSIPlugin": {Capabilities: []string{"plugin_call"}, Publish: config.TypePublish{
			Namespace: "csi.wasmhost.dev", Labels: []string{"node_id"}, Attributes: []string{"version", "topology"}}},
		"OtherPlugin":     {Publish: config.TypePublish{Namespace: "other.wasmhost.dev", Labels: []string{"id"}, Attributes: []string{"*"}}},
		"bigattr.example": {Publish: config.TypePublish{Namespace: "big.wasmhost.dev", Labels: []string{"id"}, Attributes: []string{"*"}}},
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	r.cfg = cfg
	r.d, _ = startTestDaemon(t, cfg, nil)
	r.d.SetHandler("OtherPlugin", keyedHandler{func(p registration.PluginInfo) map[string]string {
		return map[string]string{"id": "id-" + strings.ReplaceAll(p.Name, "_", "-"), "info": "of " + p.Name}
	}})
	return r
}

// nodeInfo encodes a NodeGetInfoResponse with node_id id.
func nodeInfo(id string) []byte {
	return protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), id)
}

// csi starts a CSI driver answering NodeGetInfo with node id id, and waits until it is
// registered.
func (r *publishRig) csi(name, id string) *registrationtest.Plugin {
	r.t.Helper()
	r.sockets++
	p := registrationtest.Serve(r.t, filepath.Join(r.cfg.SocketDir, fmt.Sprintf("c%d.sock", r.sockets)),
		registrationtest.Info{Type: "CSIPlugin", Name: name, Versions: []string{"1.0.0"}},
		registrationtest.Options{Calls: map[string][]byte{"/csi.v1.Node/NodeGetInfo": nodeInfo(id)}})
	r.registered(p)
	return p
}

// plugin starts a plugin of typ, and waits until it is registered.
func (r *publishRig) plugin(typ, name string) *registrationtest.Plugin {
	r.t.Helper()
	r.sockets++
	p := registrationtest.Serve(r.t, filepath.Join(r.cfg.SocketDir, fmt.Sprintf("p%d.sock", r.sockets)),
		registrationtest.Info{Type: typ, Name: name, Versions: []string{"1.0.0"}}, registrationtest.Options{})
	r.registered(p)
	return p
}

func (r *publishRig) registered(p *registrationtest.Plugin) {
	r.t.Helper()
	for n := p.WaitNotification(r.t, hostileWait); !n.Registered; n = p.WaitNotification(r.t, hostileWait) {
		if !strings.Contains(n.Error, "no handler registered") {
			r.t.Fatalf("%s: %+v", p.Path(), n)
		}
	}
}

// fileLabels reads the feature files as nfd-worker does.
func (r *publishRig) fileLabels() map[string]string {
	r.t.Helper()
	labels := map[string]string{}
	ents, err := os.ReadDir(r.features)
	if err != nil {
		r.t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(r.features, e.Name()))
		if err != nil {
			r.t.Fatal(err)
		}
		ff, err := publish.ParseFeatureFile(b, time.Now())
		if err != nil {
			r.t.Errorf("%s: nfd-worker would skip it: %v", e.Name(), err)
		}
		maps.Copy(labels, ff.Labels)
	}
	return labels
}

// waitLabels waits until the feature file and the NodeFeature both hold want (among others).
func (r *publishRig) waitLabels(want map[string]string) {
	r.t.Helper()
	has := func(got map[string]string) bool {
		for k, v := range want {
			if got[k] != v {
				return false
			}
		}
		return true
	}
	waitUntil(r.t, fmt.Sprintf("labels %v in the feature file and the NodeFeature", want), func() bool {
		n, _, ok := r.api.nodeFeature("node-a")
		return ok && has(n.Labels) && has(r.fileLabels())
	})
}

// checkHealthy: the sinks never failed, every plugin is registered, the admin API answers;
// it returns the admin API's plugins by socket.
func (r *publishRig) checkHealthy() map[string]*adminv1.Plugin {
	r.t.Helper()
	for _, s := range r.d.PublishStatus().Sinks {
		if s.State != publish.SinkOK || s.Failures != 0 {
			r.t.Errorf("sink %s: %s, %d failures, last error %q", s.Sink, s.State, s.Failures, s.LastError)
		}
	}
	r.api.mu.Lock()
	refusals := r.api.refusals
	r.api.mu.Unlock()
	if refusals != 0 {
		r.t.Errorf("the API server refused %d writes for their size", refusals)
	}
	for _, v := range r.d.State().Plugins() {
		if v.State != state.StateRegistered {
			r.t.Errorf("%s (%s): %s, %s", v.Path, v.PluginName, v.State, v.LastError)
		}
	}
	ctx, cancel := context.WithTimeout(r.t.Context(), 10*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+r.d.AdminSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		r.t.Fatal(err)
	}
	defer conn.Close()
	resp, err := adminv1.NewAdminClient(conn).ListPlugins(ctx, &adminv1.ListPluginsRequest{})
	if err != nil {
		r.t.Fatalf("the admin API does not answer: %v", err)
	}
	out := map[string]*adminv1.Plugin{}
	for _, p := range resp.GetPlugins() {
		out[p.GetSocket()] = p
	}
	return out
}

// TestPublishOneLongAttribute: a CSI driver answering NodeGetInfo with a 65,300-byte node id
// (the shipped handler publishes it) and a handler publishing a 65,000-byte attribute take
// neither sink down: their other facts and every other plugin's, before and after them, reach
// the file and the object; what was left out is in `wasmhost plugins -o wide`, the status, and
// a PublishLeftOut Event.
func TestPublishOneLongAttribute(t *testing.T) {
	r := newPublishRig(t, 0)
	r.csi("good.csi.example.com", "node-1")
	r.plugin("OtherPlugin", "first")
	r.waitLabels(map[string]string{"csi.wasmhost.dev/good.csi.example.com_node_id": "node-1", "other.wasmhost.dev/first_id": "id-first"})

	long := r.csi("long.csi.example.com", strings.Repeat("n", 65300))
	big := r.plugin("bigattr.example", "big.example.com")
	// Drivers and plugins registered after them.
	r.csi("late.csi.example.com", "node-2")
	r.plugin("OtherPlugin", "late")
	r.waitLabels(map[string]string{
		"csi.wasmhost.dev/good.csi.example.com_node_id": "node-1", "csi.wasmhost.dev/late.csi.example.com_node_id": "node-2",
		"other.wasmhost.dev/first_id": "id-first", "other.wasmhost.dev/late_id": "id-late",
		"csi.wasmhost.dev/long.csi.example.com": "true", "big.wasmhost.dev/big.example.com_id": "big",
	})
	n, size, _ := r.api.nodeFeature("node-a")
	if v := n.Attributes["csi.wasmhost.dev"]["long.csi.example.com_version"]; v != "1.0.0" {
		t.Errorf("the long driver's version attribute is %q: its other keys should stay", v)
	}
	if _, ok := n.Attributes["csi.wasmhost.dev"]["long.csi.example.com_node_id"]; ok {
		t.Error("the 65,300-byte node id reached the NodeFeature")
	}
	if size > 2*publish.DefaultMaxBytes {
		t.Errorf("the NodeFeature takes %d bytes", size)
	}
	plugins := r.checkHealthy()
	for sock, want := range map[string]string{long.Path(): "node_id: left out: a 65300-byte value", big.Path(): "blob: left out: a 65000-byte value"} {
		if got := strings.Join(plugins[sock].GetNotPublished(), "; "); !strings.Contains(got, want) {
			t.Errorf("%s: not published %q, want it to say %q", sock, got, want)
		}
	}
	if st := r.d.PublishStatus(); st.Refused < 2 {
		t.Errorf("status counts %d refusals", st.Refused)
	}
	waitUntil(t, "a PublishLeftOut Event about the long node id", func() bool {
		for _, note := range r.api.eventNotes(publish.ReasonPublishLeftOut) {
			if strings.Contains(note, "long.csi.example.com") && strings.Contains(note, "key node_id") {
				return true
			}
		}
		return false
	})
}

// TestPublishNamesCannotCollide: a driver named after another's key (csi.example.com.node_id,
// csi.example.com_node_id) and plugins of adversarial names leave every other plugin's labels
// as they were, in the file and in the object.
func TestPublishNamesCannotCollide(t *testing.T) {
	r := newPublishRig(t, 0)
	r.csi("csi.example.com", "node-1")
	r.csi("csi.example.com.node_id", "node-2")
	r.csi("csi.example.com_node_id", "node-3")
	names := []string{"a", "a_id", "a.id", "a%5Fid", "a%", "a_", "_a", "%25"}
	for _, name := range names {
		r.plugin("OtherPlugin", name)
	}
	r.waitLabels(map[string]string{
		"csi.wasmhost.dev/csi.example.com_node_id": "node-1", "csi.wasmhost.dev/csi.example.com": "true",
		"other.wasmhost.dev/a_id": "id-a", "other.wasmhost.dev/a.id_id": "id-a.id",
	})
	var n publish.Node
	waitUntil(t, "every plugin's attributes in the NodeFeature", func() bool {
		n, _, _ = r.api.nodeFeature("node-a")
		// Three drivers' node_id, version and topology (empty: their NodeGetInfo has none).
		return len(n.Attributes["other.wasmhost.dev"]) == 2*len(names) && len(n.Attributes["csi.wasmhost.dev"]) == 9
	})
	for _, labels := range []map[string]string{n.Labels, r.fileLabels()} {
		for k, v := range labels {
			ns, name, _ := strings.Cut(k, "/")
			plugin, key, ok := publish.SplitKeyName(name)
			switch {
			case !ok && v != "true":
				t.Errorf("label %s=%s names no plugin's key", k, v)
			case ok && ns == "csi.wasmhost.dev" && map[string]string{"csi.example.com": "node-1", "csi.example.com.node_id": "node-2"}[plugin] != v:
				t.Errorf("label %s=%s is not plugin %s's %s", k, v, plugin, key)
			case ok && ns == "other.wasmhost.dev" && v != "id-"+strings.ReplaceAll(plugin, "_", "-"):
				t.Errorf("label %s=%s is not plugin %s's %s", k, v, plugin, key)
			}
		}
	}
	// Every plugin's attributes, each under its own name.
	for _, name := range names {
		if got := n.Attributes["other.wasmhost.dev"][publish.KeyName(name, "info")]; got != "of "+name {
			t.Errorf("plugin %q's info attribute is %q", name, got)
		}
	}
	if got := n.Attributes["csi.wasmhost.dev"][publish.KeyName("csi.example.com_node_id", "node_id")]; got != "node-3" {
		t.Errorf("the node id of the driver named csi.example.com_node_id is %q", got)
	}
	r.checkHealthy()
}

// TestPublishTotalBounded: however many plugins answer with large values, the NodeFeature and
// the feature file stay within publish.maxBytes; the plugins of the oldest sockets keep their
// facts, each published value is in the object once, and the newcomers left out are said so.
func TestPublishTotalBounded(t *testing.T) {
	r := newPublishRig(t, 0)
	r.csi("good.csi.example.com", "node-1")
	r.plugin("OtherPlugin", "first")
	r.waitLabels(map[string]string{"csi.wasmhost.dev/good.csi.example.com_node_id": "node-1", "other.wasmhost.dev/first_id": "id-first"})
	var flood []*registrationtest.Plugin
	for i := range 40 {
		flood = append(flood, r.csi(fmt.Sprintf("flood-%02d.example.com", i), strings.Repeat(fmt.Sprint(i%10), 60)))
	}
	r.plugin("OtherPlugin", "late")
	r.waitLabels(map[string]string{"csi.wasmhost.dev/good.csi.example.com_node_id": "node-1", "other.wasmhost.dev/late_id": "id-late"})
	n, size, _ := r.api.nodeFeature("node-a")
	if c := n.Cost(); c > publish.DefaultMaxBytes {
		t.Errorf("the NodeFeature costs %d, over %d", c, publish.DefaultMaxBytes)
	}
	total := 0
	ents, _ := os.ReadDir(r.features)
	for _, e := range ents {
		fi, _ := e.Info()
		total += int(fi.Size())
	}
	t.Logf("NodeFeature %d bytes (cost %d), feature files %d bytes in %d", size, n.Cost(), total, len(ents))
	if total > publish.DefaultMaxBytes+1024 {
		t.Errorf("the feature files take %d bytes", total)
	}
	plugins := r.checkHealthy()
	kept, leftOut := 0, 0
	for i, p := range flood {
		label := fmt.Sprintf("csi.wasmhost.dev/flood-%02d.example.com", i)
		switch _, ok := n.Labels[label]; {
		case ok && leftOut > 0:
			t.Errorf("%s kept after an older one was left out", label)
		case ok:
			kept++
		default:
			leftOut++
			if got := strings.Join(plugins[p.Path()].GetNotPublished(), "; "); !strings.Contains(got, "(plugin): left out whole") {
				t.Errorf("%s left out, and wasmhost plugins says %q", label, got)
			}
		}
	}
	if kept == 0 || leftOut == 0 {
		t.Errorf("%d of the flood kept, %d left out: want the share to fill", kept, leftOut)
	}
	// Each value once: the first driver's node id is its label and its attribute (a label's
	// value is an attribute too, for NodeFeatureRules), not again in its instance.
	for _, in := range n.Instances["csi.wasmhost.dev"] {
		if _, ok := in["node_id"]; ok && in[publish.InstanceState] == "registered" {
			t.Errorf("instance %s repeats its node id", in[publish.InstanceName])
		}
	}
}
