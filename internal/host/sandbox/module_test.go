package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/host/sandbox/sandboxtest"
	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/testwait"
)

func TestLoadOK(t *testing.T) {
	h, logs := newTestSandbox(t, Config{})
	m := mustLoad(t, h, "ok")
	ctx := context.Background()

	bin, _ := os.ReadFile(fixture("ok"))
	sum := sha256.Sum256(bin)
	if m.SHA256() != hex.EncodeToString(sum[:]) || m.Size() != int64(len(bin)) {
		t.Errorf("SHA256, Size = %s, %d; want the file's", m.SHA256(), m.Size())
	}
	mf := m.Manifest()
	if fmt.Sprint(mf.PluginTypes) != "[ok.example]" || mf.Name != "ok" || mf.Version != "1" || m.ABIVersion() != 1 {
		t.Errorf("manifest %+v, ABI %d", mf, m.ABIVersion())
	}
	if len(m.Capabilities()) != 0 {
		t.Errorf("capabilities %v, want none", m.Capabilities())
	}

	if err := m.ValidatePlugin(ctx, sandboxtest.Info("ok.example", "p1")); err != nil {
		t.Fatalf("ValidatePlugin: %v", err)
	}
	pub, err := m.RegisterPlugin(ctx, sandboxtest.Info("ok.example", "p1"))
	if err != nil || fmt.Sprint(pub) != "map[k:v]" {
		t.Fatalf("RegisterPlugin = %v, %v; want map[k:v]", pub, err)
	}
	if err := m.DeRegisterPlugin(ctx, sandboxtest.Info("ok.example", "p1")); err != nil {
		t.Fatalf("DeRegisterPlugin: %v", err)
	}
	// The guest's log line, with the structured keys.
	attrs, ok := logs.Find("validating")
	if !ok {
		t.Fatal("the guest's log line was not logged")
	}
	if attrs["plugin_type"] != "ok.example" || attrs["handler"] != fixture("ok") || attrs["plugin"] != "p1" || attrs["level"] != "INFO" {
		t.Errorf("guest log attributes %v", attrs)
	}
	if _, ok := logs.Find("handler module loaded"); !ok {
		t.Error("the load was not logged")
	}
	// A type the module does not declare.
	sandboxtest.ErrContains(t, m.ValidatePlugin(ctx, sandboxtest.Info("other", "p1")), registration.ErrNoHandler, "other", fixture("ok"))
}

func TestRequestResultPublish(t *testing.T) {
	h, _ := newTestSandbox(t, Config{})
	m := mustLoad(t, h, "echo")
	ctx := context.Background()
	p := registration.PluginInfo{Socket: "/s/x.sock", Type: "echo.example", Name: "x", Endpoint: "/e/x.sock", Versions: []string{"1.0.0", "2"}}
	want := string(abi.AppendPluginRequest(nil, abi.PluginRequest{Socket: p.Socket, Type: p.Type, Name: p.Name, Endpoint: p.Endpoint, Versions: p.Versions}))

	err := m.ValidatePlugin(ctx, p)
	if !errors.Is(err, registration.ErrRejected) {
		t.Fatalf("ValidatePlugin = %v, want ErrRejected", err)
	}
	// The reason is the guest's text, its control characters escaped (printable).
	if got := strings.TrimPrefix(err.Error(), registration.ErrRejected.Error()+": "); got != printable(want) {
		t.Errorf("the guest read request %q, want %q", got, want)
	}
	_, err = m.RegisterPlugin(ctx, p)
	sandboxtest.ErrContains(t, err, ErrHandlerFailed, "register broke", fixture("echo"), abi.ExportRegister, `"x"`)
	// publish outside register is denied.
	if err := m.DeRegisterPlugin(ctx, p); err != nil {
		t.Errorf("publish during deregister was not denied: %v", err)
	}
}

func TestKV(t *testing.T) {
	h, _ := newTestSandbox(t, Config{})
	m := mustLoad(t, h, "kv")
	ctx := context.Background()
	p := sandboxtest.Info("kv.example", "p")
	_, err := m.RegisterPlugin(ctx, p)
	sandboxtest.ErrContains(t, err, registration.ErrRejected, "missing")
	if err := m.ValidatePlugin(ctx, p); err != nil {
		t.Fatal(err)
	}
	_, err = m.RegisterPlugin(ctx, p)
	sandboxtest.ErrContains(t, err, registration.ErrRejected, ": v1")
	// A second module of the same type shares the store (it is the type's, not the module's).
	m2 := mustLoad(t, h, "kv")
	_, err = m2.RegisterPlugin(ctx, p)
	sandboxtest.ErrContains(t, err, registration.ErrRejected, ": v1")
	if err := m.DeRegisterPlugin(ctx, p); err != nil {
		t.Fatal(err)
	}
	_, err = m2.RegisterPlugin(ctx, p)
	sandboxtest.ErrContains(t, err, registration.ErrRejected, "missing")
}

// TestLimits: the host functions return the ABI's codes at its limits (testdata/limits.wat
// checks them from the guest side).
func TestLimits(t *testing.T) {
	h, _ := newTestSandbox(t, Config{})
	m := mustLoad(t, h, "limits")
	ctx := context.Background()
	p := sandboxtest.Info("limits.example", "p")
	if err := m.ValidatePlugin(ctx, p); err != nil {
		t.Errorf("validate: %v", err)
	}
	if _, err := m.RegisterPlugin(ctx, p); err != nil {
		t.Errorf("register: %v", err)
	}
	if err := m.DeRegisterPlugin(ctx, p); err != nil {
		t.Errorf("deregister: %v", err)
	}
}

// TestHostile runs each hostile guest: the call fails with the right error naming the file
// and what went wrong, the same module serves the next normal call, and another module is
// not disturbed.
func TestHostile(t *testing.T) {
	h, _ := newTestSandbox(t, Config{CallTimeout: 100 * time.Millisecond, MemoryLimit: 2 << 20, PoolSize: 1})
	good := mustLoad(t, h, "ok")
	ctx := context.Background()
	type call func(m *Module, p registration.PluginInfo) error
	validate := func(m *Module, p registration.PluginInfo) error { return m.ValidatePlugin(ctx, p) }
	register := func(m *Module, p registration.PluginInfo) error { _, err := m.RegisterPlugin(ctx, p); return err }
	deregister := func(m *Module, p registration.PluginInfo) error { return m.DeRegisterPlugin(ctx, p) }
	tests := []struct {
		name     string
		fixture  string
		call     call
		plugin   string
		sentinel error
		parts    []string
		after    call // a normal call that must then work
	}{
		{"infinite loop", "loop", validate, "p", context.DeadlineExceeded, []string{"timed out after 100ms", abi.ExportValidate}, register},
		{"unreachable", "trap", validate, "p", ErrTrap, []string{"unreachable", abi.ExportValidate}, deregister},
		{"divide by zero", "trap", register, "p", ErrTrap, []string{"integer divide by zero", abi.ExportRegister}, deregister},
		{"proc_exit", "exit", validate, "p", ErrTrap, []string{"guest exited with code 3"}, register},
		{"status 77", "garbage", validate, "p", ErrBadResult, []string{"unknown status 77"}, deregister},
		{"oversized result", "garbage", register, "p", ErrBadResult, []string{"result of 5000 bytes over the limit of 4096 bytes"}, deregister},
		{"bad pointer to log", "badptr", validate, "a", ErrTrap, []string{"wasmhost.log: message [4294967040, 4294967040+100) is outside the guest memory of 65536 bytes"}, deregister},
		{"bad pointer to result_set", "badptr", validate, "ab", ErrTrap, []string{"wasmhost.result_set: result"}, deregister},
		{"bad pointer to request_read", "badptr", validate, "abc", ErrTrap, []string{"wasmhost.request_read: buffer [65530, 65530+100)"}, deregister},
		{"bad pointer to kv_get", "badptr", validate, "abcd", ErrTrap, []string{"wasmhost.kv_get: buffer"}, deregister},
		{"bad pointer to kv_set", "badptr", validate, "abcde", ErrTrap, []string{"wasmhost.kv_set: key"}, deregister},
		{"bad pointer to kv_delete", "badptr", validate, "abcdef", ErrTrap, []string{"wasmhost.kv_delete: key [70000"}, deregister},
		{"negative length to log", "badptr", validate, "abcdefg", ErrTrap, []string{"wasmhost.log: message [0, 0+4294967295)"}, deregister},
		{"bad pointer to publish", "badptr", register, "p", ErrTrap, []string{"wasmhost.publish: value [65000, 65000+1000)"}, deregister},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := mustLoad(t, h, tt.fixture)
			defer m.Close(ctx)
			var pluginType string
			for _, pt := range m.PluginTypes() {
				pluginType = pt
			}
			err := tt.call(m, sandboxtest.Info(pluginType, tt.plugin))
			sandboxtest.ErrContains(t, err, tt.sentinel, append(tt.parts, fixture(tt.fixture))...)
			if err := tt.after(m, sandboxtest.Info(pluginType, "normal")); err != nil {
				t.Errorf("the next normal call failed: %v", err)
			}
			checkOK(t, good)
			// Again, with the instance that replaced the broken one.
			sandboxtest.ErrContains(t, tt.call(m, sandboxtest.Info(pluginType, tt.plugin)), tt.sentinel)
		})
	}
}

// TestMemoryLimit: memory.grow fails at MemoryLimit (the guest then reports that its memory
// stayed within 32 pages).
func TestMemoryLimit(t *testing.T) {
	h, _ := newTestSandbox(t, Config{MemoryLimit: 2 << 20, CallTimeout: 20 * time.Second})
	m := mustLoad(t, h, "grow")
	sandboxtest.ErrContains(t, m.ValidatePlugin(context.Background(), sandboxtest.Info("grow.example", "p")), registration.ErrRejected, "capped")
	checkOK(t, mustLoad(t, h, "ok"))
}

func TestRefusedAtLoad(t *testing.T) {
	tests := []struct {
		fixture  string
		cfg      Config
		sentinel error
		want     string
	}{
		{"abi2", Config{}, nil, "ABI version 2 not supported (supported: 1)"},
		{"noexport", Config{}, nil, "missing export wasmhost_register"},
		{"command", Config{}, nil, "exports _start: it was built as a WASI command, not the reactor a handler must be; build it as a reactor: " +
			"Go: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared; C: clang --target=wasm32-wasi -mexec-model=reactor"},
		{"badsig", Config{}, nil, "export wasmhost_validate has signature () -> (i32) want (i32) -> (i32)"},
		{"ungranted", Config{}, ErrNotGranted, "imports wasmhost.plugin_call which is not granted for any plugin type"},
		{"ungranted", Config{PluginCaller: fakeCaller{}, Grants: map[string][]string{"other.example": {abi.CapabilityPluginCall}}},
			ErrNotGranted, "imports wasmhost.plugin_call which is not granted for plugin type plain.example"},
		{"unknownimport", Config{}, nil, "imports unknown host function env.foo"},
		{"badimport", Config{}, nil, "imports unknown host function wasmhost.nope"},
		{"badimportsig", Config{}, nil, "imports wasmhost.log with signature (i32) -> () want (i32, i32, i32) -> ()"},
		{"importmem", Config{}, nil, "imports memory env.mem: a handler may import only host functions"},
		{"bigmem", Config{}, nil, "memory minimum 2000 pages (128000 KiB) over the limit 1024 pages (65536 KiB)"},
		{"nomanifesttype", Config{}, nil, "manifest declares no plugin type"},
		{"badmanifest", Config{}, nil, "manifest malformed: abi: malformed message"},
		{"notwasm", Config{}, nil, "module not valid WebAssembly"},
		{"truncated", Config{}, nil, "module not valid WebAssembly"},
		{"initloop", Config{CallTimeout: 50 * time.Millisecond}, context.DeadlineExceeded, "instantiating timed out after 50ms"},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			h, _ := newTestSandbox(t, tt.cfg)
			m, err := loadFile(h, context.Background(), fixture(tt.fixture))
			if m != nil {
				t.Fatalf("loaded %s", tt.fixture)
			}
			sandboxtest.ErrContains(t, err, ErrBadModule, "host: bad module "+fixture(tt.fixture)+": ", tt.want)
			if tt.sentinel != nil && !errors.Is(err, tt.sentinel) {
				t.Errorf("error %q does not match %v", err, tt.sentinel)
			}
			// Nothing of the refused module stays open, and the host still loads good ones.
			h.mu.Lock()
			open := len(h.modules)
			h.mu.Unlock()
			if open != 0 {
				t.Errorf("%d modules open after a refused load", open)
			}
			checkOK(t, mustLoad(t, h, "ok"))
		})
	}
}

type fakeCaller struct {
	resp []byte
	err  error
	got  *[]string
}

func (f fakeCaller) Call(ctx context.Context, endpoint, method string, req []byte, maxResp int) ([]byte, error) {
	if f.got != nil {
		*f.got = append(*f.got, endpoint, method, string(req))
	}
	return f.resp, f.err
}

func TestPluginCall(t *testing.T) {
	var got []string
	h, _ := newTestSandbox(t, Config{
		PluginCaller: fakeCaller{resp: []byte("pong"), got: &got},
		Grants:       map[string][]string{"plain.example": {abi.CapabilityPluginCall}},
	})
	m := mustLoad(t, h, "ungranted")
	if fmt.Sprint(m.Capabilities()) != "[plugin_call]" {
		t.Errorf("capabilities %v", m.Capabilities())
	}
	p := registration.PluginInfo{Type: "plain.example", Name: "p", Endpoint: "/run/p.sock"}
	sandboxtest.ErrContains(t, m.ValidatePlugin(context.Background(), p), registration.ErrRejected, ": pong")
	if fmt.Sprint(got) != "[/run/p.sock /svc/Ping ping]" {
		t.Errorf("plugin call got %q", got)
	}

	h2, _ := newTestSandbox(t, Config{
		PluginCaller: fakeCaller{err: errors.New("dial failed")},
		Grants:       map[string][]string{"plain.example": {abi.CapabilityPluginCall}},
	})
	m2 := mustLoad(t, h2, "ungranted")
	sandboxtest.ErrContains(t, m2.ValidatePlugin(context.Background(), p), ErrHandlerFailed, "dial failed")
	// No endpoint: the call fails without reaching the caller.
	got = nil
	sandboxtest.ErrContains(t, m.ValidatePlugin(context.Background(), sandboxtest.Info("plain.example", "p")), ErrHandlerFailed, "the plugin has no endpoint")
	if got != nil {
		t.Errorf("the caller was called without an endpoint: %q", got)
	}
}

// TestHostFuncsCoverABI: the host implements every host function of the ABI, and no other.
func TestHostFuncsCoverABI(t *testing.T) {
	for name := range abi.ImportSignatures {
		if hostFuncs[name] == nil {
			t.Errorf("no implementation of %s.%s", abi.ImportModule, name)
		}
	}
	for name := range hostFuncs {
		if _, ok := abi.ImportSignatures[name]; !ok {
			t.Errorf("%s.%s is not in the ABI", abi.ImportModule, name)
		}
	}
}

func TestPermissions(t *testing.T) {
	dir := sandboxtest.TempDir(t)
	path := filepath.Join(dir, "ok.wasm")
	sandboxtest.CopyFile(t, fixture("ok"), path, 0o664)
	h, _ := newStrictSandbox(t, Config{})
	_, err := loadFile(h, context.Background(), path)
	sandboxtest.ErrContains(t, err, ErrInsecure, path, "writable by group or other", "handlers.allowInsecure", "--allow-insecure-handlers")

	h2, _ := newTestSandbox(t, Config{AllowInsecure: true})
	checkOK(t, mustLoadPath(t, h2, path))

	// The cache directory must be private.
	cache := filepath.Join(dir, "cache")
	if err := os.Mkdir(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = New(context.Background(), withDefaults(Config{CacheDir: cache}))
	sandboxtest.ErrContains(t, err, ErrInsecure, cache, "want 0700")
	fresh := filepath.Join(dir, "fresh", "cache")
	h3, _ := newStrictSandbox(t, Config{CacheDir: fresh})
	fi, err := os.Stat(fresh)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("cache directory: %v, %v", fi.Mode(), err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	checkOK(t, mustLoadPath(t, h3, path))
}

func mustLoadPath(t testing.TB, h *Sandbox, path string) *Module {
	t.Helper()
	m, err := loadFile(h, context.Background(), path)
	if err != nil {
		t.Fatalf("LoadFile(%s): %v", path, err)
	}
	return m
}

// TestRareCallsOneInstance: a handler whose calls never overlap keeps the one instance its
// load made, whatever the pool size: the pool grows only for calls at once (a Go handler's
// instance is 3.4 MB new, 4 MB and more once it has served calls).
func TestRareCallsOneInstance(t *testing.T) {
	h, _ := newTestSandbox(t, Config{PoolSize: 8})
	m := mustLoad(t, h, "kv")
	ctx := context.Background()
	for i := range 100 {
		p := sandboxtest.Info("kv.example", fmt.Sprint(i))
		if err := m.ValidatePlugin(ctx, p); err != nil {
			t.Fatal(err)
		}
		if _, err := m.RegisterPlugin(ctx, p); !errors.Is(err, registration.ErrRejected) {
			t.Fatal(err)
		}
		if n := len(m.slots); n != 1 {
			t.Fatalf("after %d calls one at a time, %d instances alive, want 1", 2*(i+1), n)
		}
	}
}

// TestBusyPoolWaitsBeforeGrowing: a call that finds every instance in a call, with room in the
// pool, waits for one to come back as long as a new one takes to make (an hour here), and
// takes the one that comes back: the pool does not grow.
func TestBusyPoolWaitsBeforeGrowing(t *testing.T) {
	h, _ := newTestSandbox(t, Config{PoolSize: 4})
	m := mustLoad(t, h, "kv")
	m.makeTime.Store(int64(time.Hour))
	waiting := make(chan struct{})
	m.waitHook = func() { close(waiting) }
	ctx := context.Background()
	if !m.Enter() {
		t.Fatal("the module is retired")
	}
	defer m.Leave()
	busy, err := m.acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *instance, 1)
	go func() {
		in, err := m.acquire(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- in
	}()
	select {
	case <-waiting:
	case in := <-got:
		m.release(in)
		t.Fatal("the call did not wait for the busy instance: it made a new one")
	}
	m.release(busy)
	in := <-got
	if in != busy {
		t.Fatal("the waiting call got a new instance, not the one that came back")
	}
	if n := len(m.slots); n != 1 {
		t.Fatalf("%d instances alive, want 1", n)
	}
	m.release(in)
}

// TestBusyPoolGrows: a call that finds every instance in a call, for longer than a new one
// takes to make, gets a new instance.
func TestBusyPoolGrows(t *testing.T) {
	h, _ := newTestSandbox(t, Config{PoolSize: 4})
	m := mustLoad(t, h, "kv")
	ctx := context.Background()
	if !m.Enter() {
		t.Fatal("the module is retired")
	}
	defer m.Leave()
	var ins []*instance
	for i := range 3 {
		in, err := m.acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(ins, in) {
			t.Fatalf("call %d got an instance already in a call", i+1)
		}
		ins = append(ins, in)
	}
	if n := len(m.slots); n != 3 {
		t.Fatalf("%d instances alive for 3 calls at once, want 3", n)
	}
	for _, in := range ins {
		m.release(in)
	}
}

// TestPoolHammer calls one module from many goroutines: every call succeeds, and the pool
// never holds more instances than PoolSize.
func TestPoolHammer(t *testing.T) {
	h, _ := newTestSandbox(t, Config{PoolSize: 3})
	m := mustLoad(t, h, "kv")
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				p := sandboxtest.Info("kv.example", fmt.Sprint(g, i))
				if err := m.ValidatePlugin(ctx, p); err != nil {
					t.Error(err)
					return
				}
				if _, err := m.RegisterPlugin(ctx, p); !errors.Is(err, registration.ErrRejected) {
					t.Error(err)
					return
				}
				if n := len(m.slots); n > 3 {
					t.Errorf("%d instances alive, pool size 3", n)
				}
			}
		})
	}
	wg.Wait()
}

func TestTimeoutWhileWaitingForAnInstance(t *testing.T) {
	h, _ := newTestSandbox(t, Config{PoolSize: 1, CallTimeout: 200 * time.Millisecond})
	m := mustLoad(t, h, "loop")
	ctx := context.Background()
	done := make(chan error)
	go func() { done <- m.ValidatePlugin(ctx, sandboxtest.Info("loop.example", "a")) }()
	// The caller's own shorter deadline is what the message reports.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	err := m.ValidatePlugin(short, sandboxtest.Info("loop.example", "b"))
	sandboxtest.ErrContains(t, err, context.DeadlineExceeded, "timed out after")
	sandboxtest.ErrContains(t, <-done, context.DeadlineExceeded, "timed out after 200ms")
	// A canceled caller is told so, not that the handler timed out.
	canceled, cancel2 := context.WithCancel(ctx)
	cancel2()
	_, err = m.RegisterPlugin(canceled, sandboxtest.Info("loop.example", "c"))
	sandboxtest.ErrContains(t, err, context.Canceled, "canceled")
}

func TestClose(t *testing.T) {
	h, _ := newTestSandbox(t, Config{})
	m := mustLoad(t, h, "ok")
	m2 := mustLoad(t, h, "ok")
	ctx := context.Background()
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	sandboxtest.ErrContains(t, m.ValidatePlugin(ctx, sandboxtest.Info("ok.example", "p")), ErrRetired, fixture("ok"))
	checkOK(t, m2)
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(ctx); err != nil {
		t.Fatal("second Close:", err)
	}
	sandboxtest.ErrContains(t, m2.ValidatePlugin(ctx, sandboxtest.Info("ok.example", "p")), ErrRetired)
	if _, err := loadFile(h, ctx, fixture("ok")); !errors.Is(err, ErrClosed) {
		t.Errorf("LoadFile after Close = %v, want ErrClosed", err)
	}
}

// TestCloseInterruptsCalls: Close waits for calls in progress until its context is done,
// then closes the modules under them.
func TestCloseInterruptsCalls(t *testing.T) {
	h, _ := newTestSandbox(t, Config{CallTimeout: time.Minute})
	m := mustLoad(t, h, "loop")
	started := make(chan struct{})
	done := make(chan error)
	go func() {
		close(started)
		done <- m.ValidatePlugin(context.Background(), sandboxtest.Info("loop.example", "p"))
	}()
	<-started
	testwait.Until(t, "the call to start", func() bool { m.mu.Lock(); defer m.mu.Unlock(); return m.inflight == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	sandboxtest.ErrContains(t, <-done, ErrRetired, "closed during the call")
}

// TestMemoryLimitInPages: the sandbox of a host's defaults limits an instance's memory to the
// 1024 pages of DefaultMemoryLimit (64 MiB); the host's TestConfig checks its defaults.
func TestMemoryLimitInPages(t *testing.T) {
	h, _ := newStrictSandbox(t, Config{})
	if h.limitPages != 1024 {
		t.Errorf("defaults not applied: %d pages", h.limitPages)
	}
}
