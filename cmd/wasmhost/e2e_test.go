package main

// End-to-end tests of the daemon, in-process: newDaemon on temporary directories, run with a
// context the test cancels and waits on, fake plugins (registrationtest) serving the kubelet's
// registration API on real unix sockets, and a RecordingHandler put straight into the
// daemon's registry as the native handler of the plugins' type. The scenarios are those the
// kubelet's plugin watcher and plugin manager are tested with, and the ones where the
// kubelet is known to be weak (stale sockets, plugins that hang, a restarted daemon).
//
// TestE2EWasmExampleHandler runs the real example handler; it builds handlers-wasm/example
// with the Go toolchain and is skipped with -short.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/adminview"
	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/config/configtest"
	"github.com/wasmhost/wasmhost/internal/daemon"
	"github.com/wasmhost/wasmhost/internal/reconciler"
	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
	"github.com/wasmhost/wasmhost/internal/testwait"
	"go.uber.org/goleak"
)

const fakeType = "fake.wasmhost.dev"

// startWithHandler starts a daemon on cfg whose registry has h as the native handler of each
// of types.
func startWithHandler(t *testing.T, cfg config.Config, h registration.Handler, types ...string) *runningDaemon {
	t.Helper()
	return startDaemon(t, cfg, testLog(t), func(d *daemon.Daemon) {
		for _, typ := range types {
			d.SetHandler(typ, h)
		}
	})
}

func TestE2ERegistersPlugin(t *testing.T) {
	t.Parallel()
	dirs := newE2EDirs(t, "/tmp")
	h := registrationtest.NewRecordingHandler()
	h.SetPublished(map[string]string{"node": "n1"})
	rd := startWithHandler(t, e2eConfig(dirs), h, fakeType)

	sock := filepath.Join(dirs.Socket, "p1.sock")
	p := registrationtest.Serve(t, sock, pluginInfo(fakeType, "p1"), registrationtest.Options{})
	wantNotification(t, p, true, "")

	calls := h.Calls()
	if got := callsFor(h, sock); !slices.Equal(got, []string{registrationtest.MethodValidate, registrationtest.MethodRegister}) {
		t.Fatalf("handler calls %v, want validate then register", got)
	}
	want := registration.PluginInfo{Socket: sock, Type: fakeType, Name: "p1", Endpoint: sock, Versions: []string{"v1"}}
	for _, c := range calls {
		if c.Info.Socket != want.Socket || c.Info.Type != want.Type || c.Info.Name != want.Name ||
			c.Info.Endpoint != want.Endpoint || !slices.Equal(c.Info.Versions, want.Versions) {
			t.Fatalf("%s got %+v, want %+v (endpoint defaulted to the socket)", c.Method, c.Info, want)
		}
	}
	st := rd.waitState(sock, reconciler.StateRegistered)
	if st.PluginType != fakeType || st.PluginName != "p1" || st.LastError != "" {
		t.Fatalf("status %+v", st)
	}
	a, ok := rd.d.State().Actual().Get(sock)
	if !ok || a.Published["node"] != "n1" {
		t.Fatalf("actual state %+v, %v: want the plugin with what its handler published", a, ok)
	}
	// The store's view joins the two.
	var found bool
	for _, ap := range rd.d.State().Plugins() {
		if ap.Path == sock {
			found = true
			if ap.State != "registered" || ap.Endpoint != sock || ap.Published["node"] != "n1" {
				t.Fatalf("admin view %+v", ap)
			}
		}
	}
	if !found {
		t.Fatalf("admin view has no plugin at %s", sock)
	}
}

func TestE2EDeregistersWhenSocketRemoved(t *testing.T) {
	t.Parallel()
	dirs := newE2EDirs(t, "/tmp")
	h := registrationtest.NewRecordingHandler()
	rd := startWithHandler(t, e2eConfig(dirs), h, fakeType)

	sock := filepath.Join(dirs.Socket, "p1.sock")
	p := registrationtest.Serve(t, sock, pluginInfo(fakeType, "p1"), registrationtest.Options{})
	wantNotification(t, p, true, "")

	// A plugin that exits cleanly removes its socket.
	p.Close()
	de := h.WaitCalls(t, registrationtest.MethodDeRegister, 1, e2eWait)
	if de[0].Info.Socket != sock || de[0].Info.Name != "p1" || de[0].Info.Type != fakeType {
		t.Fatalf("DeRegister got %+v", de[0].Info)
	}
	rd.waitGone(sock)
	if n := p.Notifications(); len(n) != 1 {
		t.Fatalf("plugin notifications %+v: deregistration must not call the plugin", n)
	}
}

func TestE2ESeveralPlugins(t *testing.T) {
	t.Parallel()
	dirs := newE2EDirs(t, "/tmp")
	h := registrationtest.NewRecordingHandler()
	types := []string{"a.wasmhost.dev", "b.wasmhost.dev", "c.wasmhost.dev"}
	rd := startWithHandler(t, e2eConfig(dirs), h, types...)

	// Sockets at the top and in subdirectories made while the daemon runs: the whole tree
	// is watched.
	sub := filepath.Join(dirs.Socket, "sub", "deeper")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	var plugins []*registrationtest.Plugin
	for i, typ := range types {
		for j, dir := range []string{dirs.Socket, filepath.Join(dirs.Socket, "sub"), sub} {
			name := typ[:1] + string(rune('0'+i)) + string(rune('0'+j))
			plugins = append(plugins, registrationtest.Serve(t, filepath.Join(dir, name+".sock"), pluginInfo(typ, name), registrationtest.Options{}))
		}
	}
	for _, p := range plugins {
		wantNotification(t, p, true, "")
	}
	regs := h.WaitCalls(t, registrationtest.MethodRegister, len(plugins), e2eWait)
	seen := map[string]bool{}
	for _, c := range regs {
		if seen[c.Info.Socket] {
			t.Fatalf("socket %s registered twice: %v", c.Info.Socket, regs)
		}
		seen[c.Info.Socket] = true
	}
	for _, p := range plugins {
		rd.waitState(p.Path(), reconciler.StateRegistered)
	}

	// A removed subdirectory removes every socket under it.
	if err := os.RemoveAll(filepath.Join(dirs.Socket, "sub")); err != nil {
		t.Fatal(err)
	}
	de := h.WaitCalls(t, registrationtest.MethodDeRegister, 2*len(types), e2eWait)
	for _, c := range de {
		if !strings.HasPrefix(c.Info.Socket, filepath.Join(dirs.Socket, "sub")+"/") {
			t.Fatalf("DeRegister of %s, which was not under the removed directory", c.Info.Socket)
		}
	}
	for _, p := range plugins {
		if filepath.Dir(p.Path()) == dirs.Socket {
			if st, _ := rd.d.State().StatusOf(p.Path()); st.State != reconciler.StateRegistered {
				t.Fatalf("%s: %+v after a sibling directory was removed", p.Path(), st)
			}
		} else {
			rd.waitGone(p.Path())
		}
	}
}

func TestE2EReregistration(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		replace func(t *testing.T, old *registrationtest.Plugin, sock string, round int) *registrationtest.Plugin
	}{
		{
			// The plugin exits (removing its socket) and a new one starts at the same path.
			name: "restarted plugin",
			replace: func(t *testing.T, old *registrationtest.Plugin, sock string, round int) *registrationtest.Plugin {
				old.Close()
				return registrationtest.Serve(t, sock, pluginInfo(fakeType, "p"), registrationtest.Options{})
			},
		},
		{
			// A new socket is renamed over the old one: the path never stops existing, only
			// the socket behind it changes.
			name: "socket renamed over",
			replace: func(t *testing.T, old *registrationtest.Plugin, sock string, round int) *registrationtest.Plugin {
				tmp := filepath.Join(filepath.Dir(sock), ".next"+string(rune('0'+round))+".sock") // ignored: a dot name
				p := registrationtest.Serve(t, tmp, pluginInfo(fakeType, "p"), registrationtest.Options{})
				if err := os.Rename(tmp, sock); err != nil {
					t.Fatal(err)
				}
				old.Kill() // its socket file is already gone
				return p
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dirs := newE2EDirs(t, "/tmp")
			h := registrationtest.NewRecordingHandler()
			startWithHandler(t, e2eConfig(dirs), h, fakeType)

			sock := filepath.Join(dirs.Socket, "p.sock")
			p := registrationtest.Serve(t, sock, pluginInfo(fakeType, "p"), registrationtest.Options{})
			wantNotification(t, p, true, "")
			const rounds = 3
			for round := 1; round <= rounds; round++ {
				p = tc.replace(t, p, sock, round)
				wantNotification(t, p, true, "")
				h.WaitCalls(t, registrationtest.MethodRegister, round+1, e2eWait)
			}
			var seq []string
			for _, m := range callsFor(h, sock) {
				if m != registrationtest.MethodValidate {
					seq = append(seq, m)
				}
			}
			want := []string{registrationtest.MethodRegister}
			for range rounds {
				want = append(want, registrationtest.MethodDeRegister, registrationtest.MethodRegister)
			}
			if !slices.Equal(seq, want) {
				t.Fatalf("handler calls for %s: %v, want %v", sock, seq, want)
			}
		})
	}
}

func TestE2ESocketsPresentAtStart(t *testing.T) {
	t.Parallel()
	dirs := newE2EDirs(t, "/tmp")
	if err := os.Mkdir(filepath.Join(dirs.Socket, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	var plugins []*registrationtest.Plugin
	for _, name := range []string{"p1", "p2", "sub/p3"} {
		plugins = append(plugins, registrationtest.Serve(t, filepath.Join(dirs.Socket, name+".sock"), pluginInfo(fakeType, filepath.Base(name)), registrationtest.Options{}))
	}
	h := registrationtest.NewRecordingHandler()
	rd := startWithHandler(t, e2eConfig(dirs), h, fakeType)
	for _, p := range plugins {
		wantNotification(t, p, true, "")
	}
	waitFor(t, "the daemon to be ready", func() bool { return rd.d.Ready() == nil })
	if n := len(h.CallsTo(registrationtest.MethodRegister)); n != len(plugins) {
		t.Fatalf("%d Register calls, want %d", n, len(plugins))
	}
}

func TestE2EUnknownTypeWaitsForHandler(t *testing.T) {
	t.Parallel()
	dirs := newE2EDirs(t, "/tmp")
	rd := startDaemon(t, e2eConfig(dirs), testLog(t), nil) // no handler at all

	const lateType = "late.wasmhost.dev"
	sock := filepath.Join(dirs.Socket, "late.sock")
	p := registrationtest.Serve(t, sock, pluginInfo(lateType, "late"), registrationtest.Options{})
	n := wantNotification(t, p, false, "no handler registered for plugin type")
	if !strings.Contains(n.Error, lateType) {
		t.Fatalf("reason %q does not name the type", n.Error)
	}
	st := rd.waitState(sock, reconciler.StateWaitingForHandler)
	if st.PluginType != lateType || st.PluginName != "late" || !strings.Contains(st.LastError, "no handler") {
		t.Fatalf("status %+v", st)
	}

	// A handler for another type changes nothing for it.
	other := registrationtest.NewRecordingHandler()
	rd.d.SetHandler("other.wasmhost.dev", other)

	// Its handler arrives: the plugin is registered without its socket being re-created.
	h := registrationtest.NewRecordingHandler()
	rd.d.SetHandler(lateType, h)
	wantNotification(t, p, true, "")
	rd.waitState(sock, reconciler.StateRegistered)
	if len(other.Calls()) != 0 {
		t.Fatalf("the other type's handler was called: %v", other.Calls())
	}
	// Waiting is not retrying: one GetInfo that found no handler, one that registered.
	if got := p.GetInfoCalls(); got != 2 {
		t.Fatalf("%d GetInfo calls, want 2", got)
	}
}

func TestE2EValidationFailureRetriesAfterBackoff(t *testing.T) {
	t.Parallel()
	dirs := newE2EDirs(t, "/tmp")
	cfg := e2eConfig(dirs)
	backoff := time.Duration(cfg.Reconciler.InitialBackoff)
	h := registrationtest.NewRecordingHandler()
	var mu sync.Mutex
	var validateAt []time.Time
	refuse := true
	h.SetHook(func(_ context.Context, c registrationtest.Call) error {
		if c.Method != registrationtest.MethodValidate {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		validateAt = append(validateAt, time.Now())
		if refuse {
			return errors.New("version v1 is not supported, want v2")
		}
		return nil
	})
	rd := startWithHandler(t, cfg, h, fakeType)

	sock := filepath.Join(dirs.Socket, "p.sock")
	p := registrationtest.Serve(t, sock, pluginInfo(fakeType, "p"), registrationtest.Options{})
	wantNotification(t, p, false, "version v1 is not supported, want v2")
	// An error that is not a rejection is the handler's failure: retried with backoff, and
	// said to be the handler's.
	st := rd.waitState(sock, reconciler.StateFailing)
	if !strings.Contains(st.LastError, "version v1 is not supported") || !strings.Contains(st.LastError, "handler failed") ||
		st.Attempts < 1 || st.NextRetry.IsZero() {
		t.Fatalf("status %+v, want failing with the reason, attempts and a next retry", st)
	}
	// It is tried again, after the backoff, and refused again.
	wantNotification(t, p, false, "version v1 is not supported")
	mu.Lock()
	// The backoff is shortened by at most its jitter.
	minWait := backoff - time.Duration(daemon.BackoffJitter*float64(backoff))
	if len(validateAt) < 2 || validateAt[1].Sub(validateAt[0]) < minWait {
		t.Fatalf("validate calls at %v: want a retry at least %v after the first", validateAt, minWait)
	}
	refuse = false
	mu.Unlock()

	// Once the handler accepts, a later retry registers it; the backoff is cleared.
	for {
		n := p.WaitNotification(t, e2eWait)
		if n.Registered {
			break
		}
	}
	st = rd.waitState(sock, reconciler.StateRegistered)
	if st.Attempts != 0 || st.LastError != "" {
		t.Fatalf("status after success %+v", st)
	}
	if len(h.CallsTo(registrationtest.MethodRegister)) != 1 {
		t.Fatalf("Register calls %v, want 1", h.CallsTo(registrationtest.MethodRegister))
	}
}

func TestE2EHungNotifyDoesNotBlockOthers(t *testing.T) {
	t.Parallel()
	dirs := newE2EDirs(t, "/tmp")
	cfg := e2eConfig(dirs)
	cfg.Registration.NotifyTimeout = config.Duration(time.Hour) // the hung call outlives the test
	h := registrationtest.NewRecordingHandler()
	rd := startWithHandler(t, cfg, h, fakeType)

	hung := registrationtest.Serve(t, filepath.Join(dirs.Socket, "hung.sock"), pluginInfo(fakeType, "hung"), registrationtest.Options{Notify: registrationtest.NotifyHang})
	// The hung plugin has received Notify(true) and will never answer it.
	wantNotification(t, hung, true, "")

	ok := registrationtest.Serve(t, filepath.Join(dirs.Socket, "ok.sock"), pluginInfo(fakeType, "ok"), registrationtest.Options{})
	wantNotification(t, ok, true, "")
	rd.waitState(ok.Path(), reconciler.StateRegistered)
	if st, _ := rd.d.State().StatusOf(hung.Path()); st.State != reconciler.StatePending {
		t.Fatalf("hung plugin: %+v, want its registration still in flight", st)
	}
	// Stopping the daemon cancels the hung call (the cleanup checks that run returns).
	if err := rd.stop(); err != nil {
		t.Fatal(err)
	}
}

func TestE2EStaleSocketDoesNotBlockOthers(t *testing.T) {
	t.Parallel()
	dirs := newE2EDirs(t, "/tmp")
	// A plugin killed with SIGKILL leaves its socket file behind: nobody listens there.
	stale := registrationtest.Serve(t, filepath.Join(dirs.Socket, "stale.sock"), pluginInfo(fakeType, "stale"), registrationtest.Options{})
	stale.Kill()
	h := registrationtest.NewRecordingHandler()
	rd := startWithHandler(t, e2eConfig(dirs), h, fakeType)

	ok := registrationtest.Serve(t, filepath.Join(dirs.Socket, "ok.sock"), pluginInfo(fakeType, "ok"), registrationtest.Options{})
	wantNotification(t, ok, true, "")
	st := rd.waitState(stale.Path(), reconciler.StateFailing)
	if !strings.Contains(st.LastError, "unreachable") || st.Attempts < 1 {
		t.Fatalf("stale socket status %+v, want failing as unreachable", st)
	}
	if _, ok := rd.d.State().Actual().Get(stale.Path()); ok {
		t.Fatal("a stale socket is in the actual state")
	}
	// Its file removed, it is forgotten; no handler ever heard of it.
	if err := os.Remove(stale.Path()); err != nil {
		t.Fatal(err)
	}
	rd.waitGone(stale.Path())
	if c := callsFor(h, stale.Path()); len(c) != 0 {
		t.Fatalf("handler calls for the stale socket: %v", c)
	}
}

func TestE2ESocketDirRecreated(t *testing.T) {
	t.Parallel()
	dirs := newE2EDirs(t, "/tmp")
	h := registrationtest.NewRecordingHandler()
	rd := startWithHandler(t, e2eConfig(dirs), h, fakeType)

	sock := filepath.Join(dirs.Socket, "p.sock")
	p1 := registrationtest.Serve(t, sock, pluginInfo(fakeType, "p"), registrationtest.Options{})
	wantNotification(t, p1, true, "")

	if err := os.RemoveAll(dirs.Socket); err != nil {
		t.Fatal(err)
	}
	h.WaitCalls(t, registrationtest.MethodDeRegister, 1, e2eWait)
	rd.waitGone(sock)
	p1.Kill()

	// The directory comes back (the watcher re-creates it; so may whoever removed it), and a
	// plugin there is registered.
	if err := os.MkdirAll(dirs.Socket, 0o755); err != nil {
		t.Fatal(err)
	}
	p2 := registrationtest.Serve(t, sock, pluginInfo(fakeType, "p"), registrationtest.Options{})
	wantNotification(t, p2, true, "")
	rd.waitState(sock, reconciler.StateRegistered)
	if n := len(h.CallsTo(registrationtest.MethodRegister)); n != 2 {
		t.Fatalf("%d Register calls, want 2", n)
	}
}

func TestE2ERestartedDaemonFindsPlugins(t *testing.T) {
	t.Parallel()
	dirs := newE2EDirs(t, "/tmp")
	cfg := e2eConfig(dirs)
	before := registrationtest.Serve(t, filepath.Join(dirs.Socket, "before.sock"), pluginInfo(fakeType, "before"), registrationtest.Options{})
	h1 := registrationtest.NewRecordingHandler()
	rd1 := startWithHandler(t, cfg, h1, fakeType)
	after := registrationtest.Serve(t, filepath.Join(dirs.Socket, "after.sock"), pluginInfo(fakeType, "after"), registrationtest.Options{})
	wantNotification(t, before, true, "")
	wantNotification(t, after, true, "")
	if err := rd1.stop(); err != nil {
		t.Fatalf("first daemon: %v", err)
	}
	if _, err := os.Lstat(cfg.AdminSocket()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("admin socket after the daemon stopped: %v", err)
	}

	// The plugins do not notice the daemon going away; a new one finds their sockets.
	h2 := registrationtest.NewRecordingHandler()
	rd2 := startWithHandler(t, cfg, h2, fakeType)
	wantNotification(t, before, true, "")
	wantNotification(t, after, true, "")
	regs := h2.WaitCalls(t, registrationtest.MethodRegister, 2, e2eWait)
	if len(regs) != 2 {
		t.Fatalf("second daemon: Register calls %v", regs)
	}
	rd2.waitState(before.Path(), reconciler.StateRegistered)
	rd2.waitState(after.Path(), reconciler.StateRegistered)
	if got := len(h1.CallsTo(registrationtest.MethodRegister)); got != 2 {
		t.Fatalf("first daemon's handler: %d Register calls, want 2", got)
	}
}

// TestE2ERunLeavesNoGoroutines runs the daemon with everything on (metrics on a unix socket,
// the admin API, plugins registered, failing, waiting for a handler and hung mid-call) and
// checks that when run has returned, every goroutine it started has exited. It does not run
// in parallel with other tests.
func TestE2ERunLeavesNoGoroutines(t *testing.T) {
	dirs := newE2EDirs(t, "/tmp")
	cfg := e2eConfig(dirs)
	cfg.Metrics.Listen = "unix:" + filepath.Join(dirs.State, "metrics.sock")
	cfg.Registration.NotifyTimeout = config.Duration(time.Hour)
	log := testLog(t)
	before := goleak.IgnoreCurrent()

	h := registrationtest.NewRecordingHandler()
	d, err := daemon.New(context.Background(), cfg, log, "v0.0.0-test")
	if err != nil {
		t.Fatal(err)
	}
	d.SetHandler(fakeType, h)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()

	var plugins []*registrationtest.Plugin
	start := func(name, typ string, opts registrationtest.Options) *registrationtest.Plugin {
		p, err := registrationtest.Start(filepath.Join(dirs.Socket, name+".sock"), pluginInfo(typ, name), opts)
		if err != nil {
			t.Fatal(err)
		}
		plugins = append(plugins, p)
		return p
	}
	wantNotification(t, start("ok", fakeType, registrationtest.Options{}), true, "")
	wantNotification(t, start("nohandler", "none.wasmhost.dev", registrationtest.Options{}), false, "no handler")
	wantNotification(t, start("hung", fakeType, registrationtest.Options{Notify: registrationtest.NotifyHang}), true, "")
	start("stale", fakeType, registrationtest.Options{}).Kill()

	// Use the admin API and the metrics endpoint once, so that their servers have served. Both
	// servers start beside the rest: on a busy machine the plugins can be registered before
	// they listen.
	for _, sock := range []string{cfg.AdminSocket(), strings.TrimPrefix(cfg.Metrics.Listen, "unix:")} {
		waitFor(t, sock+" to accept", func() bool {
			c, err := net.Dial("unix", sock)
			if err == nil {
				c.Close()
			}
			return err == nil
		})
	}
	if out, err := runRoot(t, "plugins", "-o", "json", "--admin-socket", cfg.AdminSocket()); err != nil {
		t.Fatalf("wasmhost plugins: %v\n%s", err, out)
	}
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", strings.TrimPrefix(cfg.Metrics.Listen, "unix:"))
	}}
	resp, err := (&http.Client{Transport: tr, Timeout: e2eWait}).Get("http://wasmhost/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body := new(bytes.Buffer)
	body.ReadFrom(resp.Body)
	resp.Body.Close()
	tr.CloseIdleConnections()
	if !strings.Contains(body.String(), "wasmhost") {
		t.Fatalf("metrics: %s", body)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(e2eWait):
		t.Fatal("run did not return")
	}
	for _, p := range plugins {
		p.Close()
	}
	testwait.NoLeaks(t, before)
}

// runRoot runs the wasmhost command line (newRootCmd) with args and returns its standard
// output (standard error appended when the command fails).
func runRoot(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	if err := root.ExecuteContext(ctx); err != nil {
		return out.String() + errOut.String(), err
	}
	return out.String(), nil
}

func TestE2EAdminCLIShowsFailingPlugin(t *testing.T) {
	t.Parallel()
	dirs := newE2EDirs(t, "/tmp")
	cfg := e2eConfig(dirs)
	cfg.Reconciler.InitialBackoff = config.Duration(time.Hour) // stay failing while we look
	cfg.Reconciler.MaxBackoff = config.Duration(time.Hour)
	h := registrationtest.NewRecordingHandler()
	h.SetHook(func(_ context.Context, c registrationtest.Call) error {
		if c.Method == registrationtest.MethodValidate && c.Info.Name == "bad" {
			return errors.New("plugin bad: version v1 is too old")
		}
		return nil
	})
	rd := startWithHandler(t, cfg, h, fakeType)
	good := registrationtest.Serve(t, filepath.Join(dirs.Socket, "good.sock"), pluginInfo(fakeType, "good"), registrationtest.Options{})
	bad := registrationtest.Serve(t, filepath.Join(dirs.Socket, "bad.sock"), pluginInfo(fakeType, "bad"), registrationtest.Options{})
	wantNotification(t, good, true, "")
	wantNotification(t, bad, false, "version v1 is too old")
	// A plugin hears Notify(true) a moment before the reconciler records the outcome.
	rd.waitState(good.Path(), reconciler.StateRegistered)

	// The CLI may ask before the admin socket listens, or before the failure is published.
	var views []adminview.Plugin
	var out string
	waitFor(t, "wasmhost plugins -o json to show the failing plugin", func() bool {
		var err error
		out, err = runRoot(t, "plugins", "-o", "json", "--admin-socket", cfg.AdminSocket())
		if err != nil {
			return false
		}
		views = nil
		if err := json.Unmarshal([]byte(out), &views); err != nil {
			t.Fatalf("wasmhost plugins -o json: %v\n%s", err, out)
		}
		for _, v := range views {
			if v.Socket == bad.Path() && v.State == "failing" {
				return true
			}
		}
		return false
	})
	for _, v := range views {
		switch v.Socket {
		case bad.Path():
			if v.Type != fakeType || v.Name != "bad" || !strings.Contains(v.LastError, "version v1 is too old") ||
				v.Attempts < 1 || v.NextRetry == nil {
				t.Fatalf("failing plugin shown as %+v\n%s", v, out)
			}
		case good.Path():
			if v.State != "registered" || v.Name != "good" || v.Endpoint != good.Path() || v.RegisteredAt == nil {
				t.Fatalf("registered plugin shown as %+v\n%s", v, out)
			}
		default:
			t.Fatalf("unexpected plugin %+v", v)
		}
	}
	if len(views) != 2 {
		t.Fatalf("%d plugins shown, want 2:\n%s", len(views), out)
	}
}

// TestE2EPluginAndHandlerPresentAtStart: a plugin whose socket and handler both exist when
// the daemon starts is registered once and never told "no handler" while the handler loads.
// The CSI node-driver-registrar exits when told no, so that would kill it on every restart of
// the daemon.
func TestE2EPluginAndHandlerPresentAtStart(t *testing.T) {
	t.Parallel()
	wasm := exampleWasm(t)
	dirs := newE2EDirs(t, "/tmp")
	if err := os.WriteFile(filepath.Join(dirs.Handler, "example.wasm"), wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dirs.Socket, "early.sock")
	p := registrationtest.Serve(t, sock, pluginInfo(exampleType, "early"), registrationtest.Options{})
	rd := startDaemon(t, e2eConfig(dirs), testLog(t), nil)
	wantNotification(t, p, true, "")
	rd.waitState(sock, reconciler.StateRegistered)
	if got := p.Notifications(); len(got) != 1 {
		t.Fatalf("plugin notified %d times (%+v), want once: registered", len(got), got)
	}
}

// TestE2EWasmExampleHandler runs the daemon with the real example handler
// (handlers-wasm/example, built by exampleWasm): dropped into the handler directory of a
// running daemon, it registers the plugin that was waiting for it; replaced by a new version,
// the plugin stays registered; removed, the plugin is deregistered and waits again.
func TestE2EWasmExampleHandler(t *testing.T) {
	t.Parallel()
	wasm := exampleWasm(t)
	dirs := newE2EDirs(t, "/tmp")
	rd := startDaemon(t, e2eConfig(dirs), testLog(t), nil)

	sock := filepath.Join(dirs.Socket, "e1.sock")
	p := registrationtest.Serve(t, sock, pluginInfo(exampleType, "e1"), registrationtest.Options{})
	wantNotification(t, p, false, "no handler registered for plugin type")
	rd.waitState(sock, reconciler.StateWaitingForHandler)

	// Copied in, as cp does: written in place, not renamed.
	file := filepath.Join(dirs.Handler, "example.wasm")
	if err := os.WriteFile(file, wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	wantNotification(t, p, true, "")
	rd.waitState(sock, reconciler.StateRegistered)
	a, _ := rd.d.State().Actual().Get(sock)
	if a.Published["endpoint"] != sock {
		t.Fatalf("published %v, want the endpoint the example handler publishes", a.Published)
	}
	serving := func() string { // the SHA-256 of the module serving the example type
		for _, hs := range rd.d.State().Handlers() {
			if hs.Serving && slices.Contains(hs.PluginTypes, exampleType) {
				return hs.SHA256
			}
		}
		return ""
	}
	first := serving()

	// A new version replaces it: the plugin stays registered, and the new version serves.
	v2 := withCustomSection(wasm, "wasmhost-test", []byte("v2"))
	if err := os.WriteFile(file+".tmp", v2, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(file+".tmp", file); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new version of the handler to serve", func() bool { s := serving(); return s != "" && s != first })
	if st, _ := rd.d.State().StatusOf(sock); st.State != reconciler.StateRegistered {
		t.Fatalf("after the handler was replaced: %+v", st)
	}
	p2 := registrationtest.Serve(t, filepath.Join(dirs.Socket, "e2.sock"), pluginInfo(exampleType, "e2"), registrationtest.Options{})
	wantNotification(t, p2, true, "")
	// ... and it still refuses what the example refuses.
	p3 := registrationtest.Serve(t, filepath.Join(dirs.Socket, "e3.sock"), registrationtest.Info{Type: exampleType, Name: "e3", Versions: []string{"v0"}}, registrationtest.Options{})
	wantNotification(t, p3, false, "this handler needs v1")
	if n := len(p.Notifications()); n != 2 {
		t.Fatalf("plugin notified %d times, want 2 (the replacement must not re-register it)", n)
	}

	// Removed: its plugins are deregistered and wait for a handler again.
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{sock, p2.Path()} {
		st := rd.waitState(s, reconciler.StateWaitingForHandler)
		if _, ok := rd.d.State().Actual().Get(s); ok {
			t.Fatalf("%s is still in the actual state: %+v", s, st)
		}
	}
}

// TestE2EExampleManifestLimits: the handler memory limit and pool size the example DaemonSet
// sets (examples/kubernetes/daemonset.yaml, sized for its container's memory limit) are enough
// for the shipped example handler to register a thousand plugins at once.
func TestE2EExampleManifestLimits(t *testing.T) {
	t.Parallel()
	cfgs := configtest.FromManifest(t, "../../examples/kubernetes/daemonset.yaml")
	if len(cfgs) != 1 {
		t.Fatalf("%d wasmhost configs in the example DaemonSet, want 1", len(cfgs))
	}
	manifest := cfgs[0]
	if manifest.Handlers.MemoryLimit == 0 || manifest.Handlers.PoolSize == 0 {
		t.Fatalf("the example DaemonSet sets no handler memory limit or pool size: %+v", manifest.Handlers)
	}
	dirs := newE2EDirs(t, "/tmp")
	cfg := e2eConfig(dirs)
	cfg.Handlers.MemoryLimit = manifest.Handlers.MemoryLimit
	cfg.Handlers.PoolSize = manifest.Handlers.PoolSize
	if err := os.WriteFile(filepath.Join(dirs.Handler, "example.wasm"), exampleWasm(t), 0o644); err != nil {
		t.Fatal(err)
	}
	rd := startDaemon(t, cfg, testLog(t), nil)
	const n = 1000
	var ps []*registrationtest.Plugin
	for i := range n {
		name := fmt.Sprintf("m%04d", i)
		ps = append(ps, registrationtest.Serve(t, filepath.Join(dirs.Socket, name+".sock"), pluginInfo(exampleType, name), registrationtest.Options{}))
	}
	for _, p := range ps {
		wantNotification(t, p, true, "")
	}
	waitFor(t, "every plugin to be recorded registered", func() bool { return rd.d.State().Actual().Len() == n })
}
