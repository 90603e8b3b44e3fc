package host

// Hostile handler files (issue 9): each is dropped into the handler directory of a running
// host that already serves a good handler, and must leave it up and ready, the good handler
// serving, a good handler dropped in afterwards loading, and a message that names the file and
// the fault. Speed is measured in benchmarks (bench_test.go), not asserted here.

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/host/policy"
	"github.com/wasmhost/wasmhost/internal/host/sandbox"
	"github.com/wasmhost/wasmhost/internal/host/sandbox/sandboxtest"
	"github.com/wasmhost/wasmhost/internal/host/wasmbin"
	"github.com/wasmhost/wasmhost/internal/limits"
	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/testwait"
)

// runningHost runs a host on a fresh handler directory serving ok.wasm (ok.example).
func runningHost(t *testing.T, cfg Config) (h *Host, dir string, lg *logs, done <-chan error) {
	t.Helper()
	dir = sandboxtest.TempDir(t)
	sandboxtest.CopyFile(t, fixture("ok"), filepath.Join(dir, "ok.wasm"), 0o644)
	cfg.HandlerDir = dir
	h, lg = newStrictHost(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	go func() { ch <- h.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-ch; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-h.Ready():
	case err := <-ch:
		t.Fatalf("Run returned before ready: %v", err)
	}
	handlerFor(t, h.Registry(), "ok.example")
	return h, dir, lg, ch
}

// stillFine asserts what every hostile case must leave: Run running, the host ready, ok.example
// served, and a good handler dropped in afterwards loaded.
func stillFine(t *testing.T, h *Host, dir string, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("Run returned: %v", err)
	default:
	}
	select {
	case <-h.Ready():
	default:
		t.Error("the host is not ready")
	}
	okh, _ := h.Registry().Get("ok.example")
	if okh == nil {
		t.Fatal("ok.example left the registry")
	}
	if err := okh.ValidatePlugin(context.Background(), sandboxtest.Info("ok.example", "p")); err != nil {
		t.Errorf("ok.example after the hostile file: %v", err)
	}
	installFile(t, fixture("echo"), filepath.Join(dir, "echo.wasm"))
	handlerFor(t, h.Registry(), "echo.example")
}

// errorOf waits for the handler file's status to carry an error, and returns it.
func errorOf(t *testing.T, h *Host, path string) HandlerStatus {
	t.Helper()
	var s HandlerStatus
	testwait.Until(t, "an error for "+path, func() bool {
		var ok bool
		s, ok = status(h, path)
		return ok && s.LastError != ""
	})
	return s
}

func TestHostileFiles(t *testing.T) {
	tests := []struct {
		name   string
		cfg    Config
		drop   func(t *testing.T, path string)
		reason string
		fault  []string
	}{
		{"fifo", Config{}, func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o644); err != nil {
				t.Fatal(err)
			}
		}, sandbox.RefusedNotRegular, []string{"not a regular file (a FIFO)"}},
		{"socket", Config{}, func(t *testing.T, path string) {
			l, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
		}, sandbox.RefusedNotRegular, []string{"not a regular file (a socket)"}},
		{"directory", Config{}, func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o755); err != nil {
				t.Fatal(err)
			}
		}, sandbox.RefusedNotRegular, []string{"not a regular file (a directory)"}},
		{"compile-bomb", Config{}, func(t *testing.T, path string) {
			sandboxtest.WriteFile(t, path, sandboxtest.BombModule(100_000, 1, 0x02)) // the 300 KB, 82 s to compile
		}, sandbox.RefusedStructure, []string{"refused before compiling", "function 0: blocks nested more than 4096 deep (handlers.limits.maxNesting)"}},
		{"compile-bomb-spread", Config{}, func(t *testing.T, path string) {
			sandboxtest.WriteFile(t, path, sandboxtest.BombModule(4000, 40, 0x03)) // each under maxNesting, 13 s together
		}, sandbox.RefusedStructure, []string{"refused before compiling", "over the limit of 50000000 (a constant"}},
		{"locals", Config{Limits: limits.Handler{MaxLocals: 1000}}, func(t *testing.T, path string) {
			b := append([]byte(nil), wasmbin.Header...)
			b = append(b, 1, 4, 1, 0x60, 0, 0, 3, 2, 1, 0)
			b = append(b, 10, 8, 1, 6, 1, 0x80, 0x89, 0x7a, 0x7f, 0x0b) // 2,000,000 i32 locals
			sandboxtest.WriteFile(t, path, b)
		}, sandbox.RefusedStructure, []string{"more than 1000 locals (handlers.limits.maxLocals)"}},
		{"big-table", Config{}, func(t *testing.T, path string) {
			sandboxtest.CopyFile(t, fixture("bigtable"), path, 0o644)
		}, sandbox.RefusedStructure, []string{"tables of 100000000 elements, over the limit of 200000 (handlers.limits.maxTableElements)"}},
		{"table-grow", Config{}, func(t *testing.T, path string) {
			sandboxtest.CopyFile(t, fixture("tablegrow"), path, 0o644)
		}, sandbox.RefusedStructure, []string{"grows table 0, which declares no maximum"}},
		{"globals", Config{}, func(t *testing.T, path string) {
			sandboxtest.WriteFile(t, path, sandboxtest.ManyEntries(6, 5_000_000, []byte{0x7f, 0, 0x41, 0, 0x0b})) // 25 MB, 540 MB to compile
		}, sandbox.RefusedStructure, []string{"global section of 5000000 entries, over the limit of 100000 (handlers.limits.maxEntries)"}},
		{"element-segment", Config{}, func(t *testing.T, path string) {
			sandboxtest.WriteFile(t, path, sandboxtest.ManyEntries(9, 5_000_000, nil)) // 5 MB, 343 MB to compile
		}, sandbox.RefusedStructure, []string{"element segments of 5000000 entries, over the limit of 200000 (handlers.limits.maxTableElements)"}},
		{"names", Config{}, func(t *testing.T, path string) {
			sandboxtest.WriteFile(t, path, sandboxtest.ManyEntries(0, 3_000_000, nil)) // 16 MB, 91 MB to compile
		}, sandbox.RefusedStructure, []string{"name section of 3000000 or more entries, over the limit of 100000 (handlers.limits.maxEntries)"}},
		{"deep", Config{Limits: limits.Handler{MaxNesting: 32}}, func(t *testing.T, path string) {
			sandboxtest.CopyFile(t, fixture("deep"), path, 0o644)
		}, sandbox.RefusedStructure, []string{"blocks nested more than 32 deep"}},
		{"too-large", Config{Limits: limits.Handler{MaxModuleSize: 2000}}, func(t *testing.T, path string) {
			sandboxtest.WriteFile(t, path, make([]byte, 5000))
		}, sandbox.RefusedTooLarge, []string{"file of 5000 bytes over the limit of 2000 bytes (handlers.limits.maxModuleSize)"}},
		{"compile-timeout", Config{Limits: limits.Handler{CompileTimeout: limits.Duration(300 * time.Millisecond), MaxNesting: 1 << 30}}, func(t *testing.T, path string) {
			sandboxtest.WriteFile(t, path, sandboxtest.BombModule(6000, 1, 0x03)) // about a second to compile
		}, sandbox.RefusedCompileTimeout, []string{"compile did not finish within 300ms (handlers.limits.compileTimeout); abandoned"}},
		{"not-wasm", Config{}, func(t *testing.T, path string) {
			sandboxtest.CopyFile(t, fixture("notwasm"), path, 0o644)
		}, sandbox.RefusedInvalid, []string{"not valid WebAssembly"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, dir, lg, done := runningHost(t, tt.cfg)
			path := filepath.Join(dir, "hostile.wasm")
			tt.drop(t, path)
			s := errorOf(t, h, path)
			if s.Serving {
				t.Errorf("the hostile file serves: %+v", s)
			}
			for _, f := range append([]string{path}, tt.fault...) {
				if !strings.Contains(s.LastError, f) {
					t.Errorf("LastError %q does not say %q", s.LastError, f)
				}
			}
			if attrs, ok := lg.Find("handler file refused"); !ok || attrs["handler"] != path {
				t.Errorf("refusal logged as %v", attrs)
			}
			if got := h.Refusals()[tt.reason]; got != 1 {
				t.Errorf("refusals %v, want one %s", h.Refusals(), tt.reason)
			}
			stillFine(t, h, dir, done)
			testwait.Until(t, "the abandoned compiles to end", func() bool {
				n, _ := h.AbandonedCompiles()
				return n == 0
			})
		})
	}
}

// TestHostileFilesAtStart: a FIFO and a compile bomb present when the host starts do not keep
// it from becoming ready, and the good handler beside them serves.
func TestHostileFilesAtStart(t *testing.T) {
	dir := sandboxtest.TempDir(t)
	sandboxtest.CopyFile(t, fixture("ok"), filepath.Join(dir, "ok.wasm"), 0o644)
	if err := syscall.Mkfifo(filepath.Join(dir, "a-fifo.wasm"), 0o644); err != nil {
		t.Fatal(err)
	}
	sandboxtest.WriteFile(t, filepath.Join(dir, "b-bomb.wasm"), sandboxtest.BombModule(100_000, 1, 0x02))
	sandboxtest.WriteFile(t, filepath.Join(dir, "c-slow.wasm"), sandboxtest.BombModule(6000, 1, 0x03))
	h, _ := newStrictHost(t, Config{HandlerDir: dir, Limits: limits.Handler{CompileTimeout: limits.Duration(300 * time.Millisecond), MaxNesting: 1 << 30}})
	startRun(t, h)
	if _, ok := h.Registry().Get("ok.example"); !ok {
		t.Error("ok.example is not served")
	}
	r := h.Refusals()
	if r[sandbox.RefusedNotRegular] != 1 || r[sandbox.RefusedStructure] != 1 || r[sandbox.RefusedCompileTimeout] != 1 {
		t.Errorf("refusals %v", r)
	}
	testwait.Until(t, "the abandoned compile to end", func() bool {
		n, total := h.AbandonedCompiles()
		return n == 0 && total == 1
	})
}

// TestKVQuotaPerFile: one file declaring four plugin types gets one quota, not four, and its
// stores are freed when it is retired.
func TestKVQuotaPerFile(t *testing.T) {
	const limit = 1 << 20
	h, dir, _, done := runningHost(t, Config{RetireGrace: 50 * time.Millisecond, Limits: limits.Handler{KVBytesPerHandler: limit}})
	path := filepath.Join(dir, "kvfill.wasm")
	installFile(t, fixture("kvfill"), path)
	for _, typ := range []string{"kvfill.a", "kvfill.b", "kvfill.c", "kvfill.d"} {
		hd := handlerFor(t, h.Registry(), typ)
		if _, err := hd.RegisterPlugin(context.Background(), sandboxtest.Info(typ, "p")); err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
	}
	s, _ := status(h, path)
	if s.KVBytes > limit || s.KVKeys != limit/(61440+4) {
		t.Errorf("the file holds %d keys, %d bytes; want %d keys within %d bytes", s.KVKeys, s.KVBytes, limit/(61440+4), limit)
	}
	if n := len(h.Store("kvfill.a")); n != s.KVKeys {
		t.Errorf("kvfill.a holds %d keys, want all %d (it was first)", n, s.KVKeys)
	}
	if n := len(h.Store("kvfill.b")); n != 0 {
		t.Errorf("kvfill.b holds %d keys, want none", n)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the stores to be freed", func() bool { return h.Store("kvfill.a") == nil })
	stillFine(t, h, dir, done)
}

func TestQuarantineTimeoutsInRunningHost(t *testing.T) {
	h, dir, _, done := runningHost(t, Config{CallTimeout: 50 * time.Millisecond, Quarantine: &limits.Quarantine{After: 2, Backoff: limits.Duration(time.Hour)}})
	path := filepath.Join(dir, "loop.wasm")
	installFile(t, fixture("loop"), path)
	hd := handlerFor(t, h.Registry(), "loop.example")
	for range 2 {
		sandboxtest.ErrContains(t, hd.ValidatePlugin(context.Background(), sandboxtest.Info("loop.example", "p")), context.DeadlineExceeded)
	}
	sandboxtest.ErrContains(t, hd.ValidatePlugin(context.Background(), sandboxtest.Info("loop.example", "p")), policy.ErrQuarantined, path, "timed out")
	s, _ := status(h, path)
	if !s.Quarantine.Quarantined || !strings.Contains(s.Quarantine.Reason, "timed out") || s.Failures != 3 || s.Timeouts != 2 {
		t.Errorf("status %+v", s)
	}
	stillFine(t, h, dir, done)
	// A new version of the file starts afresh.
	installFile(t, fixture("trap"), path)
	testwait.Until(t, "the new version", func() bool {
		s, _ := status(h, path)
		return s.Serving && !s.Quarantine.Quarantined
	})
}

// TestPermissionsRecheckedAtRunTime: a handler directory made world-writable while the host
// runs is noticed: files dropped in are not loaded until it is fixed; a file made writable by
// others is refused (the version loaded before keeps serving).
func TestPermissionsRecheckedAtRunTime(t *testing.T) {
	h, dir, lg, done := runningHost(t, Config{})
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the directory to be refused", func() bool { return h.DirectoryError() != "" })
	if !strings.Contains(h.DirectoryError(), "writable by group or other") || h.Refusals()[RefusedDirectory] != 1 {
		t.Errorf("directory error %q, refusals %v", h.DirectoryError(), h.Refusals())
	}
	if _, ok := lg.Find("handler directory is insecure now"); !ok {
		t.Error("not logged")
	}
	installFile(t, fixture("echo"), filepath.Join(dir, "echo.wasm"))
	time.Sleep(300 * time.Millisecond) // an absence: give a load the time it would need
	if _, ok := h.Registry().Get("echo.example"); ok {
		t.Fatal("a file dropped into an insecure handler directory was loaded")
	}
	if _, ok := h.Registry().Get("ok.example"); !ok {
		t.Error("the handler loaded before went")
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	handlerFor(t, h.Registry(), "echo.example")
	if h.DirectoryError() != "" {
		t.Errorf("directory error %q after the fix", h.DirectoryError())
	}

	okPath := filepath.Join(dir, "ok.wasm")
	if err := os.Chmod(okPath, 0o666); err != nil {
		t.Fatal(err)
	}
	s := errorOf(t, h, okPath)
	if !strings.Contains(s.LastError, "writable by group or other") || h.Refusals()[sandbox.RefusedInsecure] != 1 {
		t.Errorf("status %+v, refusals %v", s, h.Refusals())
	}
	stillFine(t, h, filepath.Join(dir), done)
}

// TestFixturesUpToDate: every committed .wasm fixture is what wat2wasm makes of its .wat (the
// tests run the .wasm; CI installs wabt so that a .wat edited without regenerating fails here).
func TestFixturesUpToDate(t *testing.T) {
	if _, err := exec.LookPath("wat2wasm"); err != nil {
		t.Skip("wat2wasm not installed (Debian: wabt)")
	}
	wats, _ := filepath.Glob("testdata/*.wat")
	out := sandboxtest.TempDir(t)
	for _, wat := range wats {
		got := filepath.Join(out, "x.wasm")
		if b, err := exec.Command("wat2wasm", "-o", got, wat).CombinedOutput(); err != nil {
			t.Fatalf("wat2wasm %s: %v\n%s", wat, err, b)
		}
		want := strings.TrimSuffix(wat, ".wat") + ".wasm"
		if !bytes.Equal(mustReadFile(t, got), mustReadFile(t, want)) {
			t.Errorf("%s is not what wat2wasm makes of %s: run testdata/gen.sh", want, wat)
		}
	}
}

func mustReadFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestIdlePoolsShrink: instances idle past Limits.IdleInstanceTimeout are closed, down to one.
func TestIdlePoolsShrink(t *testing.T) {
	pc := &heldCaller{in: make(chan struct{}), release: make(chan struct{})}
	h, dir, _, done := runningHost(t, Config{
		PoolSize: 3, CallTimeout: time.Minute, // the calls wait for each other: no deadline of theirs
		PluginCaller: pc, Grants: map[string][]string{"plain.example": {abi.CapabilityPluginCall}},
		Limits: limits.Handler{IdleInstanceTimeout: limits.Duration(100 * time.Millisecond)},
	})
	path := filepath.Join(dir, "ungranted.wasm")
	installFile(t, fixture("ungranted"), path)
	hd := handlerFor(t, h.Registry(), "plain.example")
	// Three calls at once, each held in its plugin_call until all three are in: three instances.
	p := registration.PluginInfo{Type: "plain.example", Name: "p", Endpoint: "/run/p.sock"}
	errs := make(chan error, 3)
	for range 3 {
		go func() { errs <- hd.ValidatePlugin(context.Background(), p) }()
	}
	for range 3 {
		select {
		case <-pc.in:
		case err := <-errs:
			close(pc.release)
			t.Fatalf("a call ended before the three were in: %v", err)
		}
	}
	s, _ := status(h, path)
	close(pc.release)
	for range 3 {
		if err := <-errs; !errors.Is(err, registration.ErrRejected) {
			t.Errorf("a call ended with %v, want the rejection of its plugin_call's answer", err)
		}
	}
	if s.Instances != 3 {
		t.Fatalf("%d instances, want 3", s.Instances)
	}
	testwait.Until(t, "the pool to shrink", func() bool {
		s, _ := status(h, path)
		return s.Instances == 1
	})
	stillFine(t, h, dir, done)
}

// heldCaller is a sandbox.PluginCaller whose calls each say they are in (in), then wait for release.
type heldCaller struct{ in, release chan struct{} }

func (c *heldCaller) Call(ctx context.Context, endpoint, method string, req []byte, maxResp int) ([]byte, error) {
	c.in <- struct{}{}
	select {
	case <-c.release:
		return []byte("pong"), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
