package daemon

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/logtest"
	"github.com/wasmhost/wasmhost/internal/oci"
	"github.com/wasmhost/wasmhost/internal/oci/ocitest"
	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
	"github.com/wasmhost/wasmhost/internal/state"
	"github.com/wasmhost/wasmhost/internal/testwait"
)

func testdataModule(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "host", "testdata", name+".wasm"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHandlersFromRegistry pushes the three layouts, signed and unsigned, to a registry on
// loopback, and checks what the daemon serves, refuses and reports; then that a restart with
// the registry down serves what was pulled.
func TestHandlersFromRegistry(t *testing.T) {
	reg := ocitest.Start(t)
	tmp := t.TempDir()
	trusted := ocitest.NewKey(t, tmp, "trusted")
	stranger := ocitest.NewKey(t, tmp, "stranger")

	artifact := ocitest.PushArtifact(t, reg.Ref("h/ok:v1"), testdataModule(t, "ok")) // ok.example
	ocitest.Sign(t, artifact, trusted)
	wasmToOCI := ocitest.PushWasmToOCI(t, reg.Ref("h/echo:v1"), testdataModule(t, "echo"), oci.MediaTypeWasmToOCILayer) // echo.example
	ocitest.Sign(t, wasmToOCI, trusted)
	compat := ocitest.PushCompat(t, reg.Ref("h/kv:v1"), "plugin.wasm", testdataModule(t, "kv")) // kv.example, unsigned, allowed
	unsigned := ocitest.PushArtifact(t, reg.Ref("h/min:v1"), testdataModule(t, "min"))          // min.example, unsigned
	wrongKey := ocitest.PushCompat(t, reg.Ref("h/reload:v1"), "plugin.wasm", testdataModule(t, "reload_v1"))
	ocitest.Sign(t, wrongKey, stranger)

	cfg := config.Default()
	cfg.SocketDir, cfg.HandlerDir, cfg.StateDir = filepath.Join(tmp, "s"), filepath.Join(tmp, "h"), filepath.Join(tmp, "st")
	cfg.Metrics.Listen = "off"
	cfg.Handlers.Sources = []string{artifact.String(), wasmToOCI.String(), compat.String(), unsigned.String(), wrongKey.String()}
	cfg.Handlers.Trust = config.TrustConfig{
		Keys:          []config.TrustKey{{PublicKey: trusted.PublicPEM, PluginTypes: []string{"ok.example", "echo.example", "reload.example"}}},
		AllowUnsigned: []string{"kv.example"},
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}

	run := func(t *testing.T) (*Daemon, func()) {
		ctx, cancel := context.WithCancel(context.Background())
		d, err := New(ctx, cfg, nil, "test")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx) }()
		return d, func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	}
	served := []string{"echo.example", "kv.example", "ok.example"}
	waitServed := func(t *testing.T, d *Daemon) {
		t.Helper()
		testwait.Until(t, fmt.Sprintf("plugin types %v to be served", served), func() bool {
			for _, typ := range served {
				if !d.registry.Has(typ) {
					return false
				}
			}
			return true
		})
	}
	byFile := func(hs []state.Handler, ref string) state.Handler {
		for _, h := range hs {
			if strings.HasPrefix(h.File, ref) {
				return h
			}
		}
		return state.Handler{}
	}

	d, stop := run(t)
	waitServed(t, d)
	for _, typ := range []string{"min.example", "reload.example"} {
		if d.registry.Has(typ) {
			t.Errorf("%s is served; its module should have been refused", typ)
		}
	}
	// The handler list follows the registry a moment later: wait for the signed artifact's
	// entry too.
	testwait.Until(t, "the unsigned and wrongly signed artifacts refused with their reasons, the signed one serving", func() bool {
		hs := d.State().Handlers()
		u, w := byFile(hs, unsigned.String()), byFile(hs, wrongKey.String())
		a := byFile(hs, artifact.String())
		return strings.Contains(u.LastError, "unsigned, and") && strings.Contains(w.LastError, "no signature verifies with a configured key") &&
			a.Serving && a.LastError == "" && len(a.PluginTypes) == 1
	})
	stop()

	// The registry goes down: a restart serves what was pulled, at once.
	reg.SetDown(true)
	d, stop = run(t)
	defer stop()
	select {
	case <-d.oci.Host().Ready():
	case <-time.After(time.Minute):
		t.Fatal("pulled handlers not ready")
	}
	waitServed(t, d)
}

// TestSourceRevisions: a new revision configured replaces the old one when the policy admits
// it; refused, the old one keeps serving and the refusal is reported.
func TestSourceRevisions(t *testing.T) {
	reg := ocitest.Start(t)
	tmp := t.TempDir()
	key := ocitest.NewKey(t, tmp, "key")
	v1bin, v2bin := testdataModule(t, "reload_v1"), testdataModule(t, "reload_v2")
	v1 := ocitest.PushArtifact(t, reg.Ref("h/reload:v1"), v1bin)
	ocitest.Sign(t, v1, key)
	v2 := ocitest.PushArtifact(t, reg.Ref("h/reload:v2"), v2bin)

	cfg := config.Default()
	cfg.SocketDir, cfg.HandlerDir, cfg.StateDir = filepath.Join(tmp, "s"), filepath.Join(tmp, "h"), filepath.Join(tmp, "st")
	cfg.Metrics.Listen = "off"
	cfg.Handlers.Trust.Keys = []config.TrustKey{{PublicKey: key.PublicPEM, PluginTypes: []string{"reload.example"}}}

	// serving runs a daemon for sources and returns, once the gate is open, the sha256 of the
	// module serving reload.example and the last error shown for the source.
	serving := func(source string) (sha, lastErr string) {
		t.Helper()
		cfg.Handlers.Sources = []string{source}
		ctx, cancel := context.WithCancel(context.Background())
		d, err := New(ctx, cfg, nil, "test")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx) }()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}()
		select {
		case <-d.oci.Gate():
		case <-time.After(2 * time.Minute):
			t.Fatal("the sources' gate did not open")
		}
		d.publishHandlers()
		h, _ := d.State().HandlerOf("reload.example")
		for _, hs := range d.State().Handlers() {
			if strings.HasPrefix(hs.File, source) {
				lastErr = hs.LastError
			}
		}
		return h.SHA256, lastErr
	}
	sha := func(b []byte) string { return oci.SHA256Hex(b) }

	if got, e := serving(v1.String()); got != sha(v1bin) || e != "" {
		t.Fatalf("v1: serving %s (%q), want %s", got, e, sha(v1bin))
	}
	if got, e := serving(v2.String()); got != sha(v1bin) || !strings.Contains(e, "plugin type reload.example: unsigned") {
		t.Errorf("v2 unsigned: serving %s, error %q; want v1 %s serving and the refusal", got, e, sha(v1bin))
	}
	ocitest.Sign(t, v2, key)
	if got, e := serving(v2.String()); got != sha(v2bin) || e != "" {
		t.Errorf("v2 signed: serving %s (%q), want %s", got, e, sha(v2bin))
	}
}

// unreachableSourceConfig is a daemon config with one source (of csi.example) on a registry
// that refuses connections, and the handler directory serving ok.example.
func unreachableSourceConfig(t *testing.T, firstWait time.Duration) (config.Config, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nobody listens there now: connections are refused
	cfg, _ := testDaemonConfig(t)
	source := addr + "/h/csi@sha256:" + strings.Repeat("ab", 32)
	cfg.Handlers.Sources = []string{source}
	cfg.Handlers.Trust.AllowUnsigned = []string{"csi.example"}
	cfg.Handlers.Pull.FirstWait = config.Duration(firstWait)
	cfg.Handlers.Pull.Timeout = config.Duration(time.Second)
	cfg.Handlers.Pull.Retry = config.Duration(100 * time.Millisecond)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg.HandlerDir, "ok.wasm"), testdataModule(t, "ok"), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg, source
}

// TestFirstWaitHoldsOnlyTypesWithoutHandler: while the sources' first pull is awaited (a
// registry that refuses connections, a first wait of an hour), a plugin of a type the handler
// directory serves registers at once, and one of a type nothing serves yet waits, not told no.
func TestFirstWaitHoldsOnlyTypesWithoutHandler(t *testing.T) {
	cfg, source := unreachableSourceConfig(t, time.Hour)
	d := runTestDaemon(t, cfg, nil)
	served := registrationtest.Serve(t, filepath.Join(cfg.SocketDir, "ok.sock"),
		registrationtest.Info{Type: "ok.example", Name: "ok", Versions: []string{"v1"}}, registrationtest.Options{})
	waiting := registrationtest.Serve(t, filepath.Join(cfg.SocketDir, "csi.sock"),
		registrationtest.Info{Type: "csi.example", Name: "csi", Versions: []string{"v1"}}, registrationtest.Options{})
	if n := served.WaitNotification(t, time.Minute); !n.Registered {
		t.Fatalf("a plugin of a type the handler directory serves: told %+v, want registered", n)
	}
	if !d.oci.Pending() {
		t.Fatal("the first wait of an hour is over")
	}
	waitUntil(t, "the csi.example plugin to wait for the sources", func() bool {
		st, ok := d.state.StatusOf(filepath.Join(cfg.SocketDir, "csi.sock"))
		return ok && st.State == state.StateWaitingForHandler && strings.Contains(st.LastError, "still being pulled") &&
			st.PluginType == "csi.example" && st.PluginName == "csi"
	})
	if n := waiting.Notifications(); len(n) != 0 {
		t.Errorf("a plugin whose handler may still come was told %+v", n)
	}
	waitUntil(t, "readiness to name the source it waits for", func() bool {
		err := d.Ready()
		return err != nil && strings.Contains(err.Error(), source+" (unreachable)")
	})
}

// TestFirstWaitCoversARefusedConnection: a registry that refuses connections keeps the first
// wait closed (a plugin is not told "no handler" while its handler may still come), up to
// handlers.pull.firstWait; then such plugins are told no, with a warning naming the source.
func TestFirstWaitCoversARefusedConnection(t *testing.T) {
	cfg, source := unreachableSourceConfig(t, 2*time.Second)
	logs := &logtest.Logs{}
	start := time.Now()
	d := runTestDaemon(t, cfg, slog.New(logs))
	p := registrationtest.Serve(t, filepath.Join(cfg.SocketDir, "csi.sock"),
		registrationtest.Info{Type: "csi.example", Name: "csi", Versions: []string{"v1"}}, registrationtest.Options{})
	n := p.WaitNotification(t, time.Minute)
	select {
	case <-d.oci.Gate():
	default:
		t.Errorf("the plugin was told %+v before the first wait ended", n)
	}
	if n.Registered || !strings.Contains(n.Error, "csi.example") {
		t.Errorf("the plugin of a type nothing serves was told %+v, want no handler for csi.example", n)
	}
	if waited := time.Since(start); waited < 2*time.Second {
		t.Errorf("the gate opened after %s, before handlers.pull.firstWait (2s); source: %+v", waited, d.oci.Sources().Statuses())
	}
	waitUntil(t, "the source's attempt to be reported", func() bool { return d.oci.Sources().Statuses()[0].Reason != "" })
	if st := d.oci.Sources().Statuses()[0]; st.Reason != oci.ReasonUnreachable || st.Refused {
		t.Errorf("source after the wait: %+v", st)
	}
	if got := logs.Matching(slog.LevelWarn, "not serving when the first wait ended"); len(got) != 1 || !strings.Contains(got[0], source) {
		t.Errorf("warnings at the end of the wait: %q", got)
	}
	if err := d.Ready(); err != nil {
		t.Errorf("not ready after the wait: %v", err)
	}
}

// TestEmptyHandlerDirSaysSo: a daemon that starts with an empty handler directory and no
// source (an image volume the API server dropped) warns, and /readyz says it below "ok"; a
// file that is refused is counted as not serving, and a plugin waiting for its type is named.
func TestEmptyHandlerDirSaysSo(t *testing.T) {
	cfg, _ := testDaemonConfig(t)
	logs := &logtest.Logs{}
	d := runTestDaemon(t, cfg, slog.New(logs))
	waitUntil(t, "ready", func() bool { return d.Ready() == nil })
	waitUntil(t, "the warnings", func() bool {
		return len(logs.Matching(slog.LevelWarn, "the handler directory holds no handler file")) == 1 &&
			len(logs.Matching(slog.LevelWarn, "no handler serves any plugin type")) == 1
	})
	if got := d.problems(); len(got) != 1 || !strings.Contains(got[0], "the handler directory "+cfg.HandlerDir+" holds no handler file") {
		t.Errorf("problems: %q", got)
	}

	if err := os.WriteFile(filepath.Join(cfg.HandlerDir, "bad.wasm"), []byte("not wasm"), 0o644); err != nil {
		t.Fatal(err)
	}
	registrationtest.Serve(t, filepath.Join(cfg.SocketDir, "a.sock"),
		registrationtest.Info{Type: "csi.example", Name: "a", Versions: []string{"v1"}}, registrationtest.Options{})
	want := []string{"1 handler source or file not serving: bad.wasm (invalid)", "no handler for type csi.example while 1 plugin waits"}
	waitUntil(t, "the problems to name the refused file and the waiting plugin", func() bool {
		return slices.Equal(d.problems(), want)
	})
}

// TestKeylessSource: a source signed keyless (a CI workflow's certificate, recorded by the
// transparency log) is served for the plugin types its identity may sign, verified offline
// against the operator's trusted root file; one signed by another identity is refused.
func TestKeylessSource(t *testing.T) {
	reg := ocitest.Start(t)
	tmp := t.TempDir()
	sig := ocitest.NewSigstore(t, tmp)
	const issuer = "https://token.actions.githubusercontent.com"
	const release = "https://github.com/example/handlers/.github/workflows/release.yml@refs/heads/main"
	good := ocitest.PushArtifact(t, reg.Ref("h/ok:v1"), testdataModule(t, "ok")) // ok.example
	sig.SignKeyless(t, good, release, issuer)
	stranger := ocitest.PushArtifact(t, reg.Ref("h/echo:v1"), testdataModule(t, "echo")) // echo.example
	sig.SignKeyless(t, stranger, "https://github.com/someone/else/.github/workflows/x.yml@refs/heads/main", issuer)

	cfg, _ := testDaemonConfig(t)
	cfg.Handlers.Sources = []string{good.String(), stranger.String()}
	cfg.Handlers.Trust.Identities = []config.TrustIdentity{{
		Issuer: issuer, SubjectRegExp: `^https://github\.com/example/handlers/`, TrustedRoot: sig.TrustedRoot,
		PluginTypes: []string{"ok.example", "echo.example"},
	}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	d := runTestDaemon(t, cfg, nil)
	<-d.oci.Gate()
	waitUntil(t, "ok.example served", func() bool { return d.registry.Has("ok.example") })
	if d.registry.Has("echo.example") {
		t.Error("echo.example, signed by another identity, is served")
	}
	for _, st := range d.oci.Sources().Statuses() {
		switch st.Ref {
		case good.String():
			if len(st.SignedBy) != 1 || !strings.Contains(st.SignedBy[0], "identity ~^https://github") {
				t.Errorf("keyless source signed by %v", st.SignedBy)
			}
		case stranger.String():
			if st.Reason != oci.ReasonPolicy || !strings.Contains(st.Error, "no signature verifies") {
				t.Errorf("another identity's source: %+v", st)
			}
		}
	}
}

// TestRefusedSourceDoesNotHoldReadiness: a source refused for what it is (content that does
// not match its digest, a digest the registry does not have, a module unsigned where a
// signature is required) cannot serve, so the first wait (an hour here) does not wait for it:
// the daemon is ready once the good source serves, and says why each refused one does not.
func TestRefusedSourceDoesNotHoldReadiness(t *testing.T) {
	reg := ocitest.Start(t)
	key := ocitest.NewKey(t, t.TempDir(), "trusted")
	good := ocitest.PushArtifact(t, reg.Ref("h/ok:v1"), testdataModule(t, "ok")) // ok.example
	ocitest.Sign(t, good, key)
	echo := testdataModule(t, "echo")
	tampered := ocitest.PushArtifact(t, reg.Ref("h/echo:v1"), echo) // echo.example
	ocitest.Sign(t, tampered, key)
	reg.Tamper(func(path string, b []byte) []byte {
		if bytes.Equal(b, echo) {
			return append(bytes.Clone(b), 0)
		}
		return b
	})
	missing := reg.Ref("h/kv@sha256:" + strings.Repeat("ab", 32))
	unsigned := ocitest.PushArtifact(t, reg.Ref("h/min:v1"), testdataModule(t, "min")) // min.example

	cfg, _ := testDaemonConfig(t)
	cfg.Handlers.Sources = []string{good.String(), tampered.String(), missing, unsigned.String()}
	cfg.Handlers.Trust = config.TrustConfig{Keys: []config.TrustKey{{PublicKey: key.PublicPEM,
		PluginTypes: []string{"ok.example", "echo.example", "kv.example", "min.example"}}}}
	cfg.Handlers.Pull.FirstWait = config.Duration(time.Hour)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	d := runTestDaemon(t, cfg, nil)
	waitUntil(t, "ready", func() bool { return d.Ready() == nil })
	t.Logf("ready %s after the start, with a first wait of an hour", time.Since(began).Round(time.Millisecond))
	if !d.registry.Has("ok.example") {
		t.Errorf("ready, but the good source's ok.example is not served")
	}
	want := map[string]string{tampered.String(): oci.ReasonIntegrity, missing: oci.ReasonNotFound, unsigned.String(): oci.ReasonPolicy}
	waitUntil(t, "the refused sources shown with their reasons", func() bool {
		problems := strings.Join(d.problems(), "\n")
		for ref, reason := range want {
			if !strings.Contains(problems, ref+" ("+reason+")") {
				return false
			}
		}
		return true
	})
	for _, hs := range d.oci.Statuses() {
		if reason, ok := want[hs.File]; ok && (hs.Serving || hs.Refusal != reason || hs.LastError == "") {
			t.Errorf("source %s: serving %v, refusal %q, error %q; want refused for %s, with the error", hs.File, hs.Serving, hs.Refusal, hs.LastError, reason)
		}
	}
}
