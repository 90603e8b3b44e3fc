package sandbox

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/logtest"
	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/testwait"
)

// logs captures log records for assertions (shown with $WASMHOST_TESTLOG).
type logs = logtest.Logs

// newTestSandbox returns a sandbox with test-friendly defaults and a log capture; the test closes
// it. A sandbox that loads the testdata fixtures in place allows insecure files when the
// checkout made them group-writable (umask 002); newStrictSandbox never does.
func newTestSandbox(t testing.TB, cfg Config) (*Sandbox, *logs) {
	t.Helper()
	if fixturesShared() {
		cfg.AllowInsecure = true
	}
	return newStrictSandbox(t, cfg)
}

func fixturesShared() bool {
	fi, err := os.Stat(fixture("ok"))
	return err != nil || CheckNotShared("", "", fi) != nil
}

// newStrictSandbox returns a sandbox for cfg with the tests' defaults (a call timeout of 2 s,
// 2 instances, the log captured) and the host's (withDefaults).
func newStrictSandbox(t testing.TB, cfg Config) (*Sandbox, *logs) {
	t.Helper()
	l := &logs{}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(l)
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = 2 * time.Second
	}
	if cfg.PoolSize == 0 {
		cfg.PoolSize = 2
	}
	cfg = withDefaults(cfg)
	sb, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := sb.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return sb, l
}

// withDefaults returns cfg with the defaults host.New gives the fields of a sandbox
// (Config.WithDefaults, which host.New applies).
func withDefaults(cfg Config) Config {
	cfg, err := cfg.WithDefaults()
	if err != nil {
		panic(err)
	}
	return cfg
}

// loadFile loads the module at path as the host's LoadFile does, as a handler of its own whose
// calls no policy refuses (admitAll): the sandbox's tests call it without the policy layer.
func loadFile(sb *Sandbox, ctx context.Context, path string) (*Module, error) {
	if !sb.BeginWork() {
		return nil, ErrClosed
	}
	defer sb.EndWork()
	bin, err := sb.ReadHandlerFile(path)
	if err != nil {
		return nil, err
	}
	m, err := sb.Load(ctx, path, bin, new(Stats))
	if err != nil {
		return nil, err
	}
	m.SetOwn(direct{m})
	return m, nil
}

// direct serves a module's own calls with admitAll as their policy.
type direct struct{ m *Module }

func (d direct) Serve(ctx context.Context, fn int, pluginType string, p registration.PluginInfo) (map[string]string, error) {
	return d.m.Serve(ctx, fn, pluginType, p, admitAll{})
}

// admitAll is a policy that lets every call run and hears nothing.
type admitAll struct{}

func (admitAll) Admit(string) (bool, error)                        { return false, nil }
func (admitAll) Refused(error)                                     {}
func (admitAll) Outcome(int, registration.PluginInfo, bool, error) {}

// fixture is a module of the host's testdata (internal/host/testdata).
func fixture(name string) string { return filepath.Join("..", "testdata", name+".wasm") }

func mustLoad(t testing.TB, sb *Sandbox, name string) *Module {
	t.Helper()
	m, err := loadFile(sb, context.Background(), fixture(name))
	if err != nil {
		t.Fatalf("LoadFile(%s): %v", name, err)
	}
	return m
}

func tempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func info(pluginType, name string) registration.PluginInfo {
	return registration.PluginInfo{Type: pluginType, Name: name}
}

// checkOK asserts that a well-behaved module still serves.
func checkOK(t testing.TB, m *Module) {
	t.Helper()
	if err := m.ValidatePlugin(context.Background(), info("ok.example", "fine")); err != nil {
		t.Errorf("the ok handler failed after a hostile call: %v", err)
	}
}

// waitFor waits until cond holds (testwait.Until).
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, what, cond)
}

func errContains(t testing.TB, err error, sentinel error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v with %q", sentinel, parts)
	}
	if sentinel != nil && !errors.Is(err, sentinel) {
		t.Errorf("error %q does not match %v", err, sentinel)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not contain %q", err, p)
		}
	}
}

func copyFile(t testing.TB, src, dst string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dst, mode); err != nil {
		t.Fatal(err)
	}
}
