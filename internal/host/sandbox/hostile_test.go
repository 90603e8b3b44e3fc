package sandbox

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/host/sandbox/sandboxtest"
	"github.com/wasmhost/wasmhost/internal/host/wasmbin"
	"github.com/wasmhost/wasmhost/internal/limits"
	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/testwait"
)

// Hostile modules (issue 9) as the sandbox meets them: compile bombs, floods of log lines,
// published keys, plugin calls and key-value writes; the host's tests drop hostile files into a
// running host's handler directory (internal/host, hostile_test.go). Both build their hostile
// modules with sandboxtest.

// TestAbandonedCompileOutlivesClose: a host closed while an abandoned compile runs returns at
// once, and the compile's end (which closes the compilation cache) does not crash.
func TestAbandonedCompileOutlivesClose(t *testing.T) {
	dir := sandboxtest.TempDir(t)
	path := filepath.Join(dir, "slow.wasm")
	sandboxtest.WriteFile(t, path, sandboxtest.BombModule(6000, 1, 0x03))
	h, err := New(context.Background(), withDefaults(Config{Limits: limits.Handler{CompileTimeout: limits.Duration(50 * time.Millisecond), MaxNesting: 1 << 30}}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loadFile(h, context.Background(), path); RefusalReason(err) != RefusedCompileTimeout {
		t.Fatalf("LoadFile: %v", err)
	}
	if n, _ := h.AbandonedCompiles(); n != 1 {
		t.Fatalf("%d abandoned compiles running, want 1", n)
	}
	if err := h.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the abandoned compile to end", func() bool {
		n, _ := h.AbandonedCompiles()
		return n == 0
	})
}

func TestCompileBusy(t *testing.T) {
	h, _ := newStrictSandbox(t, Config{Limits: limits.Handler{CompileTimeout: limits.Duration(50 * time.Millisecond), MaxNesting: 1 << 30}})
	dir := sandboxtest.TempDir(t)
	path := filepath.Join(dir, "slow.wasm")
	sandboxtest.WriteFile(t, path, sandboxtest.BombModule(6000, 1, 0x03))
	if _, err := loadFile(h, context.Background(), path); RefusalReason(err) != RefusedCompileTimeout {
		t.Fatalf("LoadFile: %v", err)
	}
	_, err := loadFile(h, context.Background(), fixture("ok"))
	if n, _ := h.AbandonedCompiles(); n == 1 { // the first compile may have ended meanwhile
		sandboxtest.ErrContains(t, err, ErrBadModule, "abandoned compiles of other files are still running (their bound is a constant")
	}
	testwait.Until(t, "the abandoned compile to end", func() bool {
		n, _ := h.AbandonedCompiles()
		return n == 0
	})
	mustLoad(t, h, "ok")
}

func TestStructureOfShippedHandlers(t *testing.T) {
	files, _ := filepath.Glob("../../../handlers-wasm/*.wasm")
	files = append(files, fixture("ok"), fixture("kv"), fixture("deep"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		info, bad := wasmbin.Check(b, (&Config{Limits: limits.Defaults()}).structure())
		t.Logf("%s: %+v", f, info)
		if bad != "" {
			t.Errorf("%s refused with the default limits: %s", f, bad)
		}
	}
}

func TestLogFlood(t *testing.T) {
	h, lg := newTestSandbox(t, Config{})
	m := mustLoad(t, h, "logflood")
	err := m.ValidatePlugin(context.Background(), sandboxtest.Info("logflood.example", "p"))
	sandboxtest.ErrContains(t, err, ErrBudget, "testdata/logflood.wasm", "logged more than 1000 lines in one call", "handlers.limits.logLinesPerCall")
	if !errors.Is(err, ErrTrap) {
		t.Errorf("a budget error does not match ErrTrap: %v", err)
	}
	if n := lg.Count(""); n > 1100 {
		t.Errorf("%d records logged", n)
	}
	_, err = m.RegisterPlugin(context.Background(), sandboxtest.Info("logflood.example", "p"))
	sandboxtest.ErrContains(t, err, ErrBudget, "logged more than 65536 bytes", "handlers.limits.logBytesPerCall")
	if err := m.DeRegisterPlugin(context.Background(), sandboxtest.Info("logflood.example", "p")); err != nil {
		t.Errorf("deregister after the floods: %v", err)
	}
}

func TestPublishFlood(t *testing.T) {
	h, _ := newTestSandbox(t, Config{})
	m := mustLoad(t, h, "publishflood")
	pub, err := m.RegisterPlugin(context.Background(), sandboxtest.Info("publishflood.example", "p"))
	if err != nil {
		t.Fatal(err)
	}
	size := 0
	for k, v := range pub {
		size += len(k) + len(v)
	}
	if size > int(limits.Defaults().PublishBytes) || len(pub) < 10 {
		t.Errorf("published %d keys, %d bytes; want at most %d bytes", len(pub), size, limits.Defaults().PublishBytes)
	}
}

func TestPluginCallFlood(t *testing.T) {
	h, _ := newTestSandbox(t, Config{
		PluginCaller: fakeCaller{err: errors.New("no")},
		Grants:       map[string][]string{"pcflood.example": {abi.CapabilityPluginCall}},
	})
	m := mustLoad(t, h, "pcflood")
	err := m.ValidatePlugin(context.Background(), registration.PluginInfo{Type: "pcflood.example", Name: "p", Endpoint: "/x.sock"})
	sandboxtest.ErrContains(t, err, ErrBudget, "made more than 16 plugin_call calls", "handlers.limits.pluginCallsPerCall")
}

func TestKVKeysPerFile(t *testing.T) {
	h, _ := newTestSandbox(t, Config{Limits: limits.Handler{KVKeysPerHandler: 5}})
	m := mustLoad(t, h, "kvfill")
	for _, typ := range []string{"kvfill.a", "kvfill.b"} {
		if _, err := m.RegisterPlugin(context.Background(), sandboxtest.Info(typ, "p")); err != nil {
			t.Fatal(err)
		}
	}
	if a, b := len(h.Store("kvfill.a")), len(h.Store("kvfill.b")); a != 5 || b != 0 {
		t.Errorf("stores of %d and %d keys, want 5 and 0", a, b)
	}
}

// TestDescribeRefusesCompileBomb: the tools' Describe (handler inspect's) checks the structure
// before compiling too.
func TestDescribeRefusesCompileBomb(t *testing.T) {
	h, _ := newTestSandbox(t, Config{})
	_, err := h.Describe(context.Background(), "bomb.wasm", sandboxtest.BombModule(100_000, 1, 0x02))
	sandboxtest.ErrContains(t, err, ErrBadModule, "bomb.wasm", "not compiled: function 0: blocks nested more than 4096 deep")
}

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, café":                 "plain text, café",
		"a tab\tsplits a log line":         `a tab\tsplits a log line`,
		"\x1b[2Jcleared":                   `\x1b[2Jcleared`,
		"over\rwritten\x08":                `over\rwritten\x08`,
		"abc\u202egnp.exe":                 `abc\u202egnp.exe`,
		"bad \xff utf-8, caf\u00e9 \u0085": `bad \xff utf-8, café \u0085`,
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %q, want %q", in, got, want)
		}
	}
}

// withFuncNames returns module bin with a name section that names functions 0 to n-1, each
// name size bytes long.
func withFuncNames(bin []byte, n, size int) []byte {
	uleb := func(b []byte, v int) []byte {
		for {
			c := byte(v & 0x7f)
			if v >>= 7; v != 0 {
				c |= 0x80
			}
			b = append(b, c)
			if v == 0 {
				return b
			}
		}
	}
	var names []byte
	names = uleb(names, n)
	for i := range n {
		names = uleb(names, i)
		names = uleb(names, size)
		names = append(names, bytes.Repeat([]byte{'f'}, size)...)
	}
	body := uleb(nil, len("name"))
	body = append(body, "name"...)
	body = append(body, 1) // function names
	body = uleb(body, len(names))
	body = append(body, names...)
	out := append(bytes.Clone(bin), 0) // a custom section
	out = uleb(out, len(body))
	return append(out, body...)
}

// A trap's text holds a stack trace named from the module's name section: with names of
// 300,000 bytes it is cut to maxErrorText where it is made, for the handler's last error,
// the socket's and the log.
func TestTrapTextBounded(t *testing.T) {
	bin, err := os.ReadFile(fixture("trap"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(sandboxtest.TempDir(t), "longnames.wasm")
	sandboxtest.WriteFile(t, path, withFuncNames(bin, 6, 300_000))
	sb, _ := newTestSandbox(t, Config{})
	m, err := loadFile(sb, context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	err = m.ValidatePlugin(context.Background(), sandboxtest.Info("trap.example", "p"))
	sandboxtest.ErrContains(t, err, ErrTrap, "unreachable", "more bytes)")
	if n := len(err.Error()); n > maxErrorText {
		t.Errorf("the trap's error is %d bytes long, over %d", n, maxErrorText)
	}
	if last := m.stats.last.Load(); last == nil || len(last.Msg) > maxErrorText {
		t.Errorf("the handler's last error is not bounded: %v", last)
	}
}
