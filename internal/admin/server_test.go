package admin_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/wasmhost/wasmhost/admin/client"
	adminv1 "github.com/wasmhost/wasmhost/admin/v1"
	"github.com/wasmhost/wasmhost/internal/admin"
	"github.com/wasmhost/wasmhost/internal/admin/admintest"
	"github.com/wasmhost/wasmhost/internal/session"
	"github.com/wasmhost/wasmhost/internal/state"
	"github.com/wasmhost/wasmhost/internal/testwait"
)

// testServer is a running admin server and what a test needs to talk to it.
type testServer struct {
	srv    *admin.Server
	path   string
	cancel context.CancelFunc
	done   chan error
}

// start runs a server over src in a fresh temp dir (the socket one directory down, so that
// Run creates it). Cleanup stops it, waits for Run and, once the test's clients are closed too,
// checks that no goroutine the test started is left.
func start(t *testing.T, src *admintest.Source, mod func(*admin.Config)) *testServer {
	t.Helper()
	before := goleak.IgnoreCurrent()
	// Registered first, so run last: after the clients' and the server's cleanups.
	t.Cleanup(func() { testwait.NoLeaks(t, before) })
	dir, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfg := admin.Config{
		Store:           src.Store(),
		Ready:           src.Ready,
		SocketPath:      filepath.Join(dir, "run", "admin.sock"),
		ShutdownTimeout: time.Second,
		Version:         "v9.9.9-test",
	}
	if mod != nil {
		mod(&cfg)
	}
	srv, err := admin.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ts := &testServer{srv: srv, path: cfg.SocketPath, cancel: cancel, done: make(chan error, 1)}
	go func() { ts.done <- srv.Run(ctx) }()
	t.Cleanup(func() { ts.stop(t) })
	return ts
}

// stop cancels Run and waits for it; it may be called more than once.
func (ts *testServer) stop(t *testing.T) {
	t.Helper()
	ts.cancel()
	if ts.done == nil {
		return
	}
	select {
	case err := <-ts.done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return 30 s after its context was cancelled")
	}
	ts.done = nil
	if _, err := os.Lstat(ts.path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket %s still there after Run returned (err %v)", ts.path, err)
	}
}

// dial connects to the server and waits until it answers.
func (ts *testServer) dial(t *testing.T, opts ...grpc.DialOption) adminv1.AdminClient {
	t.Helper()
	opts = append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// The server may not listen yet: retry soon, not after gRPC's default second.
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{
			BaseDelay: 5 * time.Millisecond, Multiplier: 1.6, MaxDelay: 50 * time.Millisecond,
		}}),
	}, opts...)
	conn, err := grpc.NewClient("unix://"+ts.path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := adminv1.NewAdminClient(conn)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if _, err := c.GetStatus(ctx, &adminv1.GetStatusRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("the server did not answer: %v", err)
	}
	return c
}

func plugin(sock string, st state.PluginState) admintest.Plugin {
	return admintest.Plugin{
		Socket:         "/plugins/" + sock,
		Type:           "CSIPlugin",
		Name:           strings.TrimSuffix(sock, "-reg.sock"),
		Endpoint:       "/plugins/" + sock,
		Versions:       []string{"1.0.0"},
		State:          st,
		LastTransition: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	}
}

func TestServerLists(t *testing.T) {
	src := &admintest.Source{}
	reg := plugin("b-reg.sock", state.StateRegistered)
	reg.Published = map[string]string{"node": "n1"}
	reg.HandlerFile, reg.HandlerSHA256 = "/h/csi.wasm", "abc123"
	reg.RegisteredAt = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	fail := plugin("a-reg.sock", state.StateFailing)
	fail.LastError, fail.Attempts = "registration: plugin unreachable", 3
	src.SetPlugins(reg, fail)
	src.SetHandlers(
		state.Handler{PluginTypes: []string{"DRAPlugin"}, File: "/h/dra.wasm", SHA256: "ff", ABIVersion: 1, Serving: true, Counters: state.HandlerCounters{Calls: 7, Traps: 1}},
		state.Handler{PluginTypes: []string{"CSIPlugin"}, File: "/h/csi.wasm", SHA256: "abc123", ABIVersion: 1, PoolSize: 4, Serving: true},
	)
	src.SetNotReady(errors.New("the socket directory has not been listed yet"))
	ts := start(t, src, nil)
	c := ts.dial(t)
	ctx := t.Context()

	fi, err := os.Lstat(ts.path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode = %v, want a socket with 0600", fi.Mode())
	}
	di, err := os.Stat(filepath.Dir(ts.path))
	if err != nil {
		t.Fatal(err)
	}
	if di.Mode().Perm() != 0o700 {
		t.Errorf("socket directory mode = %v, want 0700", di.Mode().Perm())
	}

	pl, err := c.ListPlugins(ctx, &adminv1.ListPluginsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pl.Plugins) != 2 {
		t.Fatalf("ListPlugins returned %d plugins, want 2", len(pl.Plugins))
	}
	a, b := pl.Plugins[0], pl.Plugins[1]
	if a.Socket != "/plugins/a-reg.sock" || b.Socket != "/plugins/b-reg.sock" {
		t.Errorf("plugins not sorted by socket: %s, %s", a.Socket, b.Socket)
	}
	if a.State != adminv1.PluginState_PLUGIN_STATE_FAILING || a.Attempts != 3 || a.LastError == "" || a.RegisteredAt != nil {
		t.Errorf("failing plugin = %v", a)
	}
	if b.State != adminv1.PluginState_PLUGIN_STATE_REGISTERED || b.Published["node"] != "n1" ||
		b.HandlerSha256 != "abc123" || !b.RegisteredAt.AsTime().Equal(reg.RegisteredAt) {
		t.Errorf("registered plugin = %v", b)
	}

	hl, err := c.ListHandlers(ctx, &adminv1.ListHandlersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(hl.Handlers) != 2 || hl.Handlers[0].File != "/h/csi.wasm" || hl.Handlers[0].PoolSize != 4 ||
		hl.Handlers[1].Traps != 1 {
		t.Errorf("ListHandlers = %v", hl.Handlers)
	}

	st, err := c.GetStatus(ctx, &adminv1.GetStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Version != "v9.9.9-test" || st.Ready || !strings.Contains(st.NotReadyReason, "not been listed") ||
		st.Plugins != 2 || st.PluginsByState["failing"] != 1 || st.PluginsByState["registered"] != 1 ||
		st.Handlers != 2 || st.StartedAt == nil || st.Uptime == nil {
		t.Errorf("GetStatus = %v", st)
	}
	src.SetNotReady(nil)
	if st, err := c.GetStatus(ctx, &adminv1.GetStatusRequest{}); err != nil || !st.Ready || st.NotReadyReason != "" {
		t.Errorf("GetStatus once ready = %v, %v", st, err)
	}
}

// recvUntilSynced reads the initial list of a watch and returns the plugins in it.
func recvUntilSynced(t *testing.T, w grpc.ServerStreamingClient[adminv1.PluginEvent]) []*adminv1.Plugin {
	t.Helper()
	var out []*adminv1.Plugin
	for {
		ev, err := w.Recv()
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		switch ev.Type {
		case adminv1.EventType_EVENT_TYPE_ADDED:
			out = append(out, ev.Plugin)
		case adminv1.EventType_EVENT_TYPE_SYNCED:
			return out
		default:
			t.Fatalf("watch: got %v before SYNCED", ev.Type)
		}
	}
}

func recvEvent(t *testing.T, w grpc.ServerStreamingClient[adminv1.PluginEvent]) *adminv1.PluginEvent {
	t.Helper()
	ev, err := w.Recv()
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	return ev
}

func TestWatchListThenChanges(t *testing.T) {
	src := &admintest.Source{}
	src.SetPlugins(plugin("b-reg.sock", state.StateRegistered), plugin("a-reg.sock", state.StatePending))
	ts := start(t, src, nil)
	c := ts.dial(t)

	w, err := c.WatchPlugins(t.Context(), &adminv1.WatchPluginsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	list := recvUntilSynced(t, w)
	if len(list) != 2 || list[0].Socket != "/plugins/a-reg.sock" || list[1].Socket != "/plugins/b-reg.sock" {
		t.Fatalf("initial list = %v", list)
	}

	// A change as it happens.
	a := plugin("a-reg.sock", state.StateRegistered)
	src.Upsert(a)
	ev := drainUntil(t, w, func(ev *adminv1.PluginEvent) bool {
		return ev.Plugin.GetState() == adminv1.PluginState_PLUGIN_STATE_REGISTERED
	})
	if ev.Type != adminv1.EventType_EVENT_TYPE_MODIFIED || ev.Plugin.Socket != a.Socket || ev.Time == nil {
		t.Fatalf("after a change: %v", ev)
	}

	// A new plugin is ADDED; nothing but a's own changes comes before it.
	c3 := plugin("c-reg.sock", state.StateWaitingForHandler)
	src.Upsert(c3)
	ev = drainUntil(t, w, func(ev *adminv1.PluginEvent) bool {
		if ev.Plugin.Socket == a.Socket && ev.Type == adminv1.EventType_EVENT_TYPE_MODIFIED {
			return false
		}
		return true
	})
	if ev.Type != adminv1.EventType_EVENT_TYPE_ADDED || ev.Plugin.Socket != c3.Socket {
		t.Fatalf("after a new plugin: %v", ev)
	}

	// Gone: DELETED with the last known state, marked gone.
	src.Remove(c3.Socket)
	ev = drainUntil(t, w, func(ev *adminv1.PluginEvent) bool { return ev.Type != adminv1.EventType_EVENT_TYPE_MODIFIED })
	if ev.Type != adminv1.EventType_EVENT_TYPE_DELETED || ev.Plugin.Socket != c3.Socket ||
		ev.Plugin.Name != "c" || ev.Plugin.State != adminv1.PluginState_PLUGIN_STATE_GONE {
		t.Fatalf("after a removal: %v", ev)
	}

	// A handler swap changes the view of the plugins of its type at once.
	src.SetHandlers(state.Handler{File: "/h/csi.wasm", SHA256: "0ld", PluginTypes: []string{"CSIPlugin"}, Serving: true})
	drainUntil(t, w, func(ev *adminv1.PluginEvent) bool { return ev.GetPlugin().GetHandlerSha256() == "0ld" })
	src.SetHandlers(state.Handler{File: "/h/csi.wasm", SHA256: "n3w", PluginTypes: []string{"CSIPlugin"}, Serving: true})
	ev = drainUntil(t, w, func(ev *adminv1.PluginEvent) bool { return ev.GetPlugin().GetHandlerSha256() == "n3w" })
	if ev.Type != adminv1.EventType_EVENT_TYPE_MODIFIED {
		t.Fatalf("after a handler swap: %v", ev)
	}

	// Two changes the watcher has not read yet arrive as one event per socket.
	b := plugin("b-reg.sock", state.StateFailing)
	b.LastError = "boom"
	src.Upsert(b)
	src.Remove(a.Socket)
	got := map[adminv1.EventType]string{}
	for len(got) < 2 {
		ev := recvEvent(t, w)
		got[ev.Type] = ev.Plugin.Socket
	}
	if got[adminv1.EventType_EVENT_TYPE_MODIFIED] != b.Socket || got[adminv1.EventType_EVENT_TYPE_DELETED] != a.Socket {
		t.Fatalf("after a change and a removal: %v", got)
	}

	// A second watcher sees the list as it is now.
	w2, err := c.WatchPlugins(t.Context(), &adminv1.WatchPluginsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if list := recvUntilSynced(t, w2); len(list) != 1 || list[0].Socket != b.Socket || list[0].LastError != "boom" {
		t.Fatalf("second watcher's list = %v", list)
	}
	if st, err := c.GetStatus(t.Context(), &adminv1.GetStatusRequest{}); err != nil || st.Watchers != 2 {
		t.Errorf("GetStatus watchers = %v, %v; want 2", st.GetWatchers(), err)
	}

	// Shutdown ends the stream with UNAVAILABLE.
	ts.stop(t)
	for {
		_, err := w.Recv()
		if err == nil {
			continue
		}
		if status.Code(err) != codes.Unavailable {
			t.Errorf("watch after shutdown: %v, want UNAVAILABLE", err)
		}
		break
	}
}

// drainUntil reads events until one satisfies ok, and returns it.
func drainUntil(t *testing.T, w grpc.ServerStreamingClient[adminv1.PluginEvent], ok func(*adminv1.PluginEvent) bool) *adminv1.PluginEvent {
	t.Helper()
	for {
		if ev := recvEvent(t, w); ok(ev) {
			return ev
		}
	}
}

// A watcher that never reads holds up neither the store nor the other watchers: the store
// keeps only the newest view of each socket for it, so when it reads again it catches up on
// the current state; and when it missed more removals than the store remembers, it is reset
// and starts over with the list.
func TestWatchStuckWatcher(t *testing.T) {
	const sock = "/plugins/p-reg.sock"
	total := 100_000
	if testing.Short() {
		total = 10_000
	}
	src := &admintest.Source{}
	src.Store().SetMaxTombstones(8)
	ts := start(t, src, nil)
	// Fixed flow-control windows (no BDP growth): a client that does not read fills them.
	small := []grpc.DialOption{grpc.WithInitialWindowSize(64 << 10), grpc.WithInitialConnWindowSize(64 << 10)}
	stuckC := ts.dial(t, small...)
	liveC := ts.dial(t, small...)
	stuck, err := stuckC.WatchPlugins(t.Context(), &adminv1.WatchPluginsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	recvUntilSynced(t, stuck)
	live, err := liveC.WatchPlugins(t.Context(), &adminv1.WatchPluginsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	recvUntilSynced(t, live)

	// The live watcher sees the attempts in order (coalesced when it reads slower than they
	// come) and reaches the last.
	liveErr := make(chan error, 1)
	go func() {
		cur := int64(0)
		for cur < int64(total) {
			ev, err := live.Recv()
			if err != nil {
				liveErr <- err
				return
			}
			got := int64(ev.GetPlugin().GetAttempts())
			if ev.Type == adminv1.EventType_EVENT_TYPE_RESET || got < cur {
				liveErr <- fmt.Errorf("live watcher: got %v attempt %d after attempt %d", ev.Type, got, cur)
				return
			}
			cur = got
		}
		liveErr <- nil
	}()
	for i := 1; i <= total; i++ {
		src.Upsert(admintest.Plugin{Socket: sock, Type: "CSIPlugin", Name: "p", State: state.StateFailing,
			LastError: strings.Repeat("x", 100), Attempts: i})
	}
	select {
	case err := <-liveErr:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the live watcher did not see the last attempt within 2 minutes")
	}

	// More removals than the store remembers, while the stuck watcher still does not read.
	for i := range 50 {
		other := fmt.Sprintf("/plugins/gone-%d-reg.sock", i)
		src.Upsert(admintest.Plugin{Socket: other, Type: "CSIPlugin", State: state.StatePending})
		src.Remove(other)
	}
	// The stuck watcher reads: what was in flight, never an older attempt after a newer one,
	// then RESET, and a list that is the state as it is now.
	cur := 0
	for sawReset := false; !sawReset; {
		ev := recvEvent(t, stuck)
		switch ev.Type {
		case adminv1.EventType_EVENT_TYPE_MODIFIED, adminv1.EventType_EVENT_TYPE_ADDED:
			if ev.Plugin.Socket == sock {
				if got := int(ev.Plugin.Attempts); got < cur {
					t.Fatalf("stuck watcher went back from attempt %d to %d", cur, got)
				} else {
					cur = got
				}
			}
		case adminv1.EventType_EVENT_TYPE_DELETED:
		case adminv1.EventType_EVENT_TYPE_RESET:
			sawReset = true
			if ev.Reason == "" {
				t.Error("RESET without a reason")
			}
		default:
			t.Fatalf("stuck watcher got %v before RESET", ev.Type)
		}
	}
	// The list is the state when the server noticed, which may be before the removals ended
	// (the transport buffers it): the watcher then converges on the current state.
	held := map[string]*adminv1.Plugin{}
	for _, p := range recvUntilSynced(t, stuck) {
		held[p.Socket] = p
	}
	for len(held) != 1 || held[sock] == nil || int(held[sock].Attempts) != total {
		ev := recvEvent(t, stuck)
		switch ev.Type {
		case adminv1.EventType_EVENT_TYPE_DELETED:
			delete(held, ev.Plugin.Socket)
		case adminv1.EventType_EVENT_TYPE_ADDED, adminv1.EventType_EVENT_TYPE_MODIFIED:
			held[ev.Plugin.Socket] = ev.Plugin
		case adminv1.EventType_EVENT_TYPE_RESET:
			clear(held)
		}
	}
	// And it follows changes again.
	src.Upsert(admintest.Plugin{Socket: sock, Type: "CSIPlugin", Name: "p", State: state.StateRegistered})
	drainUntil(t, stuck, func(ev *adminv1.PluginEvent) bool {
		return ev.Type == adminv1.EventType_EVENT_TYPE_MODIFIED && ev.Plugin.State == adminv1.PluginState_PLUGIN_STATE_REGISTERED
	})
}

func TestRunSocketInTheWay(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	run := func(path string) error {
		srv, err := admin.New(admin.Config{Store: state.New(), SocketPath: path, ShutdownTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		cancel() // listen, then stop at once
		return srv.Run(ctx)
	}

	// A stale socket (its server is gone) is replaced.
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	if err := run(stale); err != nil {
		t.Errorf("over a stale socket: %v", err)
	}

	// A live one is not.
	live := filepath.Join(dir, "live.sock")
	l, err = net.ListenUnix("unix", &net.UnixAddr{Name: live, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := run(live); !errors.Is(err, admin.ErrSocketInUse) {
		t.Errorf("over a live socket: %v, want ErrSocketInUse", err)
	}

	// Nor is a file that is not a socket.
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := run(file); !errors.Is(err, admin.ErrNotSocket) {
		t.Errorf("over a regular file: %v, want ErrNotSocket", err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "keep me" {
		t.Errorf("the regular file was touched: %q, %v", b, err)
	}
}

func TestNewConfig(t *testing.T) {
	if _, err := admin.New(admin.Config{}); !errors.Is(err, admin.ErrConfig) {
		t.Errorf("no Source: %v, want ErrConfig", err)
	}
	long := "/tmp/" + strings.Repeat("x", 120) + ".sock"
	if _, err := admin.New(admin.Config{Store: state.New(), SocketPath: long}); !errors.Is(err, admin.ErrConfig) {
		t.Errorf("long socket path: %v, want ErrConfig", err)
	}
	srv, err := admin.New(admin.Config{Store: state.New()})
	if err != nil {
		t.Fatal(err)
	}
	if srv.SocketPath() != admin.DefaultSocketPath {
		t.Errorf("SocketPath() = %q, want the default", srv.SocketPath())
	}
}

func TestRunTwice(t *testing.T) {
	ts := start(t, &admintest.Source{}, nil)
	ts.dial(t)
	if err := ts.srv.Run(t.Context()); !errors.Is(err, admin.ErrRunning) {
		t.Errorf("second Run: %v, want ErrRunning", err)
	}
}

// A status change costs no more with a watcher that does not read than without.
func BenchmarkStatusChangeStuckSubscriber(b *testing.B) {
	st := state.New()
	sub, _ := st.Subscribe()
	defer sub.Close()
	s := state.Status{Path: "/plugins/p-reg.sock", PluginType: "CSIPlugin", State: state.StateFailing}
	for i := 0; b.Loop(); i++ {
		s.Attempts = i
		st.SetStatus(s)
	}
}

// A watcher stuck in Send at shutdown does not keep Run from returning: after
// ShutdownTimeout its connection is closed, and no goroutine is left.
func TestRunStopsWithStuckWatcher(t *testing.T) {
	src := &admintest.Source{}
	ts := start(t, src, func(c *admin.Config) { c.ShutdownTimeout = 200 * time.Millisecond })
	c := ts.dial(t, grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	w, err := c.WatchPlugins(t.Context(), &adminv1.WatchPluginsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	recvUntilSynced(t, w)
	// Enough events to fill the flow-control windows and the buffer; the client reads none.
	for i := range 20_000 {
		src.Upsert(admintest.Plugin{Socket: "/plugins/p-reg.sock", State: state.StateFailing,
			LastError: strings.Repeat("x", 100), Attempts: i})
	}
	ts.stop(t) // checks that Run returns; start's cleanup, that no goroutine is left
}

// Names and values that are not UTF-8 (a socket file name is any bytes; a handler publishes
// what it likes) cannot go into a protobuf string as they are: they are escaped, and the list
// and the watch go on for every plugin.
func TestNotUTF8IsEscaped(t *testing.T) {
	src := &admintest.Source{}
	odd := plugin("bad\xff\\-reg.sock", state.StateRegistered)
	odd.Published = map[string]string{"key\xfe": "value\xfd"}
	src.SetPlugins(plugin("good-reg.sock", state.StateRegistered), odd)
	ts := start(t, src, nil)
	c := ts.dial(t)
	resp, err := c.ListPlugins(t.Context(), &adminv1.ListPluginsRequest{})
	if err != nil {
		t.Fatalf("ListPlugins with a name that is not UTF-8: %v", err)
	}
	var socks []string
	for _, p := range resp.Plugins {
		socks = append(socks, p.Socket)
		if strings.Contains(p.Socket, "bad") && p.Published[`key\xfe`] != `value\xfd` {
			t.Errorf("published %q, want the bytes escaped", p.Published)
		}
	}
	if !slices.Contains(socks, `/plugins/bad\xff\\-reg.sock`) || !slices.Contains(socks, "/plugins/good-reg.sock") {
		t.Errorf("sockets %q, want both, the odd one escaped", socks)
	}
	w, err := c.WatchPlugins(t.Context(), &adminv1.WatchPluginsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if list := recvUntilSynced(t, w); len(list) != 2 {
		t.Errorf("watch listed %d plugins, want 2", len(list))
	}
}

// No size of the state breaks a list: 10,000 sockets and plugins that publish the ABI's most
// (64 keys of 64 KiB each) come in pages of at most 1,000 entries and about 1 MiB, each within
// gRPC's default 4 MiB but for an entry that is larger on its own, and ListAllPlugins gets every
// one exactly once, in order, even with entries removed and added between pages.
func TestListsComeInPages(t *testing.T) {
	src := &admintest.Source{}
	var ps []admintest.Plugin
	for i := range 10_000 {
		ps = append(ps, plugin(fmt.Sprintf("p%05d-reg.sock", i), state.StateFailing))
	}
	big := map[string]string{}
	for k := range 64 {
		big[fmt.Sprintf("key%02d", k)] = strings.Repeat("v", 64<<10)
	}
	for _, i := range []int{10, 11, 5000} {
		ps[i].Published = big
	}
	src.SetPlugins(ps...)
	ts := start(t, src, nil)
	c := ts.dial(t, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(client.MaxMessageSize)))

	first, err := c.ListPlugins(t.Context(), &adminv1.ListPluginsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(first.Plugins); n == 0 || n > 1000 || first.NextPageToken == "" {
		t.Fatalf("first page: %d plugins, next %q; want 1 to 1,000 and a next page", n, first.NextPageToken)
	}
	// The page with the first big plugin is cut after it.
	if sz := proto.Size(first); sz > 1<<20+5<<20 {
		t.Errorf("first page is %d bytes", sz)
	}

	// Between two pages, an entry already sent goes and one before the cursor comes: the
	// next page starts right after the last entry sent, skipping and repeating nothing.
	last := first.Plugins[len(first.Plugins)-1].Socket
	src.Remove(first.Plugins[0].Socket)
	src.Upsert(plugin("a-reg.sock", state.StatePending))
	second, err := c.ListPlugins(t.Context(), &adminv1.ListPluginsRequest{PageToken: first.NextPageToken})
	if err != nil {
		t.Fatal(err)
	}
	if len(second.Plugins) == 0 || second.Plugins[0].Socket <= last {
		t.Fatalf("second page starts at %q, want the entry after %q", second.Plugins[0].GetSocket(), last)
	}

	all, err := client.ListAllPlugins(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 10_000 {
		t.Errorf("ListAllPlugins: %d plugins, want 10,000", len(all))
	}
	for i := 1; i < len(all); i++ {
		if all[i-1].Socket >= all[i].Socket {
			t.Fatalf("plugins %q then %q: out of order or repeated", all[i-1].Socket, all[i].Socket)
		}
	}

	small, err := c.ListPlugins(t.Context(), &adminv1.ListPluginsRequest{PageSize: 7})
	if err != nil || len(small.Plugins) != 7 {
		t.Errorf("page_size 7: %d plugins, %v", len(small.GetPlugins()), err)
	}
	_, err = c.ListPlugins(t.Context(), &adminv1.ListPluginsRequest{PageToken: "%%%"})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "page_token") {
		t.Errorf("a token the server did not give: %v, want InvalidArgument naming page_token", err)
	}
	hs, err := client.ListAllHandlers(t.Context(), c)
	if err != nil || len(hs) != len(src.Store().Handlers()) {
		t.Errorf("ListAllHandlers: %d handlers, %v", len(hs), err)
	}
}

// Capture answers are built at most admin.MaxCaptureAnswers at a time (each can hold about
// 22 MB of YAML): a client asking beside them waits for a slot, and gives up at its deadline
// without the daemon building its answer; those that waited are answered once slots free.
func TestCaptureAnswersBounded(t *testing.T) {
	var inside, entered atomic.Int32
	release := make(chan struct{})
	ts := start(t, &admintest.Source{}, func(c *admin.Config) {
		c.Capture = func([]string) ([]*session.Session, []string) {
			inside.Add(1)
			entered.Add(1)
			<-release
			inside.Add(-1)
			return nil, nil
		}
	})
	c := ts.dial(t)
	errs := make(chan error, admin.MaxCaptureAnswers)
	for range admin.MaxCaptureAnswers {
		go func() {
			_, err := c.CaptureSessions(context.Background(), &adminv1.CaptureSessionsRequest{})
			errs <- err
		}()
	}
	testwait.Until(t, "the first answers to start", func() bool { return inside.Load() == admin.MaxCaptureAnswers })
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := c.CaptureSessions(ctx, &adminv1.CaptureSessionsRequest{})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("a capture beside %d others: %v, want DEADLINE_EXCEEDED", admin.MaxCaptureAnswers, err)
	}
	if n := entered.Load(); n != admin.MaxCaptureAnswers {
		t.Errorf("%d answers were built at once, want at most %d", n, admin.MaxCaptureAnswers)
	}
	close(release)
	for range admin.MaxCaptureAnswers {
		if err := <-errs; err != nil {
			t.Errorf("a capture that had a slot: %v", err)
		}
	}
	// Slots are given back: a capture now is answered.
	if _, err := c.CaptureSessions(context.Background(), &adminv1.CaptureSessionsRequest{}); err != nil {
		t.Errorf("a capture after the others: %v", err)
	}
}
