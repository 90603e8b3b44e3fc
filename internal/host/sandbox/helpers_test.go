package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/testwait"
)

// logs captures log records for assertions (and shows them with -v).
type logs struct {
	mu   sync.Mutex
	recs []slog.Record
	t    testing.TB
}

func (l *logs) Enabled(context.Context, slog.Level) bool { return true }
func (l *logs) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logs) WithGroup(string) slog.Handler            { return l }
func (l *logs) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.recs = append(l.recs, r.Clone())
	if os.Getenv("HOSTLOG") != "" {
		fmt.Fprintln(os.Stderr, r.Time.Format("15:04:05.000"), r.Level, r.Message, attrString(r))
	}
	l.mu.Unlock()
	return nil
}

// find returns the attributes of the first record whose message contains msg, as a map.
func (l *logs) find(msg string) (map[string]string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.recs {
		if strings.Contains(r.Message, msg) {
			attrs := map[string]string{"level": r.Level.String()}
			r.Attrs(func(a slog.Attr) bool {
				attrs[a.Key] = a.Value.String()
				return true
			})
			return attrs, true
		}
	}
	return nil, false
}

func (l *logs) count(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.recs {
		if strings.Contains(r.Message, msg) {
			n++
		}
	}
	return n
}

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
	l := &logs{t: t}
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
// (host.Config's withDefaults; the grants are taken as they are).
func withDefaults(cfg Config) Config {
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = 5 * time.Second // host.DefaultCallTimeout
	}
	if cfg.MemoryLimit == 0 {
		cfg.MemoryLimit = 64 << 20 // host.DefaultMemoryLimit
	}
	if cfg.PoolSize == 0 {
		cfg.PoolSize = runtime.NumCPU()
	}
	cfg.Limits = cfg.Limits.OrDefaults()
	if cfg.Limits.GuestThreads == 0 {
		cfg.Limits.GuestThreads = max(runtime.NumCPU()-1, 1) // host.DefaultGuestThreads
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
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

func attrString(r slog.Record) string {
	var b strings.Builder
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	return b.String()
}
