package daemon

// Issue 9 end to end: hostile handler files dropped into a running daemon whose plugins of other
// types are registered. The host's tests (internal/host/hostile_test.go) go through every
// bound; this one checks the daemon around them: it stays up and ready, the plugins stay
// registered, a good handler dropped in afterwards registers its plugin, a handler that keeps
// trapping is quarantined and shows it, and the refusals name the file and the fault.

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	adminv1 "github.com/wasmhost/wasmhost/admin/v1"
	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/host/sandbox/sandboxtest"
	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
	"github.com/wasmhost/wasmhost/internal/state"
	"github.com/wasmhost/wasmhost/internal/testwait"
)

const hostileWait = 2 * time.Minute

func TestHostileHandlersInRunningDaemon(t *testing.T) {
	cfg, _ := testDaemonConfig(t)
	cfg.Reconciler.InitialBackoff = config.Duration(50 * time.Millisecond)
	cfg.Reconciler.MaxBackoff = config.Duration(200 * time.Millisecond)
	cfg.Handlers.Quarantine.Backoff = config.Duration(time.Hour)
	cfg.Handlers.Quarantine.MaxBackoff = config.Duration(time.Hour)
	put := func(name, fixture string) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join("..", "host", "testdata", fixture+".wasm"))
		if err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(cfg.HandlerDir, "."+name)
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(cfg.HandlerDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	put("ok.wasm", "ok")
	put("reload.wasm", "reload_v1")
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}

	d, exited := startTestDaemon(t, cfg, nil)
	ctx := t.Context()

	plugin := func(typ, name string) *registrationtest.Plugin {
		return registrationtest.Serve(t, filepath.Join(cfg.SocketDir, name+".sock"), registrationtest.Info{Type: typ, Name: name, Versions: []string{"v1"}}, registrationtest.Options{})
	}
	registered := func(p *registrationtest.Plugin) {
		t.Helper()
		// A plugin that came before its handler is told "no handler" first.
		for n := p.WaitNotification(t, hostileWait); !n.Registered; n = p.WaitNotification(t, hostileWait) {
			if !strings.Contains(n.Error, "no handler registered") {
				t.Fatalf("%s: %+v", p.Path(), n)
			}
		}
	}
	a, b := plugin("ok.example", "a"), plugin("reload.example", "b")
	registered(a)
	registered(b)

	// The hostile files: a FIFO, the compile bomb, a log flood, a handler that traps
	// and one that recurses without end, the last three with plugins of their own.
	if err := syscall.Mkfifo(filepath.Join(cfg.HandlerDir, "fifo.wasm"), 0o644); err != nil {
		t.Fatal(err)
	}
	bomb := sandboxtest.BombModule(100_000, 1, 0x02)
	if err := os.WriteFile(filepath.Join(cfg.HandlerDir, ".bomb"), bomb, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(cfg.HandlerDir, ".bomb"), filepath.Join(cfg.HandlerDir, "bomb.wasm")); err != nil {
		t.Fatal(err)
	}
	put("logflood.wasm", "logflood")
	put("trap.wasm", "trap")
	put("recurse.wasm", "recurse")
	flood, trap, recurse := plugin("logflood.example", "f"), plugin("trap.example", "t"), plugin("recurse.example", "r")

	handler := func(file string) state.Handler {
		for _, h := range d.State().Handlers() {
			if filepath.Base(h.File) == file {
				return h
			}
		}
		return state.Handler{}
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		testwait.UntilWithin(t, hostileWait, what, cond)
	}
	for file, fault := range map[string]string{
		"fifo.wasm": "not a regular file (a FIFO)",
		"bomb.wasm": "blocks nested more than 4096 deep (handlers.limits.maxNesting)",
	} {
		waitFor("the refusal of "+file, func() bool { return handler(file).LastError != "" })
		if h := handler(file); h.Serving || !strings.Contains(h.LastError, filepath.Join(cfg.HandlerDir, file)) || !strings.Contains(h.LastError, fault) {
			t.Errorf("%s: serving %v, last error %q; want the file and %q", file, h.Serving, h.LastError, fault)
		}
	}
	waitFor("the trapping handler's quarantine", func() bool { return handler("trap.wasm").Counters.Quarantined })
	if h := handler("trap.wasm"); !strings.Contains(h.Counters.QuarantineReason, "unreachable") || h.Counters.Failures < 3 {
		t.Errorf("trap.wasm: %+v", h.Counters)
	}
	waitFor("the recursing handler's quarantine", func() bool { return handler("recurse.wasm").Counters.Quarantined })
	if h := handler("recurse.wasm"); !strings.Contains(h.Counters.QuarantineReason, "handlers.limits.maxCallStack") {
		t.Errorf("recurse.wasm: %+v", h.Counters)
	}
	waitFor("the log flood's quarantine", func() bool { return handler("logflood.wasm").Counters.Quarantined })
	if h := handler("logflood.wasm"); !strings.Contains(h.Counters.QuarantineReason, "handlers.limits.logLinesPerCall") {
		t.Errorf("logflood.wasm: %+v", h.Counters)
	}
	// The admin API shows the quarantine, as `wasmhost handlers` does.
	conn, err := grpc.NewClient("unix://"+d.AdminSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := adminv1.NewAdminClient(conn).ListHandlers(ctx, &adminv1.ListHandlersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	quarantined := 0
	for _, h := range resp.GetHandlers() {
		if filepath.Base(h.GetFile()) == "trap.wasm" && h.GetQuarantined() && h.GetQuarantinedUntil() != nil &&
			strings.Contains(h.GetQuarantineReason(), "unreachable") && h.GetQuarantines() == 1 {
			quarantined++
		}
	}
	if quarantined != 1 {
		t.Errorf("ListHandlers does not show trap.wasm quarantined: %v", resp.GetHandlers())
	}
	for _, p := range []*registrationtest.Plugin{flood, trap, recurse} {
		if n := p.WaitNotification(t, hostileWait); n.Registered {
			t.Errorf("%s registered", p.Path())
		}
	}

	// The daemon is up and ready, the plugins of the other types are still registered, and a
	// good handler dropped in now registers its plugin.
	checkUnharmed(t, d, exited, a, b)
	regs := 0
	for _, v := range d.State().Plugins() {
		if v.Registered && (v.PluginType == "ok.example" || v.PluginType == "reload.example") {
			regs++
		}
	}
	if regs != 2 {
		t.Errorf("%d of the 2 plugins of the other types registered", regs)
	}
	put("min.wasm", "min")
	registered(plugin("min.example", "m"))
}

// TestHostileHandlersAtStart: a FIFO and the compile bomb present when the daemon starts do not
// keep it from becoming ready, and the plugin of the type whose handler loaded registers.
func TestHostileHandlersAtStart(t *testing.T) {
	cfg, _ := testDaemonConfig(t)
	if err := syscall.Mkfifo(filepath.Join(cfg.HandlerDir, "a-fifo.wasm"), 0o644); err != nil {
		t.Fatal(err)
	}
	bomb := sandboxtest.BombModule(100_000, 1, 0x02)
	if err := os.WriteFile(filepath.Join(cfg.HandlerDir, "b-bomb.wasm"), bomb, 0o644); err != nil {
		t.Fatal(err)
	}
	ok, err := os.ReadFile(filepath.Join("..", "host", "testdata", "ok.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg.HandlerDir, "c-ok.wasm"), ok, 0o644); err != nil {
		t.Fatal(err)
	}
	p := registrationtest.Serve(t, filepath.Join(cfg.SocketDir, "a.sock"), registrationtest.Info{Type: "ok.example", Name: "a", Versions: []string{"v1"}}, registrationtest.Options{})

	d := runTestDaemon(t, cfg, nil)
	if n := p.WaitNotification(t, hostileWait); !n.Registered {
		t.Fatalf("the plugin of the type that loaded: %+v", n)
	}
	if err := d.Ready(); err != nil {
		t.Errorf("not ready: %v", err)
	}
}
