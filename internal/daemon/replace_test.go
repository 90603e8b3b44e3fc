package daemon

// Issue 10 end to end: a handler replaced in the ways operators replace files (install, cp,
// mv over it, rsync, an editor's backup-and-rename, a rename to a versioned name, the directory
// deleted and made again), in a running daemon with a plugin registered through it. The host's tests (internal/host/replace_test.go)
// go through every pattern; this one checks what an operator would: the plugin stays
// registered (never deregistered and registered again), nothing is logged as an error, and
// `wasmhost handlers` shows the new revision serving.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
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

func TestReplacingAHandlerKeepsItsPluginsRegistered(t *testing.T) {
	for _, name := range []string{"install", "cp", "mv", "rm", "mkdir"} {
		if _, err := exec.LookPath(name); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is not installed", name)
			}
			t.Skipf("%s is not installed", name)
		}
	}
	cfg, base := testDaemonConfig(t)
	src, sums := writeFixtures(t, base, "reload_v1", "reload_v2")
	sh := func(dir, name string, args ...string) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	sh(cfg.HandlerDir, "install", "-m", "0644", src["reload_v1"], "reload.wasm")
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}

	logs := &logtest.Logs{}
	d := runTestDaemon(t, cfg, slog.New(logs))
	p := registrationtest.Serve(t, filepath.Join(cfg.SocketDir, "b.sock"),
		registrationtest.Info{Type: "reload.example", Name: "b", Versions: []string{"v1"}}, registrationtest.Options{})
	if n := p.WaitNotification(t, time.Minute); !n.Registered {
		t.Fatalf("not registered: %+v", n)
	}
	// The plugin is told before the state records it: read the time once it is there.
	waitUntil(t, "the registration in the state", func() bool { return plugin(d, p.Path()).Registered })
	registeredAt := plugin(d, p.Path()).RegisteredAt

	serving := func(sum string) func() bool {
		return func() bool {
			hs := d.State().Handlers()
			return len(hs) == 1 && hs[0].Serving && hs[0].SHA256 == sum && hs[0].GoneSince.IsZero() && hs[0].LastError == ""
		}
	}
	steps := []struct {
		name string
		do   func()
		sum  string
	}{
		{"install -m 0644 a new version", func() { sh(cfg.HandlerDir, "install", "-m", "0644", src["reload_v2"], "reload.wasm") }, sums["reload_v2"]},
		{"install -m 0644 the same bytes", func() { sh(cfg.HandlerDir, "install", "-m", "0644", src["reload_v2"], "reload.wasm") }, sums["reload_v2"]},
		{"cp over it", func() { sh(cfg.HandlerDir, "cp", src["reload_v1"], "reload.wasm") }, sums["reload_v1"]},
		{"rm -rf the directory, make it again, install", func() {
			sh(base, "rm", "-rf", cfg.HandlerDir)
			sh(base, "mkdir", "-m", "0700", cfg.HandlerDir)
			sh(cfg.HandlerDir, "install", "-m", "0644", src["reload_v2"], "reload.wasm")
		}, sums["reload_v2"]},
		{"cp to a temporary name, mv over it", func() {
			sh(cfg.HandlerDir, "cp", src["reload_v1"], "reload.wasm.new")
			sh(cfg.HandlerDir, "mv", "reload.wasm.new", "reload.wasm")
		}, sums["reload_v1"]},
		{"an editor: backup by rename, write anew", func() {
			sh(cfg.HandlerDir, "mv", "reload.wasm", "reload.wasm~")
			sh(cfg.HandlerDir, "cp", src["reload_v2"], "reload.wasm")
			sh(cfg.HandlerDir, "rm", "reload.wasm~")
		}, sums["reload_v2"]},
		{"mv to a versioned name", func() { sh(cfg.HandlerDir, "mv", "reload.wasm", "reload-v2.wasm") }, sums["reload_v2"]},
	}
	if _, err := exec.LookPath("rsync"); err == nil || os.Getenv("CI") != "" {
		steps = append(steps, struct {
			name string
			do   func()
			sum  string
		}{"rsync over it", func() { sh(cfg.HandlerDir, "rsync", src["reload_v1"], "reload-v2.wasm") }, sums["reload_v1"]})
	}
	for _, s := range steps {
		s.do()
		waitUntil(t, s.name+": the new revision to serve", serving(s.sum))
		if notes := p.Notifications(); len(notes) != 1 {
			t.Errorf("%s: the plugin was told %+v; want its one registration", s.name, notes)
		}
		if v := plugin(d, p.Path()); !v.Registered || !v.RegisteredAt.Equal(registeredAt) {
			t.Errorf("%s: the plugin is %+v; want registered since %v", s.name, v, registeredAt)
		}
	}
	for _, bad := range append(logs.Matching(slog.LevelError, ""), logs.Matching(slog.LevelDebug, "deregistered")...) {
		t.Errorf("logged: %s", bad)
	}
}

func plugin(d *Daemon, socket string) state.PluginView {
	for _, v := range d.State().Plugins() {
		if v.Path == socket {
			return v
		}
	}
	return state.PluginView{}
}

// testDaemonConfig returns the default config with its directories (mode 0700) in a short
// temporary directory of the test, which it returns too, and no metrics listener.
func testDaemonConfig(t testing.TB) (config.Config, string) {
	t.Helper()
	base, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	cfg := config.Default()
	cfg.SocketDir, cfg.HandlerDir, cfg.StateDir = filepath.Join(base, "s"), filepath.Join(base, "h"), filepath.Join(base, "st")
	for _, dir := range []string{cfg.SocketDir, cfg.HandlerDir, cfg.StateDir} {
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	cfg.Metrics.Listen = "off"
	return cfg, base
}

// runTestDaemon runs a daemon of cfg until the test ends, and waits for Run to return then.
func runTestDaemon(t *testing.T, cfg config.Config, log *slog.Logger) *Daemon {
	t.Helper()
	d, _ := startTestDaemon(t, cfg, log)
	return d
}

// startTestDaemon is runTestDaemon; exited is closed if Run returns before the test ends.
func startTestDaemon(t *testing.T, cfg config.Config, log *slog.Logger) (d *Daemon, exited <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d, err := New(ctx, cfg, log, "test")
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	var runErr error
	go func() {
		defer close(done)
		runErr = d.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		if runErr != nil {
			t.Errorf("Run: %v", runErr)
		}
	})
	return d, done
}

// waitUntil waits until cond holds (testwait.Until).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, what, cond)
}

// TestTypeFromOnePlace: a plugin type served by a handler pulled from a registry stays with it
// when a file of the handler directory declares it too, while the daemon runs and after a
// restart (the pulled handlers load first), and the file is refused the same way both times.
func TestTypeFromOnePlace(t *testing.T) {
	reg := ocitest.Start(t)
	key := ocitest.NewKey(t, t.TempDir(), "trusted")
	ref := ocitest.PushArtifact(t, reg.Ref("h/ok:v1"), testdataModule(t, "ok")) // ok.example
	ocitest.Sign(t, ref, key)

	cfg, _ := testDaemonConfig(t)
	cfg.Handlers.Sources = []string{ref.String()}
	cfg.Handlers.Trust = config.TrustConfig{Keys: []config.TrustKey{{PublicKey: key.PublicPEM, PluginTypes: []string{"ok.example"}}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(cfg.HandlerDir, "a-ok.wasm")
	refused := func(d *Daemon) func() bool {
		return func() bool {
			for _, h := range d.State().Handlers() {
				if h.File == file {
					return !h.Serving && strings.Contains(h.LastError, "plugin type ok.example is already handled by "+filepath.Join(cfg.StateDir, "handlers-oci"))
				}
			}
			return false
		}
	}

	t.Run("while it runs", func(t *testing.T) {
		d := runTestDaemon(t, cfg, nil)
		waitUntil(t, "the pulled handler to serve", func() bool { return d.registry.Has("ok.example") })
		if err := os.WriteFile(file, testdataModule(t, "ok"), 0o644); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "the file of the handler directory to be refused", refused(d))
	})
	t.Run("after a restart", func(t *testing.T) {
		reg.SetDown(true)
		d := runTestDaemon(t, cfg, nil)
		waitUntil(t, "the file of the handler directory to be refused", refused(d))
		if !d.registry.Has("ok.example") {
			t.Error("ok.example is not served")
		}
	})
}

// writeFixtures writes the testdata modules named to dir as <name>.wasm, mode 0644 (a
// checkout may make the fixtures group-writable; tools keep the mode of what they copy), and
// returns their paths and sha256 by name.
func writeFixtures(t *testing.T, dir string, names ...string) (paths, sums map[string]string) {
	t.Helper()
	paths, sums = map[string]string{}, map[string]string{}
	for _, v := range names {
		b := testdataModule(t, v)
		p := filepath.Join(dir, v+".wasm")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		paths[v], sums[v] = p, hex.EncodeToString(sum[:])
	}
	return paths, sums
}

// TestOwnershipAtStartFromTheRecord (issue 22): a plugin type the handler directory served
// before a restart stays with its file, whatever source newly declares it and however fast that
// source is pulled: the revision store's record decides before any source or file loads.
func TestOwnershipAtStartFromTheRecord(t *testing.T) {
	reg := ocitest.Start(t)
	key := ocitest.NewKey(t, t.TempDir(), "trusted")
	ref := ocitest.PushArtifact(t, reg.Ref("h/reload:v2"), testdataModule(t, "reload_v2")) // reload.example
	ocitest.Sign(t, ref, key)

	cfg, _ := testDaemonConfig(t)
	file := filepath.Join(cfg.HandlerDir, "reload.wasm")
	v1 := testdataModule(t, "reload_v1")
	if err := os.WriteFile(file, v1, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	// The directory serves the type: recorded.
	func() {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		d, err := New(ctx, cfg, nil, "test")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx) }()
		waitUntil(t, "the file to serve", func() bool { return d.registry.Has("reload.example") })
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}()

	// A signed source declaring it is configured: at every restart, the file keeps it and the
	// source is refused naming it, however the pull and the directory's load are ordered.
	cfg.Handlers.Sources = []string{ref.String()}
	cfg.Handlers.Trust = config.TrustConfig{Keys: []config.TrustKey{{PublicKey: key.PublicPEM, PluginTypes: []string{"reload.example"}}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	// Before the directory is loaded, a pulled module declaring the type is not admitted: the
	// admission waits for the directory (here, until the test's own deadline).
	func() {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		d, err := New(ctx, cfg, nil, "test")
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = d.host.Close(ctx)
			_ = d.oci.Close(ctx)
			d.liveness.Close()
		}()
		actx, acancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer acancel()
		types, err := d.oci.PluginTypes(actx, ref.String(), testdataModule(t, "reload_v2"))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("admitted before the handler directory was loaded: %v, %v", types, err)
		}
	}()

	for i := range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		d, err := New(ctx, cfg, nil, "test")
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx) }()
		<-d.oci.Gate()
		st := d.oci.Sources().Statuses()[0]
		h, _ := d.State().HandlerOf("reload.example")
		if h.SHA256 != oci.SHA256Hex(v1) || st.Pinned != "" || !strings.Contains(st.Error, "served by "+file+" of the handler directory") {
			t.Errorf("restart %d: reload.example served by %s (%s), want the file's %s; source: %+v", i, h.File, h.SHA256, oci.SHA256Hex(v1), st)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
