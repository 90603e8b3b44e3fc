package sandbox

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/host/sandbox/sandboxtest"
	"github.com/wasmhost/wasmhost/internal/logtest"
	"github.com/wasmhost/wasmhost/internal/registration"
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

// checkOK asserts that a well-behaved module still serves.
func checkOK(t testing.TB, m *Module) {
	t.Helper()
	if err := m.ValidatePlugin(context.Background(), sandboxtest.Info("ok.example", "fine")); err != nil {
		t.Errorf("the ok handler failed after a hostile call: %v", err)
	}
}
