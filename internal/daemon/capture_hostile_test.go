package daemon

// Issue 27 end to end: handlers that fill a session's recording, in a running daemon with
// capture on (the default) and plugins of other types registered.

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/wasmhost/wasmhost/admin/client"
	adminv1 "github.com/wasmhost/wasmhost/admin/v1"
	"github.com/wasmhost/wasmhost/internal/capture"
	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
	"github.com/wasmhost/wasmhost/internal/session"
)

// TestHostileCaptureInRunningDaemon: a validate that reads a 60,000-byte value in a loop ends
// as it does for a type whose capture is off, and its session is truncated within the bounds;
// four plugins whose validate reads it 5,000 times register, and what the capture holds stays
// under its bound; the plugins of other types stay registered, and the admin API answers.
func TestHostileCaptureInRunningDaemon(t *testing.T) {
	cfg, _ := testDaemonConfig(t)
	cfg.Reconciler.InitialBackoff = config.Duration(time.Hour) // one attempt each: no retries to wait out
	cfg.Reconciler.MaxBackoff = config.Duration(time.Hour)
	off := false
	cfg.Handlers.Types = map[string]config.TypeConfig{"kvloop.nocapture": {Capture: &off}}
	installFixtures(t, cfg.HandlerDir, "ok", "reload_v1", "kvloop", "kvread")
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	d, exited := startTestDaemon(t, cfg, nil)
	plugin := func(typ, name, sock string) *registrationtest.Plugin {
		return registrationtest.Serve(t, filepath.Join(cfg.SocketDir, sock+".sock"), registrationtest.Info{Type: typ, Name: name, Versions: []string{"v1"}}, registrationtest.Options{})
	}
	a, b := plugin("ok.example", "a", "a"), plugin("reload.example", "b", "b")
	for _, p := range []*registrationtest.Plugin{a, b} {
		if n := p.WaitNotification(t, hostileWait); !n.Registered {
			t.Fatalf("%s: %+v", p.Path(), n)
		}
	}

	// Four plugins whose validate reads the value 5,000 times register.
	var reads []*registrationtest.Plugin
	for _, name := range []string{"r1", "r2", "r3", "r4"} {
		reads = append(reads, plugin("kvread.example", name, name))
	}
	for _, p := range reads {
		if n := p.WaitNotification(t, hostileWait); !n.Registered {
			t.Errorf("%s: %+v", p.Path(), n)
		}
	}
	// The loop, captured and not: the same end, at the call's CPU budget or its deadline
	// (which comes first depends on the machine's load, recorded or not).
	loop, loopOff := plugin("kvloop.example", "p", "loop"), plugin("kvloop.nocapture", "p", "loopoff")
	for _, p := range []*registrationtest.Plugin{loop, loopOff} {
		n := p.WaitNotification(t, hostileWait)
		if n.Registered || !strings.Contains(n.Error, `kvloop.wasm wasmhost_validate for plugin "p"`) ||
			!strings.Contains(n.Error, "handlers.limits.callCPU") && !strings.Contains(n.Error, "timed out after 5s") {
			t.Errorf("%s: %+v; want the call's end at its budget", p.Path(), n)
		}
	}

	// The admin API answers with the sessions, each within its bounds and saying it was
	// truncated; the ring as a whole within its own.
	conn, err := grpc.NewClient("unix://"+d.AdminSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(client.MaxMessageSize)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), hostileWait)
	defer cancel()
	resp, err := adminv1.NewAdminClient(conn).CaptureSessions(ctx, &adminv1.CaptureSessionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	truncated := map[string]int{}
	for _, cs := range resp.GetSessions() {
		s, err := session.Unmarshal(cs.GetYaml())
		if err != nil {
			t.Fatal(err)
		}
		var size int64
		for _, c := range s.Calls {
			size += c.Size()
		}
		if size > capture.MaxSessionBytes {
			t.Errorf("the session of %s holds %d bytes, over %d", s.Plugin.Socket, size, capture.MaxSessionBytes)
		}
		if s.Truncated != nil && s.Replayable() != nil {
			truncated[s.Plugin.Type]++
		}
		if s.Plugin.Type == "kvloop.nocapture" {
			t.Errorf("a session of a type opted out: %s", s.Plugin.Socket)
		}
	}
	if truncated["kvloop.example"] != 1 || truncated["kvread.example"] != 4 || truncated["ok.example"] != 0 {
		t.Errorf("truncated sessions by type: %v; want kvloop's and the four kvread's", truncated)
	}
	if got := d.capture.Bytes(); got > capture.MaxBytes || got > 5*capture.MaxSessionBytes {
		t.Errorf("the capture holds %d bytes; its bound is %d", got, capture.MaxBytes)
	}

	// The daemon is up and ready, the plugins of the other types still registered.
	checkUnharmed(t, d, exited, a, b)
	regs := 0
	for _, v := range d.State().Plugins() {
		if v.Registered && !strings.HasPrefix(v.PluginType, "kvloop.") {
			regs++
		}
	}
	if regs != 6 {
		t.Errorf("%d of the 6 plugins of the other types registered", regs)
	}
}
