package main

// Helpers shared by the end-to-end tests (e2e_test.go) and the benchmarks (bench_test.go): a
// daemon built with newDaemon on temporary directories and run in-process, a log kept in
// memory and shown when a test fails, waits on conditions with deadlines, and the example
// WebAssembly handler built with the Go toolchain.

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/guestbuild"

	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/daemon"
	"github.com/wasmhost/wasmhost/internal/reconciler"
	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
	"github.com/wasmhost/wasmhost/internal/testwait"
)

// e2eWait bounds every wait of the end-to-end tests. It is generous on purpose: the tests
// run with -race on a loaded 2-core machine, and a wait only lasts this long when a test is
// about to fail anyway.
const e2eWait = 2 * time.Minute

// e2eDirs are the directories of one daemon: all under one short temporary directory
// (unix socket paths are limited to 108 bytes).
type e2eDirs struct {
	Base    string
	Socket  string // the socket directory the daemon watches
	Handler string // the .wasm handler directory
	State   string // compile cache and admin socket
}

// newE2EDirs makes the directories under a new temporary directory in root ("/tmp" for
// tests; "/dev/shm" puts the sockets on tmpfs for benchmarks), removed when tb ends.
func newE2EDirs(tb testing.TB, root string) e2eDirs {
	tb.Helper()
	base, err := os.MkdirTemp(root, "wh")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(base) })
	d := e2eDirs{
		Base:    base,
		Socket:  filepath.Join(base, "s"),
		Handler: filepath.Join(base, "h"),
		State:   filepath.Join(base, "st"),
	}
	for _, dir := range []string{d.Socket, d.Handler, d.State} {
		if err := os.Mkdir(dir, 0o700); err != nil {
			tb.Fatal(err)
		}
	}
	return d
}

// e2eConfig is the daemon's default configuration on dirs, with no metrics endpoint, short
// backoffs (so that retries happen within a test) and the safety-net passes made rare (so
// that what a test sees is caused by the events it made).
func e2eConfig(dirs e2eDirs) config.Config {
	cfg := config.Default()
	cfg.SocketDir = dirs.Socket
	cfg.HandlerDir = dirs.Handler
	cfg.StateDir = dirs.State
	cfg.Log.Level = "debug"
	cfg.Metrics.Listen = "off"
	cfg.Reconciler.InitialBackoff = config.Duration(200 * time.Millisecond)
	cfg.Reconciler.MaxBackoff = config.Duration(2 * time.Second)
	cfg.Reconciler.Resync = config.Duration(time.Hour)
	cfg.Watcher.Resync = config.Duration(time.Hour)
	return cfg
}

// testLog returns a logger that keeps the daemon's log in memory and prints it when tb has
// failed, after everything registered with Cleanup later has run (the daemon has stopped).
func testLog(tb testing.TB) *slog.Logger {
	tb.Helper()
	buf := &lockedBuffer{}
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("daemon log:\n%s", buf.String())
		}
	})
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// lockedBuffer is a bytes.Buffer safe for concurrent writers.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// runningDaemon is a daemon built with newDaemon and running in a goroutine.
type runningDaemon struct {
	tb     testing.TB
	d      *daemon.Daemon
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// startDaemon builds a daemon for cfg, lets prepare (if not nil) change it before it runs (to
// put native handlers into d.registry), and runs it until the test ends or stop is called.
// The test fails if run returns an error or does not return within e2eWait of being stopped.
func startDaemon(tb testing.TB, cfg config.Config, log *slog.Logger, prepare func(d *daemon.Daemon)) *runningDaemon {
	tb.Helper()
	d, err := daemon.New(context.Background(), cfg, log, "v0.0.0-test")
	if err != nil {
		tb.Fatalf("newDaemon: %v", err)
	}
	if prepare != nil {
		prepare(d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rd := &runningDaemon{tb: tb, d: d, cancel: cancel, done: make(chan error, 1)}
	go func() { rd.done <- d.Run(ctx) }()
	tb.Cleanup(func() {
		if err := rd.stop(); err != nil {
			tb.Errorf("daemon run: %v", err)
		}
	})
	return rd
}

// stop cancels the daemon's context and waits for run to return, and returns its error. It
// may be called more than once.
func (rd *runningDaemon) stop() error {
	rd.once.Do(func() {
		rd.cancel()
		select {
		case rd.err = <-rd.done:
		case <-time.After(e2eWait):
			rd.err = errors.New("run did not return within " + e2eWait.String() + " of its context being cancelled")
		}
	})
	return rd.err
}

// waitFor waits until cond holds (testwait.Until, within e2eWait).
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	testwait.UntilWithin(tb, e2eWait, what, cond)
}

// waitState waits until the reconciler reports socket in state, and returns its status.
func (rd *runningDaemon) waitState(socket string, state reconciler.State) reconciler.SocketStatus {
	rd.tb.Helper()
	var st reconciler.SocketStatus
	waitFor(rd.tb, "socket "+socket+" to be "+string(state), func() bool {
		var ok bool
		st, ok = rd.d.State().StatusOf(socket)
		return ok && st.State == state
	})
	return st
}

// waitGone waits until the reconciler no longer knows socket and it is not in the actual
// state.
func (rd *runningDaemon) waitGone(socket string) {
	rd.tb.Helper()
	waitFor(rd.tb, "socket "+socket+" to be forgotten", func() bool {
		_, known := rd.d.State().StatusOf(socket)
		_, actual := rd.d.State().Actual().Get(socket)
		return !known && !actual
	})
}

// pluginInfo is what the fake plugins answer: version v1, the endpoint left to default to
// the socket.
func pluginInfo(typ, name string) registrationtest.Info {
	return registrationtest.Info{Type: typ, Name: name, Versions: []string{"v1"}}
}

// wantNotification waits for the plugin's next notification and fails the test unless it
// says registered, and, for a refusal, unless its reason contains reason.
func wantNotification(tb testing.TB, p *registrationtest.Plugin, registered bool, reason string) registrationtest.Notification {
	tb.Helper()
	n := p.WaitNotification(tb, e2eWait)
	if n.Registered != registered || !strings.Contains(n.Error, reason) {
		tb.Fatalf("plugin %s: notification %+v, want registered=%v with a reason containing %q", p.Path(), n, registered, reason)
	}
	if registered && n.Error != "" {
		tb.Fatalf("plugin %s: Notify(true) with an error %q", p.Path(), n.Error)
	}
	return n
}

// callsFor returns the handler calls that concern socket, oldest first, as method names.
func callsFor(h *registrationtest.RecordingHandler, socket string) []string {
	var out []string
	for _, c := range h.Calls() {
		if c.Info.Socket == socket {
			out = append(out, c.Method)
		}
	}
	return out
}

// exampleWasm builds the shipped example handler (handlers-wasm/example, in C) as the Makefile
// does, into a temporary directory, and returns the module's bytes. It always builds (in well
// under a second), rather than use a handlers-wasm/example.wasm that may be stale.
func exampleWasm(tb testing.TB) []byte {
	tb.Helper()
	return guestbuild.ShippedBytes(tb, "example")
}

// withCustomSection returns a copy of wasm with a custom section appended: the same module,
// different bytes (and so a different SHA-256), to replace a handler file with a new version.
func withCustomSection(wasm []byte, name string, payload []byte) []byte {
	var body []byte
	body = appendULEB(body, uint64(len(name)))
	body = append(body, name...)
	body = append(body, payload...)
	out := slices.Clone(wasm)
	out = append(out, 0) // custom section id
	out = appendULEB(out, uint64(len(body)))
	return append(out, body...)
}

func appendULEB(b []byte, v uint64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			c |= 0x80
		}
		b = append(b, c)
		if v == 0 {
			return b
		}
	}
}
