package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
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
)

const wait = 10 * time.Second

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startPlugin runs the example plugin in-process until the test ends, and returns its socket
// and its log.
func startPlugin(t *testing.T, cfg config) (string, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	readyc := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, cfg, slog.New(slog.NewTextHandler(logs, nil)), func(s string) { readyc <- s })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	select {
	case s := <-readyc:
		return s, logs
	case err := <-done:
		t.Fatalf("run returned before serving: %v", err)
	case <-time.After(wait):
		t.Fatal("plugin not serving")
	}
	return "", nil
}

func newRegistrar(t *testing.T, pluginType string, h registration.Handler) (*registrar.Registrar, *state.Actual) {
	t.Helper()
	handlers := registration.NewRegistry()
	handlers.Set(pluginType, h)
	actual := state.NewActual()
	r, err := registrar.New(registrar.Config{Handlers: handlers, Actual: actual})
	if err != nil {
		t.Fatal(err)
	}
	return r, actual
}

func TestExamplePluginRegisters(t *testing.T) {
	dir := registrationtest.SocketDir(t)
	cfg := config{socketDir: dir, pluginTyp: "example.com/demo", name: "demo-1", versions: []string{"v1", "v2"}}
	socket, logs := startPlugin(t, cfg)
	if socket != filepath.Join(dir, "demo-1.sock") {
		t.Fatalf("socket at %s", socket)
	}
	h := registrationtest.NewRecordingHandler()
	reg, actual := newRegistrar(t, "example.com/demo", h)
	if err := reg.Register(context.Background(), state.Socket{Path: socket, Seen: time.Now()}); err != nil {
		t.Fatalf("Register: %v", err)
	}
	p, ok := actual.Get(socket)
	if !ok || p.Name != "demo-1" || p.Endpoint != socket || !slices.Equal(p.Versions, []string{"v1", "v2"}) {
		t.Fatalf("actual state: %+v (present %v)", p, ok)
	}
	// The plugin logs inside NotifyRegistrationStatus, before answering: the line is there
	// when Register returns.
	if !strings.Contains(logs.String(), "registered by the daemon") {
		t.Fatalf("plugin log lacks the notification:\n%s", logs)
	}
}

func TestExamplePluginRefusedKeepsServing(t *testing.T) {
	dir := registrationtest.SocketDir(t)
	socket, logs := startPlugin(t, config{socketDir: dir, pluginTyp: "example.com/demo", name: "demo-2", endpoint: "/run/demo.sock"})
	h := registrationtest.NewRecordingHandler()
	h.SetError(registrationtest.MethodValidate, fmt.Errorf("%w: not today", registration.ErrRejected))
	reg, _ := newRegistrar(t, "example.com/demo", h)
	s := state.Socket{Path: socket, Seen: time.Now()}
	if err := reg.Register(context.Background(), s); !errors.Is(err, registration.ErrRejected) {
		t.Fatalf("Register error = %v, want ErrRejected", err)
	}
	if !strings.Contains(logs.String(), "not today") {
		t.Fatalf("plugin log lacks the reason:\n%s", logs)
	}
	h.SetError(registrationtest.MethodValidate, nil)
	if err := reg.Register(context.Background(), s); err != nil {
		t.Fatalf("second Register: %v", err)
	}
	if c := h.CallsTo(registrationtest.MethodRegister); len(c) != 1 || c[0].Info.Endpoint != "/run/demo.sock" {
		t.Fatalf("RegisterPlugin calls: %+v", c)
	}
}

func TestExamplePluginReplacesStaleSocket(t *testing.T) {
	dir := registrationtest.SocketDir(t)
	stale := filepath.Join(dir, "demo.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	socket, _ := startPlugin(t, config{socketDir: dir, pluginTyp: "t", name: "demo", versions: []string{"v1"}})
	reg, _ := newRegistrar(t, "t", registrationtest.NewRecordingHandler())
	if err := reg.Register(context.Background(), state.Socket{Path: socket, Seen: time.Now()}); err != nil {
		t.Fatalf("Register: %v", err)
	}
}

func TestExamplePluginRefusesToRemoveAFile(t *testing.T) {
	dir := registrationtest.SocketDir(t)
	if err := os.WriteFile(filepath.Join(dir, "demo.sock"), []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := run(context.Background(), config{socketDir: dir, pluginTyp: "t", name: "demo"}, slog.New(slog.DiscardHandler), nil)
	if err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("run error = %v, want a refusal to remove a regular file", err)
	}
}

// TestExamplePluginExitsOnSIGTERM runs the real program (this test binary, re-executed as
// the plugin), registers it, sends SIGTERM and checks that it exits cleanly and removes its
// socket.
func TestExamplePluginExitsOnSIGTERM(t *testing.T) {
	dir := registrationtest.SocketDir(t)
	cmd := exec.Command(os.Args[0], "--socket-dir", dir, "--type", "example.com/demo", "--name", "demo-1", "--versions", "v1, v2")
	cmd.Env = append(os.Environ(), "WH_EXAMPLE_PLUGIN=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	finished := false
	t.Cleanup(func() {
		if !finished {
			cmd.Process.Kill()
			for range lines {
			}
			<-exited
		}
	})
	expect := func(substr string) {
		t.Helper()
		timeout := time.After(wait)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("plugin exited before logging %q", substr)
				}
				if strings.Contains(l, substr) {
					return
				}
			case <-timeout:
				t.Fatalf("plugin did not log %q", substr)
			}
		}
	}
	expect("plugin serving")
	socket := filepath.Join(dir, "demo-1.sock")
	reg, actual := newRegistrar(t, "example.com/demo", registrationtest.NewRecordingHandler())
	if err := reg.Register(context.Background(), state.Socket{Path: socket, Seen: time.Now()}); err != nil {
		t.Fatalf("Register: %v", err)
	}
	if p, _ := actual.Get(socket); !slices.Equal(p.Versions, []string{"v1", "v2"}) {
		t.Fatalf("versions %q", p.Versions)
	}
	expect("registered by the daemon")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	expect("plugin stopped")
	for range lines {
	}
	finished = true
	if err := <-exited; err != nil {
		t.Fatalf("plugin exit: %v", err)
	}
	if _, err := os.Lstat(socket); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("socket left behind: %v", err)
	}
}

// TestMain runs the program itself when re-executed by TestExamplePluginExitsOnSIGTERM.
func TestMain(m *testing.M) {
	if os.Getenv("WH_EXAMPLE_PLUGIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}
