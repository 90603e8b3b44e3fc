package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/guestbuild"
	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
	"github.com/wasmhost/wasmhost/internal/state"
)

// Issue 27 end to end, with the shipped CSI handler and the daemon's defaults (callCPU 2 s,
// pluginCallResponseSize 1 MiB), beside a plugin of another type: a driver whose NodeGetInfo
// answers 75,000 topology segments registers (the handler's topology handling is a sort
// and a pass; it ran out of CPU before), its topology left out as too large to publish; a
// driver answering 2 MiB is told the answer is over handlers.limits.pluginCallResponseSize
// (CodeTooLarge, not a gRPC failure) and backs off; the other plugins stay registered.
func TestCSIHostileAnswers(t *testing.T) {
	cfg, _ := testDaemonConfig(t)
	if err := os.WriteFile(filepath.Join(cfg.HandlerDir, "csi.wasm"), guestbuild.ShippedBytes(t, "csi"), 0o644); err != nil {
		t.Fatal(err)
	}
	ok, err := os.ReadFile(filepath.Join("..", "host", "testdata", "ok.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg.HandlerDir, "ok.wasm"), ok, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.Handlers.Types = map[string]config.TypeConfig{"CSIPlugin": {Capabilities: []string{"plugin_call"}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	d := runTestDaemon(t, cfg, nil)
	serve := func(typ, name string, calls map[string][]byte) *registrationtest.Plugin {
		return registrationtest.Serve(t, filepath.Join(cfg.SocketDir, name+".sock"),
			registrationtest.Info{Type: typ, Name: name, Versions: []string{"1.0.0"}}, registrationtest.Options{Calls: calls})
	}
	registered := func(p *registrationtest.Plugin) {
		t.Helper()
		for n := p.WaitNotification(t, hostileWait); !n.Registered; n = p.WaitNotification(t, hostileWait) {
			if !strings.Contains(n.Error, "no handler registered") {
				t.Fatalf("%s: %+v", p.Path(), n)
			}
		}
	}
	other := serve("ok.example", "other", nil)
	registered(other)

	// 75,000 segments, 975,000 bytes: within pluginCallResponseSize.
	var topo []byte
	for i := range 75_000 {
		e := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), fmt.Sprintf("k%05d", 74_999-i))
		e = protowire.AppendString(protowire.AppendTag(e, 2, protowire.BytesType), "v")
		topo = protowire.AppendBytes(protowire.AppendTag(topo, 1, protowire.BytesType), e)
	}
	answer := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "node-1")
	answer = protowire.AppendBytes(protowire.AppendTag(answer, 3, protowire.BytesType), topo)
	wide := serve("CSIPlugin", "wide.csi.example.com", map[string][]byte{"/csi.v1.Node/NodeGetInfo": answer})
	registered(wide)
	v, _ := d.State().Plugin(wide.Path())
	if _, ok := v.Published["topology"]; ok || v.Published["node_id"] != "node-1" {
		t.Errorf("published for the 75,000-segment driver: %d keys, node_id %q; want node_id and no topology", len(v.Published), v.Published["node_id"])
	}

	// 2 MiB: over pluginCallResponseSize.
	huge := serve("CSIPlugin", "huge.csi.example.com", map[string][]byte{"/csi.v1.Node/NodeGetInfo": make([]byte, 2<<20)})
	n := huge.WaitNotification(t, hostileWait)
	if want := "guest: too large: response of 2097152 bytes over the limit of 1048576 (handlers.limits.pluginCallResponseSize)"; n.Registered || !strings.Contains(n.Error, want) {
		t.Errorf("the driver answering 2 MiB was told %+v; want a failure containing %q", n, want)
	}
	waitUntil(t, "the 2 MiB driver to back off", func() bool {
		v, ok := d.State().Plugin(huge.Path())
		return ok && v.State == state.StateFailing && !v.NextRetry.IsZero()
	})
	for _, p := range []*registrationtest.Plugin{other, wide} {
		if v, ok := d.State().Plugin(p.Path()); !ok || v.State != state.StateRegistered {
			t.Errorf("%s: %+v, want registered", p.Path(), v)
		}
	}
}
