//go:build linux

package liveness_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/registration/liveness"
	"github.com/wasmhost/wasmhost/internal/state"
)

const wait = 10 * time.Second

// server is a unix socket that accepts connections and holds them, as an idle gRPC server does.
type server struct {
	ln    *net.UnixListener
	mu    sync.Mutex
	conns []net.Conn
	n     chan struct{} // one value per accepted connection
}

func listen(t *testing.T, path string) *server {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false) // a killed plugin leaves its file
	s := &server{ln: ln, n: make(chan struct{}, 16)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.n <- struct{}{}
		}
	}()
	t.Cleanup(s.kill)
	return s
}

func (s *server) accepted(t *testing.T) {
	t.Helper()
	select {
	case <-s.n:
	case <-time.After(wait):
		t.Fatal("no connection from the monitor")
	}
}

// dropConns closes the connections accepted so far (an idle timeout), and keeps listening.
func (s *server) dropConns() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.Close()
	}
	s.conns = nil
}

// kill stops listening and drops every connection, leaving the socket file: SIGKILL.
func (s *server) kill() {
	s.ln.Close()
	s.dropConns()
}

type deaths struct {
	mu   sync.Mutex
	seen []string
	ch   chan string
}

func run(t *testing.T) (*liveness.Monitor, *deaths) {
	t.Helper()
	d := &deaths{ch: make(chan string, 16)}
	m, err := liveness.New(liveness.Config{OnDead: func(path string, id state.Identity) {
		d.mu.Lock()
		d.seen = append(d.seen, path)
		d.mu.Unlock()
		d.ch <- path
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(wait):
			t.Error("Run did not return after its context was cancelled")
		}
	})
	return m, d
}

func tempDir(t *testing.T) string {
	dir, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func TestDeadPluginIsReported(t *testing.T) {
	path := filepath.Join(tempDir(t), "p.sock")
	s := listen(t, path)
	m, d := run(t)
	if err := m.Watch(t.Context(), path, state.Identity{Ino: 7}); err != nil {
		t.Fatal(err)
	}
	s.accepted(t)
	s.kill()
	select {
	case got := <-d.ch:
		if got != path {
			t.Fatalf("OnDead(%s), want %s", got, path)
		}
	case <-time.After(wait):
		t.Fatal("a killed plugin was not reported dead")
	}
	if n := m.Len(); n != 0 {
		t.Errorf("%d watched after the death, want 0", n)
	}
}

// A server that closes an idle connection but still listens is alive: the watch goes on with
// a new connection, and its death later is still seen.
func TestDroppedConnectionIsNotDeath(t *testing.T) {
	path := filepath.Join(tempDir(t), "p.sock")
	s := listen(t, path)
	m, d := run(t)
	if err := m.Watch(t.Context(), path, state.Identity{Ino: 7}); err != nil {
		t.Fatal(err)
	}
	s.accepted(t)
	s.dropConns()
	s.accepted(t) // the monitor came back
	select {
	case p := <-d.ch:
		t.Fatalf("OnDead(%s) for a server that only dropped a connection", p)
	default:
	}
	if n := m.Len(); n != 1 {
		t.Errorf("%d watched, want 1", n)
	}
	s.kill()
	select {
	case <-d.ch:
	case <-time.After(wait):
		t.Fatal("death after a dropped connection was not reported")
	}
}

func TestForgottenPluginIsNotReported(t *testing.T) {
	path := filepath.Join(tempDir(t), "p.sock")
	s := listen(t, path)
	m, d := run(t)
	if err := m.Watch(t.Context(), path, state.Identity{Ino: 7}); err != nil {
		t.Fatal(err)
	}
	s.accepted(t)
	m.Forget(path)
	s.kill()
	// The monitor's connection is gone with Forget. A wrong report would come no later than
	// that of a plugin watched and killed after it: wait for that one instead of a while.
	other := filepath.Join(filepath.Dir(path), "q.sock")
	q := listen(t, other)
	if err := m.Watch(t.Context(), other, state.Identity{Ino: 8}); err != nil {
		t.Fatal(err)
	}
	q.accepted(t)
	q.kill()
	select {
	case p := <-d.ch:
		if p != other {
			t.Fatalf("OnDead(%s) after Forget", p)
		}
	case <-time.After(wait):
		t.Fatalf("the plugin killed after the forgotten one was not reported dead either")
	}
	select {
	case p := <-d.ch:
		t.Fatalf("OnDead(%s) after Forget", p)
	default:
	}
}

// A plugin that died between its registration and the watch (nobody listens any more) is
// reported dead at once: it is not left registered.
func TestWatchOfNobodyReportsDeath(t *testing.T) {
	path := filepath.Join(tempDir(t), "p.sock")
	s := listen(t, path)
	s.kill()
	m, d := run(t)
	if err := m.Watch(t.Context(), path, state.Identity{}); err == nil {
		t.Fatal("Watch of a socket nobody listens on succeeded")
	}
	select {
	case got := <-d.ch:
		if got != path {
			t.Fatalf("OnDead(%s), want %s", got, path)
		}
	case <-time.After(wait):
		t.Fatal("a plugin gone before its watch began was not reported dead")
	}
}
