package registrar_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/registration/registrar"
	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
	"github.com/wasmhost/wasmhost/internal/state"
	"github.com/wasmhost/wasmhost/internal/testwait"
	"go.uber.org/goleak"
)

const (
	testType = "example.com/demo"
	wait     = 10 * time.Second // how long a test waits for something that should happen
)

// env is one test's registrar, handler, actual state and socket directory.
type env struct {
	t       *testing.T
	dir     string
	reg     *registrar.Registrar
	handler *registrationtest.RecordingHandler
	actual  *state.Actual
	logs    *logRecorder
}

func newEnv(t *testing.T, mod func(*registrar.Config)) *env {
	t.Helper()
	e := &env{
		t:       t,
		dir:     registrationtest.SocketDir(t),
		handler: registrationtest.NewRecordingHandler(),
		actual:  state.NewActual(),
		logs:    &logRecorder{},
	}
	handlers := registration.NewRegistry()
	handlers.Set(testType, e.handler)
	cfg := registrar.Config{Handlers: handlers, Actual: e.actual, Logger: slog.New(e.logs)}
	if mod != nil {
		mod(&cfg)
	}
	reg, err := registrar.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.reg = reg
	return e
}

func (e *env) path(name string) string { return filepath.Join(e.dir, name+".sock") }

func (e *env) serve(name string, info registrationtest.Info, opts registrationtest.Options) *registrationtest.Plugin {
	e.t.Helper()
	return registrationtest.Serve(e.t, e.path(name), info, opts)
}

func (e *env) register(p string) error {
	e.t.Helper()
	return e.reg.Register(context.Background(), state.Socket{Path: p, Seen: time.Now(), ID: state.Identity{Ino: 42}})
}

func demoInfo(name string) registrationtest.Info {
	return registrationtest.Info{Type: testType, Name: name, Endpoint: "/run/" + name + "/api.sock", Versions: []string{"v1", "v2"}}
}

func TestRegisterHappyPath(t *testing.T) {
	e := newEnv(t, nil)
	e.handler.SetPublished(map[string]string{"node": "n1"})
	p := e.serve("demo", demoInfo("demo-1"), registrationtest.Options{})

	if err := e.register(p.Path()); err != nil {
		t.Fatalf("Register: %v", err)
	}
	if n := p.WaitNotification(t, wait); !n.Registered || n.Error != "" {
		t.Fatalf("notification = %+v, want registered", n)
	}
	got, ok := e.actual.Get(p.Path())
	if !ok {
		t.Fatal("plugin not in the actual state")
	}
	if got.Type != testType || got.Name != "demo-1" || got.Endpoint != "/run/demo-1/api.sock" ||
		!slices.Equal(got.Versions, []string{"v1", "v2"}) || got.ID.Ino != 42 ||
		got.Handler != registration.Handler(e.handler) || got.RegisteredAt.IsZero() || got.Published["node"] != "n1" {
		t.Fatalf("actual record = %+v", got)
	}
	calls := e.handler.Calls()
	if len(calls) != 2 || calls[0].Method != registrationtest.MethodValidate || calls[1].Method != registrationtest.MethodRegister {
		t.Fatalf("handler calls = %+v, want Validate then Register", calls)
	}
	if calls[0].Info.Socket != p.Path() || calls[0].Info.Name != "demo-1" {
		t.Fatalf("handler saw %+v", calls[0].Info)
	}
	e.logs.wantOnce(t, slog.LevelInfo, "plugin registered", "plugin_type", testType, "plugin", "demo-1", "socket", p.Path())
}

func TestRegisterEmptyEndpointIsSocket(t *testing.T) {
	e := newEnv(t, nil)
	info := demoInfo("demo-1")
	info.Endpoint = ""
	p := e.serve("demo", info, registrationtest.Options{})
	if err := e.register(p.Path()); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.actual.Get(p.Path()); got.Endpoint != p.Path() {
		t.Fatalf("Endpoint = %q, want %q", got.Endpoint, p.Path())
	}
	if c := e.handler.Calls()[0]; c.Info.Endpoint != p.Path() {
		t.Fatalf("handler saw endpoint %q", c.Info.Endpoint)
	}
}

func TestRegisterRefusesInvalidInfo(t *testing.T) {
	e := newEnv(t, nil)
	tests := []struct {
		name  string
		info  registrationtest.Info
		raw   []byte
		field string
	}{
		{"empty type", registrationtest.Info{Name: "x", Versions: []string{"v1"}}, nil, "field type: is empty"},
		{"empty name", registrationtest.Info{Type: testType}, nil, "field name: is empty"},
		{"long type", registrationtest.Info{Type: strings.Repeat("t", 257), Name: "x"}, nil, "field type: 257 bytes"},
		{"long name", registrationtest.Info{Type: testType, Name: strings.Repeat("n", 1000)}, nil, "field name: 1000 bytes"},
		{"long endpoint", registrationtest.Info{Type: testType, Name: "x", Endpoint: strings.Repeat("e", 5000)}, nil, "field endpoint: 5000 bytes"},
		{"control char", registrationtest.Info{Type: testType, Name: "x\x1b[2J"}, nil, "field name: control character U+001B"},
		{"invalid UTF-8", registrationtest.Info{Type: testType, Name: "x\xff"}, nil, "field name: not valid UTF-8"},
		{"invalid UTF-8 version", registrationtest.Info{Type: testType, Name: "x", Versions: []string{"v1", "\xc0"}}, nil, "field supported_versions[1]: not valid UTF-8"},
		{"too many versions", registrationtest.Info{Type: testType, Name: "x", Versions: slices.Repeat([]string{"v"}, 100)}, nil, "field supported_versions: 100 entries"},
		{"long version", registrationtest.Info{Type: testType, Name: "x", Versions: []string{strings.Repeat("v", 300)}}, nil, "field supported_versions[0]: 300 bytes"},
		{"truncated message", registrationtest.Info{}, []byte{0x0a, 0x10, 'a'}, "GetInfo answer: malformed field 1"},
		{"wrong wire type", registrationtest.Info{}, []byte{0x10, 0x01}, "field 2 has wire type 0"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := e.serve(fmt.Sprint("bad", i), tt.info, registrationtest.Options{RawInfo: tt.raw})
			err := e.register(p.Path())
			if !errors.Is(err, registration.ErrInvalidInfo) || !strings.Contains(err.Error(), tt.field) || !strings.Contains(err.Error(), p.Path()) {
				t.Fatalf("Register error = %v, want ErrInvalidInfo naming %q and the socket", err, tt.field)
			}
			if n := p.WaitNotification(t, wait); n.Registered || !strings.Contains(n.Error, tt.field) {
				t.Fatalf("notification = %+v, want not registered with the reason", n)
			}
			if e.actual.Len() != 0 || len(e.handler.Calls()) != 0 {
				t.Fatalf("refused plugin reached the actual state (%d) or the handler (%v)", e.actual.Len(), e.handler.Calls())
			}
		})
	}
}

func TestRegisterNoHandler(t *testing.T) {
	e := newEnv(t, nil)
	info := demoInfo("demo-1")
	info.Type = "example.com/other"
	p := e.serve("demo", info, registrationtest.Options{})
	err := e.register(p.Path())
	if !errors.Is(err, registration.ErrNoHandler) {
		t.Fatalf("Register error = %v, want ErrNoHandler", err)
	}
	var named interface {
		PluginType() string
		PluginName() string
	}
	if !errors.As(err, &named) || named.PluginType() != "example.com/other" || named.PluginName() != "demo-1" {
		t.Fatalf("Register error %v does not name the plugin", err)
	}
	want := "no handler registered for plugin type: example.com/other at socket " + p.Path()
	if n := p.WaitNotification(t, wait); n.Registered || n.Error != want {
		t.Fatalf("notification = %+v, want %q", n, want)
	}
	if e.actual.Len() != 0 {
		t.Fatal("plugin without a handler is in the actual state")
	}
	e.logs.wantOnce(t, slog.LevelDebug, "plugin waits for a handler for its type", "plugin_type", "example.com/other", "plugin", "demo-1", "socket", p.Path())
}

func TestRegisterValidationFails(t *testing.T) {
	e := newEnv(t, nil)
	refusal := fmt.Errorf("%w: version v9 is required", registration.ErrRejected)
	e.handler.SetError(registrationtest.MethodValidate, refusal)
	p := e.serve("demo", demoInfo("demo-1"), registrationtest.Options{})
	err := e.register(p.Path())
	if !errors.Is(err, registration.ErrRejected) || !errors.Is(err, refusal) {
		t.Fatalf("Register error = %v, want ErrRejected wrapping the handler's error", err)
	}
	if n := p.WaitNotification(t, wait); n.Registered || !strings.Contains(n.Error, "version v9 is required") {
		t.Fatalf("notification = %+v, want the handler's reason", n)
	}
	if e.actual.Len() != 0 || len(e.handler.CallsTo(registrationtest.MethodRegister)) != 0 {
		t.Fatal("plugin refused by ValidatePlugin was registered")
	}
}

// TestRegisterRefusalReason: a handler that refuses with a reason (its error already matches
// ErrRejected, as the WebAssembly host's do) has the plugin told that reason first, and the
// sentinel's words are not said twice.
func TestRegisterRefusalReason(t *testing.T) {
	e := newEnv(t, nil)
	e.handler.SetError(registrationtest.MethodValidate, fmt.Errorf("%w: driver d already registered at version 1.5.0; refusing 1.0.0", registration.ErrRejected))
	p := e.serve("demo", demoInfo("demo-1"), registrationtest.Options{})
	err := e.register(p.Path())
	if !errors.Is(err, registration.ErrRejected) {
		t.Fatalf("Register error = %v, want ErrRejected", err)
	}
	n := p.WaitNotification(t, wait)
	if want := "rejected by handler: driver d already registered at version 1.5.0; refusing 1.0.0 (ValidatePlugin of plugin demo-1"; !strings.HasPrefix(n.Error, want) {
		t.Errorf("reason %q, want it to start with %q", n.Error, want)
	}
	if c := strings.Count(n.Error, "rejected by handler"); c != 1 {
		t.Errorf("reason says %q %d times: %q", "rejected by handler", c, n.Error)
	}
}

func TestRegisterRegisterFails(t *testing.T) {
	e := newEnv(t, nil)
	p := e.serve("demo", demoInfo("demo-1"), registrationtest.Options{})
	var inActual bool
	e.handler.SetHook(func(ctx context.Context, c registrationtest.Call) error {
		if c.Method == registrationtest.MethodRegister {
			_, inActual = e.actual.Get(p.Path())
			return errors.New("device busy")
		}
		return nil
	})
	err := e.register(p.Path())
	// An error that is not the handler's decision is the handler's failure, not a rejection.
	if !errors.Is(err, registration.ErrHandlerFailed) || errors.Is(err, registration.ErrRejected) ||
		!strings.Contains(err.Error(), "RegisterPlugin of plugin demo-1") || !strings.Contains(err.Error(), "device busy") {
		t.Fatalf("Register error = %v, want ErrHandlerFailed from RegisterPlugin", err)
	}
	if !inActual {
		t.Fatal("plugin was not in the actual state while RegisterPlugin ran")
	}
	if e.actual.Len() != 0 {
		t.Fatal("plugin stays in the actual state after RegisterPlugin failed")
	}
	if n := p.WaitNotification(t, wait); n.Registered || !strings.Contains(n.Error, "device busy") {
		t.Fatalf("notification = %+v", n)
	}
}

func TestRegisterHandlerTimeout(t *testing.T) {
	e := newEnv(t, func(c *registrar.Config) { c.HandlerTimeout = 50 * time.Millisecond })
	e.handler.SetHook(func(ctx context.Context, c registrationtest.Call) error {
		<-ctx.Done()
		return ctx.Err()
	})
	p := e.serve("demo", demoInfo("demo-1"), registrationtest.Options{})
	err := e.register(p.Path())
	if !errors.Is(err, registration.ErrHandlerFailed) || errors.Is(err, registration.ErrRejected) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Register error = %v, want ErrHandlerFailed and DeadlineExceeded, not a rejection", err)
	}
	if n := p.WaitNotification(t, wait); n.Registered || !strings.HasPrefix(n.Error, "handler failed: ") {
		t.Fatalf("notification = %+v, want the plugin told that the handler failed", n)
	}
}

func TestRegisterHandlerPanics(t *testing.T) {
	e := newEnv(t, nil)
	e.handler.SetHook(func(ctx context.Context, c registrationtest.Call) error { panic("boom") })
	p := e.serve("demo", demoInfo("demo-1"), registrationtest.Options{})
	if err := e.register(p.Path()); !errors.Is(err, registration.ErrHandlerFailed) || !strings.Contains(err.Error(), "panicked: boom") {
		t.Fatalf("Register error = %v, want ErrHandlerFailed naming the panic", err)
	}
}

func TestRegisterNotifyTrueFailsRollsBack(t *testing.T) {
	e := newEnv(t, nil)
	p := e.serve("demo", demoInfo("demo-1"), registrationtest.Options{Notify: registrationtest.NotifyFail})
	err := e.register(p.Path())
	if !errors.Is(err, registration.ErrNotifyFailed) {
		t.Fatalf("Register error = %v, want ErrNotifyFailed", err)
	}
	if e.actual.Len() != 0 {
		t.Fatal("plugin stays in the actual state after Notify(true) failed")
	}
	if d := e.handler.CallsTo(registrationtest.MethodDeRegister); len(d) != 1 || d[0].Info.Name != "demo-1" {
		t.Fatalf("DeRegisterPlugin calls = %+v, want one", d)
	}
}

func TestRegisterNotifyHangs(t *testing.T) {
	e := newEnv(t, func(c *registrar.Config) { c.NotifyTimeout = 100 * time.Millisecond })
	p := e.serve("demo", demoInfo("demo-1"), registrationtest.Options{Notify: registrationtest.NotifyHang})
	err := e.register(p.Path())
	if !errors.Is(err, registration.ErrNotifyFailed) || !strings.Contains(err.Error(), "DeadlineExceeded") {
		t.Fatalf("Register error = %v, want ErrNotifyFailed after the deadline", err)
	}
	if e.actual.Len() != 0 || len(e.handler.CallsTo(registrationtest.MethodDeRegister)) != 1 {
		t.Fatal("hung notification was not rolled back")
	}
}

func TestRegisterNotifyFalseHangs(t *testing.T) {
	e := newEnv(t, func(c *registrar.Config) { c.NotifyTimeout = 100 * time.Millisecond })
	e.handler.SetError(registrationtest.MethodValidate, fmt.Errorf("%w: no", registration.ErrRejected))
	p := e.serve("demo", demoInfo("demo-1"), registrationtest.Options{Notify: registrationtest.NotifyHang})
	if err := e.register(p.Path()); !errors.Is(err, registration.ErrRejected) {
		t.Fatalf("Register error = %v, want ErrRejected (a hung Notify(false) changes nothing)", err)
	}
}

func TestRegisterPluginDiesInNotifyFalse(t *testing.T) {
	e := newEnv(t, nil)
	info := demoInfo("demo-1")
	info.Type = "CSIPlugin" // no handler
	p := e.serve("demo", info, registrationtest.Options{Notify: registrationtest.NotifyExitOnFalse})
	if err := e.register(p.Path()); !errors.Is(err, registration.ErrNoHandler) {
		t.Fatalf("Register error = %v, want ErrNoHandler (the plugin's death changes nothing)", err)
	}
	if !p.Exited() {
		t.Fatal("fake plugin did not exit")
	}
	e.logs.wantOnce(t, slog.LevelWarn, "NotifyRegistrationStatus(false) failed", "socket", p.Path())
	// Its socket file stays, dead: the next attempt finds nobody listening.
	err := e.reg.Register(context.Background(), state.Socket{Path: p.Path(), Seen: time.Now().Add(-time.Minute)})
	if !errors.Is(err, registration.ErrUnreachable) {
		t.Fatalf("second Register error = %v, want ErrUnreachable", err)
	}
}

func TestRegisterDRANotifyFalseError(t *testing.T) {
	e := newEnv(t, nil)
	e.handler.SetError(registrationtest.MethodValidate, fmt.Errorf("%w: no", registration.ErrRejected))
	p := e.serve("demo", demoInfo("demo-1"), registrationtest.Options{Notify: registrationtest.NotifyFailFalse})
	if err := e.register(p.Path()); !errors.Is(err, registration.ErrRejected) || errors.Is(err, registration.ErrNotifyFailed) {
		t.Fatalf("Register error = %v, want ErrRejected only", err)
	}
	// The plugin keeps running and accepts a later registration.
	e.handler.SetError(registrationtest.MethodValidate, nil)
	if err := e.register(p.Path()); err != nil {
		t.Fatalf("second Register: %v", err)
	}
}

// staleSocket leaves a socket file with nobody listening, as a killed plugin does.
func staleSocket(t *testing.T, path string) {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
}

func TestRegisterStaleSocket(t *testing.T) {
	e := newEnv(t, func(c *registrar.Config) { c.ListenGrace = 100 * time.Millisecond })
	path := e.path("stale")
	staleSocket(t, path)

	for _, seen := range []time.Time{time.Now().Add(-time.Minute), time.Now()} {
		start := time.Now()
		err := e.reg.Register(context.Background(), state.Socket{Path: path, Seen: seen})
		if !errors.Is(err, registration.ErrUnreachable) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "nobody is listening") {
			t.Fatalf("Register error = %v, want ErrUnreachable naming the socket", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("Register took %v on a stale socket", d)
		}
	}
	e.logs.wantLevel(t, slog.LevelDebug, "plugin unreachable", 2)
}

func TestRegisterMissingSocket(t *testing.T) {
	e := newEnv(t, nil)
	err := e.register(e.path("gone"))
	if !errors.Is(err, registration.ErrUnreachable) || !strings.Contains(err.Error(), e.path("gone")) {
		t.Fatalf("Register error = %v, want ErrUnreachable", err)
	}
}

func TestRegisterListensLate(t *testing.T) {
	e := newEnv(t, nil)
	p := e.serve("late", demoInfo("late-1"), registrationtest.Options{ListenDelay: 50 * time.Millisecond})
	if err := e.register(p.Path()); err != nil {
		t.Fatalf("Register on a socket that listens 50 ms after bind: %v", err)
	}
	if n := p.WaitNotification(t, wait); !n.Registered {
		t.Fatalf("notification = %+v", n)
	}
}

func TestRegisterGetInfoHangs(t *testing.T) {
	e := newEnv(t, func(c *registrar.Config) { c.GetInfoTimeout = 100 * time.Millisecond })
	p := e.serve("demo", demoInfo("demo-1"), registrationtest.Options{GetInfoHang: true})
	err := e.register(p.Path())
	if !errors.Is(err, registration.ErrUnreachable) || !strings.Contains(err.Error(), "GetInfo") || !strings.Contains(err.Error(), p.Path()) {
		t.Fatalf("Register error = %v, want ErrUnreachable from GetInfo", err)
	}
	if len(p.Notifications()) != 0 {
		t.Fatal("unreachable plugin was notified")
	}
}

func TestRegisterListensButNeverAnswers(t *testing.T) {
	e := newEnv(t, func(c *registrar.Config) { c.GetInfoTimeout = 100 * time.Millisecond })
	for _, accept := range []bool{false, true} {
		path := e.path(fmt.Sprint("mute", accept))
		ln, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		if accept {
			wg.Go(func() {
				c, err := ln.Accept()
				if err == nil {
					defer c.Close()
					var b [1]byte
					for err == nil {
						_, err = c.Read(b[:]) // read, never answer, until the client hangs up
					}
				}
			})
		}
		err = e.register(path)
		ln.Close()
		wg.Wait()
		if !errors.Is(err, registration.ErrUnreachable) || !strings.Contains(err.Error(), path) {
			t.Fatalf("accept=%v: Register error = %v, want ErrUnreachable", accept, err)
		}
	}
}

func TestRegisterNotAGRPCServer(t *testing.T) {
	e := newEnv(t, nil)
	path := e.path("http")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		c, err := ln.Accept()
		if err == nil {
			c.Read(make([]byte, 4096)) // the request, so that closing does not reset the connection
			c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
			c.Close()
		}
	})
	err = e.register(path)
	ln.Close()
	wg.Wait()
	// Something answered, but not in gRPC: a protocol error, not a plugin nobody listens for.
	if !errors.Is(err, registration.ErrProtocol) || !strings.Contains(err.Error(), "HTTP/1.1") {
		t.Fatalf("Register error = %v, want ErrProtocol saying it looked like HTTP/1.1", err)
	}
}

func TestRegisterContextCancelled(t *testing.T) {
	e := newEnv(t, nil)
	p := e.serve("demo", demoInfo("demo-1"), registrationtest.Options{GetInfoHang: true})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	err := e.reg.Register(ctx, state.Socket{Path: p.Path(), Seen: time.Now()})
	if !errors.Is(err, registration.ErrUnreachable) || !strings.Contains(err.Error(), "Canceled") {
		t.Fatalf("Register error = %v, want ErrUnreachable (canceled)", err)
	}
}

func TestDeregister(t *testing.T) {
	e := newEnv(t, nil)
	p := e.serve("demo", demoInfo("demo-1"), registrationtest.Options{})
	if err := e.register(p.Path()); err != nil {
		t.Fatal(err)
	}
	rec, _ := e.actual.Get(p.Path())
	p.Kill() // deregistration does not talk to the plugin
	if err := e.reg.Deregister(context.Background(), rec); err != nil {
		t.Fatalf("Deregister: %v", err)
	}
	if e.actual.Len() != 0 {
		t.Fatal("plugin stays in the actual state")
	}
	d := e.handler.CallsTo(registrationtest.MethodDeRegister)
	if len(d) != 1 || d[0].Info.Name != "demo-1" || d[0].Info.Socket != p.Path() || d[0].Info.Endpoint != "/run/demo-1/api.sock" {
		t.Fatalf("DeRegisterPlugin calls = %+v", d)
	}
	e.logs.wantOnce(t, slog.LevelInfo, "plugin deregistered", "plugin_type", testType, "plugin", "demo-1", "socket", p.Path())
}

func TestDeregisterHandlerFails(t *testing.T) {
	e := newEnv(t, nil)
	p := e.serve("demo", demoInfo("demo-1"), registrationtest.Options{})
	if err := e.register(p.Path()); err != nil {
		t.Fatal(err)
	}
	rec, _ := e.actual.Get(p.Path())
	e.handler.SetError(registrationtest.MethodDeRegister, errors.New("still mounted"))
	err := e.reg.Deregister(context.Background(), rec)
	if err == nil || !strings.Contains(err.Error(), "still mounted") || !strings.Contains(err.Error(), p.Path()) {
		t.Fatalf("Deregister error = %v, want the handler's error naming the socket", err)
	}
	if e.actual.Len() != 0 {
		t.Fatal("plugin stays in the actual state after its handler failed to deregister it")
	}
}

// TestRegisterLeavesNoGoroutine checks that no client-side goroutine outlives Register, for
// every kind of outcome.
func TestRegisterLeavesNoGoroutine(t *testing.T) {
	e := newEnv(t, func(c *registrar.Config) {
		c.NotifyTimeout = 50 * time.Millisecond
		c.GetInfoTimeout = 50 * time.Millisecond
	})
	other := demoInfo("x")
	other.Type = "none"
	plugins := []*registrationtest.Plugin{
		e.serve("ok", demoInfo("ok"), registrationtest.Options{}),
		e.serve("nohandler", other, registrationtest.Options{Notify: registrationtest.NotifyExitOnFalse}),
		e.serve("hang", demoInfo("hang"), registrationtest.Options{Notify: registrationtest.NotifyHang}),
		e.serve("infohang", demoInfo("infohang"), registrationtest.Options{GetInfoHang: true}),
		e.serve("bad", registrationtest.Info{Type: testType}, registrationtest.Options{}),
	}
	// The plugins' servers are running; each connection's goroutines, on either side, end
	// when Register closes it.
	before := goleak.IgnoreCurrent()
	for _, p := range plugins {
		e.register(p.Path())
		testwait.NoLeaks(t, before)
	}
}

// TestRegisterManyAtOnce registers many plugins concurrently, end to end.
func TestRegisterManyAtOnce(t *testing.T) {
	e := newEnv(t, nil)
	const n = 200
	plugins := make([]*registrationtest.Plugin, n)
	for i := range plugins {
		plugins[i] = e.serve(fmt.Sprint("p", i), demoInfo(fmt.Sprint("p", i)), registrationtest.Options{})
	}
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for _, p := range plugins {
		wg.Go(func() { errs <- e.register(p.Path()) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if e.actual.Len() != n {
		t.Fatalf("%d plugins registered, want %d", e.actual.Len(), n)
	}
	for _, p := range plugins {
		if notes := p.Notifications(); len(notes) != 1 || !notes[0].Registered {
			t.Fatalf("%s: notifications %+v", p.Path(), notes)
		}
	}
}

func TestNewRequiresStateAndHandlers(t *testing.T) {
	if _, err := registrar.New(registrar.Config{}); err == nil {
		t.Fatal("New accepted a config without Handlers and Actual")
	}
}

// logRecorder is a slog.Handler that keeps every record, attributes flattened.
type logRecorder struct {
	mu      sync.Mutex
	records []logRecord
	attrs   []slog.Attr
}

type logRecord struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, a := range l.attrs {
		rec.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool { rec.attrs[a.Key] = a.Value.String(); return true })
	l.records = append(l.records, rec)
	return nil
}

func (l *logRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	l.mu.Lock()
	defer l.mu.Unlock()
	return &logView{root: l, attrs: append(slices.Clone(l.attrs), as...)}
}

func (l *logRecorder) WithGroup(string) slog.Handler { return l }

// logView is a logRecorder with attributes added, writing into the same records.
type logView struct {
	root  *logRecorder
	attrs []slog.Attr
}

func (v *logView) Enabled(context.Context, slog.Level) bool { return true }

func (v *logView) Handle(ctx context.Context, r slog.Record) error {
	r2 := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r2.AddAttrs(v.attrs...)
	r.Attrs(func(a slog.Attr) bool { r2.AddAttrs(a); return true })
	return v.root.Handle(ctx, r2)
}

func (v *logView) WithAttrs(as []slog.Attr) slog.Handler {
	return &logView{root: v.root, attrs: append(slices.Clone(v.attrs), as...)}
}

func (v *logView) WithGroup(string) slog.Handler { return v }

// wantOnce checks that exactly one record has msg, at level, with the given key/value pairs.
func (l *logRecorder) wantOnce(t *testing.T, level slog.Level, msg string, kv ...string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var found []logRecord
	for _, r := range l.records {
		if r.msg == msg {
			found = append(found, r)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d log records %q, want 1 (all: %+v)", len(found), msg, l.records)
	}
	if found[0].level != level {
		t.Fatalf("log %q at level %v, want %v", msg, found[0].level, level)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if got := found[0].attrs[kv[i]]; got != kv[i+1] {
			t.Fatalf("log %q: %s = %q, want %q", msg, kv[i], got, kv[i+1])
		}
	}
}

// wantLevel checks that n records have msg, all at level.
func (l *logRecorder) wantLevel(t *testing.T, level slog.Level, msg string, n int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	count := 0
	for _, r := range l.records {
		if r.msg == msg {
			count++
			if r.level != level {
				t.Fatalf("log %q at level %v, want %v", msg, r.level, level)
			}
		}
	}
	if count != n {
		t.Fatalf("%d log records %q, want %d", count, msg, n)
	}
}

func TestRegisterLargestAnswer(t *testing.T) {
	e := newEnv(t, nil)
	info := registrationtest.Info{
		Type:     testType,
		Name:     strings.Repeat("n", registration.MaxNameLen),
		Endpoint: strings.Repeat("e", registration.MaxEndpointLen),
		Versions: slices.Repeat([]string{strings.Repeat("v", registration.MaxVersionLen)}, registration.MaxVersions),
	}
	p := e.serve("big", info, registrationtest.Options{}) // about 21 KiB: more than one HTTP/2 frame
	if err := e.register(p.Path()); err != nil {
		t.Fatalf("Register with every field at its limit: %v", err)
	}
	if got, _ := e.actual.Get(p.Path()); len(got.Versions) != registration.MaxVersions {
		t.Fatalf("%d versions recorded", len(got.Versions))
	}
}

func TestRegisterOversizedAnswer(t *testing.T) {
	e := newEnv(t, nil)
	info := registrationtest.Info{Type: testType, Name: "x", Versions: slices.Repeat([]string{strings.Repeat("v", 1000)}, 80)}
	p := e.serve("huge", info, registrationtest.Options{})
	err := e.register(p.Path())
	if !errors.Is(err, registration.ErrInvalidInfo) || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("Register error = %v, want ErrInvalidInfo for an answer over the size limit", err)
	}
}

// A daemon out of file descriptors says so, with its limit, instead of blaming the plugin
// with a bare "too many open files". Run in a child process: the limit is the process's.
func TestDialOutOfDescriptorsSaysSo(t *testing.T) {
	if os.Getenv("WASMHOST_TEST_FD_CHILD") != "1" {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestDialOutOfDescriptorsSaysSo$", "-test.v")
		cmd.Env = append(os.Environ(), "WASMHOST_TEST_FD_CHILD=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "--- PASS: TestDialOutOfDescriptorsSaysSo") {
			t.Fatalf("child did not run the test:\n%s", out)
		}
		return
	}
	e := newEnv(t, nil)
	e.serve("plugin", demoInfo("plugin"), registrationtest.Options{})
	lim := syscall.Rlimit{Cur: 64, Max: 64}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skipf("cannot lower the descriptor limit: %v", err)
	}
	var held []*os.File
	defer func() {
		for _, f := range held {
			f.Close()
		}
	}()
	fill := func() {
		for {
			f, err := os.Open(os.DevNull)
			if err != nil {
				return
			}
			held = append(held, f)
		}
	}
	// The runtime may close a descriptor of its own between the fill and the dial (on a loaded
	// machine the dial then succeeds and the plugin cannot accept): fill again and retry.
	var err error
	for range 5 {
		fill()
		if err = e.register(e.path("plugin")); err == nil || strings.Contains(err.Error(), "out of file descriptors") {
			break
		}
	}
	if err == nil {
		t.Fatal("registered with no descriptor left")
	}
	for _, want := range []string{e.path("plugin"), "out of file descriptors", "limit 64", "LimitNOFILE"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
