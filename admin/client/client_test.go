package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/wasmhost/wasmhost/admin/client"
	adminv1 "github.com/wasmhost/wasmhost/admin/v1"
)

// fakeAdmin answers GetStatus, refuses ListHandlers, never answers ListPlugins, and streams two events on WatchPlugins
// before it ends the stream cleanly or, with failWatch, with an error.
type fakeAdmin struct {
	adminv1.UnimplementedAdminServer
	failWatch bool
}

func (fakeAdmin) GetStatus(context.Context, *adminv1.GetStatusRequest) (*adminv1.Status, error) {
	return &adminv1.Status{Version: "v0.0.0-test", Ready: true}, nil
}

// ListPlugins never answers: it waits for the caller to give up.
func (fakeAdmin) ListPlugins(ctx context.Context, _ *adminv1.ListPluginsRequest) (*adminv1.ListPluginsResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (f fakeAdmin) WatchPlugins(_ *adminv1.WatchPluginsRequest, s grpc.ServerStreamingServer[adminv1.PluginEvent]) error {
	for _, typ := range []adminv1.EventType{adminv1.EventType_EVENT_TYPE_ADDED, adminv1.EventType_EVENT_TYPE_SYNCED} {
		if err := s.Send(&adminv1.PluginEvent{Type: typ}); err != nil {
			return err
		}
	}
	if f.failWatch {
		return status.Error(codes.Unavailable, "shutting down")
	}
	return nil
}

// tempDir is a short directory of its own (socket paths are limited to 108 bytes).
func tempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "whc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// serve runs srv on a fresh unix socket until the test ends, and returns the socket.
func serve(t *testing.T, srv adminv1.AdminServer) string {
	t.Helper()
	sock := filepath.Join(tempDir(t), "admin.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	adminv1.RegisterAdminServer(s, srv)
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		s.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return sock
}

func dial(t *testing.T, sock string) *client.Client {
	t.Helper()
	c, err := client.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestCalls(t *testing.T) {
	sock := serve(t, fakeAdmin{})
	c := dial(t, sock)
	if c.SocketPath() != sock {
		t.Errorf("SocketPath() = %q, want %q", c.SocketPath(), sock)
	}

	st, err := c.GetStatus(t.Context(), &adminv1.GetStatusRequest{})
	if err != nil || st.GetVersion() != "v0.0.0-test" || !st.GetReady() {
		t.Fatalf("GetStatus = %v, %v", st, err)
	}

	// An error the daemon answers says so, and keeps its gRPC code.
	_, err = c.ListHandlers(t.Context(), &adminv1.ListHandlersRequest{})
	if want := "the daemon at " + sock + " answered: Unimplemented: method ListHandlers not implemented"; err == nil || err.Error() != want {
		t.Errorf("ListHandlers: %v\nwant: %s", err, want)
	}
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("status.Code = %s, want Unimplemented", status.Code(err))
	}

	// A caller that stops waiting is told the daemon did not answer, and why it stopped.
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err = c.ListPlugins(ctx, &adminv1.ListPluginsRequest{})
	if want := "no answer from the daemon at " + sock + ": context deadline exceeded"; err == nil || err.Error() != want {
		t.Errorf("ListPlugins past its deadline: %v\nwant: %s", err, want)
	}
	if !errors.Is(err, context.DeadlineExceeded) || status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("ListPlugins past its deadline: %v, want it to match context.DeadlineExceeded, code DeadlineExceeded", err)
	}

	// A stream ends with io.EOF, as any gRPC stream does.
	stream, err := c.WatchPlugins(t.Context(), &adminv1.WatchPluginsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var types []adminv1.EventType
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		types = append(types, ev.GetType())
	}
	if len(types) != 2 || types[1] != adminv1.EventType_EVENT_TYPE_SYNCED {
		t.Errorf("events %v, want ADDED, SYNCED", types)
	}
}

func TestStreamError(t *testing.T) {
	sock := serve(t, fakeAdmin{failWatch: true})
	c := dial(t, sock)
	stream, err := c.WatchPlugins(t.Context(), &adminv1.WatchPluginsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		_, err = stream.Recv()
		if err != nil {
			break
		}
	}
	if want := "the daemon at " + sock + " answered: Unavailable: shutting down"; err.Error() != want {
		t.Errorf("Recv: %v\nwant: %s", err, want)
	}
	if s, ok := status.FromError(err); !ok || s.Code() != codes.Unavailable {
		t.Errorf("status.FromError = %v, %v; want Unavailable", s, ok)
	}
}

// TestNotRunning: no socket, or a socket nobody listens on, is the same to a user: no daemon.
func TestNotRunning(t *testing.T) {
	dir := tempDir(t)
	missing := filepath.Join(dir, "missing.sock")
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	notSocket := filepath.Join(dir, "file")
	if err := os.WriteFile(notSocket, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	for sock, want := range map[string]string{
		missing:   "no daemon is listening on " + missing + ": is wasmhost running? (start it with wasmhost run)",
		stale:     "no daemon is listening on " + stale + ": is wasmhost running? (start it with wasmhost run)",
		notSocket: notSocket + " is not a socket: is the admin socket path right?",
	} {
		c := dial(t, sock)
		_, err := c.GetStatus(t.Context(), &adminv1.GetStatusRequest{})
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: %v\nwant: %s", filepath.Base(sock), err, want)
		}
		if status.Code(err) != codes.Unavailable {
			t.Errorf("%s: status.Code = %s, want Unavailable", filepath.Base(sock), status.Code(err))
		}
		if errors.Is(err, client.ErrNotRunning) != (sock != notSocket) {
			t.Errorf("%s: errors.Is(ErrNotRunning) = %t", filepath.Base(sock), !(sock != notSocket))
		}
		// A stream says so when it opens, or at its first message.
		stream, err := c.WatchPlugins(t.Context(), &adminv1.WatchPluginsRequest{})
		if err == nil {
			_, err = stream.Recv()
		}
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: watch: %v\nwant: %s", filepath.Base(sock), err, want)
		}
	}

	if _, err := client.Dial(""); err == nil {
		t.Error("Dial(\"\") succeeded")
	}
}

// bigList answers ListPlugins with one plugin that publishes what the ABI allows at most (64
// keys of 64 KiB), over gRPC's default 4 MiB for a message.
type bigList struct {
	adminv1.UnimplementedAdminServer
}

func (bigList) ListPlugins(context.Context, *adminv1.ListPluginsRequest) (*adminv1.ListPluginsResponse, error) {
	pub := make(map[string]string, 64)
	for i := range 64 {
		pub[fmt.Sprintf("k%02d", i)] = strings.Repeat("v", 64<<10)
	}
	return &adminv1.ListPluginsResponse{Plugins: []*adminv1.Plugin{{Socket: "/r/big.sock", Published: pub}}}, nil
}

func TestListOverFourMiB(t *testing.T) {
	c := dial(t, serve(t, bigList{}))
	resp, err := c.ListPlugins(t.Context(), &adminv1.ListPluginsRequest{})
	if err != nil {
		t.Fatalf("ListPlugins of a plugin publishing 4 MiB: %v", err)
	}
	if n := len(resp.Plugins[0].Published); n != 64 {
		t.Errorf("%d published keys, want 64", n)
	}
}
