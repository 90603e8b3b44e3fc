package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/host/sandbox"
	"github.com/wasmhost/wasmhost/internal/host/sandbox/sandboxtest"
	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/testwait"
)

// startRun runs h.Run until the test ends (or the returned stop is called) and waits for it
// to return; it returns once the initial handlers are loaded.
func startRun(t *testing.T, h *Host) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	select {
	case <-h.Ready():
	case err := <-done:
		t.Fatalf("Run returned before ready: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("not ready after 20s")
	}
	return stop
}

func status(h *Host, file string) (HandlerStatus, bool) {
	for _, s := range h.Handlers() {
		if s.File == file {
			return s, true
		}
	}
	return HandlerStatus{}, false
}

func handlerFor(t *testing.T, reg *registration.Registry, pluginType string) registration.Handler {
	t.Helper()
	var hd registration.Handler
	testwait.Until(t, "a handler for "+pluginType, func() bool {
		var ok bool
		hd, ok = reg.Get(pluginType)
		return ok
	})
	return hd
}

func TestRunInitial(t *testing.T) {
	dir := sandboxtest.TempDir(t)
	for _, name := range []string{"ok", "kv", "abi2"} {
		sandboxtest.CopyFile(t, fixture(name), filepath.Join(dir, name+".wasm"), 0o644)
	}
	sandboxtest.CopyFile(t, fixture("echo"), filepath.Join(dir, ".hidden.wasm"), 0o644)
	sandboxtest.CopyFile(t, fixture("echo"), filepath.Join(dir, "echo.wasm.txt"), 0o644)
	h, _ := newTestHost(t, Config{HandlerDir: dir})
	startRun(t, h)

	if got := h.Registry().Types(); fmt.Sprint(got) != "[kv.example ok.example]" {
		t.Errorf("registry types %v", got)
	}
	st := h.Handlers()
	if len(st) != 3 {
		t.Fatalf("Handlers() = %+v, want 3 files", st)
	}
	bad, _ := status(h, filepath.Join(dir, "abi2.wasm"))
	if bad.Serving || !strings.Contains(bad.LastError, "ABI version 2 not supported") || bad.LastErrorAt.IsZero() {
		t.Errorf("refused file status %+v", bad)
	}
	ok, _ := status(h, filepath.Join(dir, "ok.wasm"))
	if !ok.Serving || ok.ABIVersion != 1 || len(ok.SHA256) != 64 || ok.Size == 0 || ok.LoadedAt.IsZero() ||
		fmt.Sprint(ok.PluginTypes) != "[ok.example]" || ok.Name != "ok" || ok.Version != "1" || ok.PoolSize != 2 || ok.Instances != 1 {
		t.Errorf("ok status %+v", ok)
	}
	hd, _ := h.Registry().Get("ok.example")
	if err := hd.ValidatePlugin(context.Background(), sandboxtest.Info("ok.example", "p")); err != nil {
		t.Fatal(err)
	}
	pub, err := hd.RegisterPlugin(context.Background(), sandboxtest.Info("ok.example", "p"))
	if err != nil || pub["k"] != "v" {
		t.Fatalf("RegisterPlugin = %v, %v", pub, err)
	}
	ok, _ = status(h, filepath.Join(dir, "ok.wasm"))
	if ok.Calls != 2 {
		t.Errorf("calls = %d, want 2", ok.Calls)
	}
}

func TestRunErrors(t *testing.T) {
	dir := sandboxtest.TempDir(t)
	// A directory that cannot be made (its parent is a file) is an error naming it.
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	h, _ := newTestHost(t, Config{HandlerDir: filepath.Join(file, "handlers")})
	if err := h.Run(context.Background()); err == nil || !strings.Contains(err.Error(), filepath.Join(file, "handlers")) {
		t.Errorf("Run on a directory that cannot be made = %v", err)
	}
	if err := os.Chmod(dir, 0o775); err != nil {
		t.Fatal(err)
	}
	h2, _ := newTestHost(t, Config{HandlerDir: dir})
	err := h2.Run(context.Background())
	sandboxtest.ErrContains(t, err, sandbox.ErrInsecure, dir, "writable by group or other")
	select {
	case <-h2.Ready():
	default:
		t.Error("Ready is not closed after Run returned")
	}
	h3, _ := newTestHost(t, Config{HandlerDir: dir, AllowInsecure: true})
	startRun(t, h3)
	if err := h3.Run(context.Background()); err == nil {
		t.Error("a second Run did not fail")
	}
}

// TestRunMissingDirIsMade: a handler directory that does not exist is made, and a handler
// dropped into it later is loaded.
func TestRunMissingDirIsMade(t *testing.T) {
	dir := filepath.Join(sandboxtest.TempDir(t), "handlers")
	h, _ := newTestHost(t, Config{HandlerDir: dir})
	startRun(t, h)
	<-h.Ready()
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("handler directory: %v %v", fi, err)
	}
	installFile(t, fixture("reload_v1"), filepath.Join(dir, "reload.wasm"))
	handlerFor(t, h.Registry(), "reload.example")
}

// TestRunDirRecreated: the handler directory deleted under the host keeps the handlers loaded
// for the removal grace; made again, it is watched again, and what is in it then is what
// serves.
func TestRunDirRecreated(t *testing.T) {
	dir := filepath.Join(sandboxtest.TempDir(t), "handlers")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	h, logs := newTestHost(t, Config{HandlerDir: dir, RemovalGrace: time.Hour})
	startRun(t, h)
	installFile(t, fixture("reload_v1"), filepath.Join(dir, "reload.wasm"))
	hd := handlerFor(t, h.Registry(), "reload.example")

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the loss to be logged", func() bool {
		_, ok := logs.Find("handler directory is gone; its handlers are removed unless it is back within the removal grace")
		return ok
	})
	if err := hd.ValidatePlugin(context.Background(), sandboxtest.Info("reload.example", "p")); err != nil {
		t.Fatalf("the handler stopped serving when its directory went: %v", err)
	}

	// Made again, with another handler in it: that one loads (events are seen again), and the
	// old one, no longer in the directory, is gone and waits for the end of its grace.
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	installFile(t, fixture("min"), filepath.Join(dir, "min.wasm"))
	handlerFor(t, h.Registry(), "min.example")
	if s, _ := status(h, filepath.Join(dir, "reload.wasm")); !s.Serving || s.GoneSince.IsZero() {
		t.Errorf("the file deleted with its directory: %+v, want serving and gone", s)
	}
	if _, ok := logs.Find("handler directory is back; watching it again"); !ok {
		t.Error("the return of the directory was not logged")
	}
	// The new directory is watched: a file added now is seen at once, not at the next re-scan.
	installFile(t, fixture("reload_v1"), filepath.Join(dir, "reload.wasm"))
	handlerFor(t, h.Registry(), "reload.example")
}

// hammer calls hd.ValidatePlugin from several goroutines until stopped, and records any error
// that is not allowed.
type hammer struct {
	stop   chan struct{}
	wg     sync.WaitGroup
	calls  atomic.Int64
	mu     sync.Mutex
	errors []error
}

func startHammer(t *testing.T, get func() registration.Handler, allowed func(error) bool) *hammer {
	hm := &hammer{stop: make(chan struct{})}
	for g := range 4 {
		hm.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-hm.stop:
					return
				default:
				}
				err := get().ValidatePlugin(context.Background(), sandboxtest.Info("reload.example", fmt.Sprint(g, "-", i)))
				hm.calls.Add(1)
				if err != nil && !allowed(err) {
					hm.mu.Lock()
					hm.errors = append(hm.errors, err)
					hm.mu.Unlock()
				}
			}
		})
	}
	t.Cleanup(hm.halt)
	return hm
}

func (hm *hammer) halt() {
	select {
	case <-hm.stop:
	default:
		close(hm.stop)
	}
	hm.wg.Wait()
}

func (hm *hammer) check(t *testing.T) {
	t.Helper()
	hm.halt()
	hm.mu.Lock()
	defer hm.mu.Unlock()
	if len(hm.errors) > 0 {
		t.Errorf("%d of %d calls failed during the swap, first: %v", len(hm.errors), hm.calls.Load(), hm.errors[0])
	}
	if hm.calls.Load() == 0 {
		t.Error("the hammer made no calls")
	}
}

func isV2(err error) bool {
	return errors.Is(err, registration.ErrRejected) && strings.HasSuffix(err.Error(), ": v2")
}

func TestRunAddReplaceRemove(t *testing.T) {
	dir := sandboxtest.TempDir(t)
	h, logs := newTestHost(t, Config{HandlerDir: dir, RetireGrace: 2 * time.Second, RemovalGrace: 100 * time.Millisecond})
	startRun(t, h)
	ctx := context.Background()
	path := filepath.Join(dir, "reload.wasm")

	// Added: the registry gets the type.
	installFile(t, fixture("reload_v1"), path)
	hd := handlerFor(t, h.Registry(), "reload.example")
	if err := hd.ValidatePlugin(ctx, sandboxtest.Info("reload.example", "p")); err != nil {
		t.Fatal(err)
	}

	// Replaced while calls hammer the handler: none fails, the new version takes over, and the
	// registry keeps the same handler.
	hm := startHammer(t, func() registration.Handler { return hd }, isV2)
	testwait.Until(t, "the hammer to start", func() bool { return hm.calls.Load() > 20 })
	installFile(t, fixture("reload_v2"), path)
	testwait.Until(t, "version 2", func() bool { return isV2(hd.ValidatePlugin(ctx, sandboxtest.Info("reload.example", "p"))) })
	testwait.Until(t, "more calls", func() bool { return hm.calls.Load() > 200 })
	hm.check(t)
	if now, _ := h.Registry().Get("reload.example"); now != hd {
		t.Error("the registry's handler changed on a swap")
	}
	// The swap is logged once it is done: wait for the line, not only for the new version.
	testwait.Until(t, "the swap's log line", func() bool { _, ok := logs.Find("handler replaced"); return ok })
	testwait.Until(t, "the old module to close", func() bool { return h.sb.OpenModules() == 1 })

	// Replaced by a broken file: the last good version keeps serving.
	v2, _ := status(h, path)
	installFile(t, fixture("notwasm"), path)
	testwait.Until(t, "the broken file to be refused", func() bool {
		s, _ := status(h, path)
		return strings.Contains(s.LastError, "not valid WebAssembly")
	})
	if !isV2(hd.ValidatePlugin(ctx, sandboxtest.Info("reload.example", "p"))) {
		t.Error("version 2 stopped serving after a broken update")
	}
	if s, _ := status(h, path); s.SHA256 != v2.SHA256 || !s.Serving {
		t.Errorf("status after a broken update %+v", s)
	}
	if attrs, ok := logs.Find("update refused"); !ok || !strings.Contains(attrs["error"], path) {
		t.Errorf("the refused update was not logged with the file: %v", attrs)
	}

	// Removed: the registry loses the type; the retired handler still deregisters until the
	// grace period ends, then says it was retired.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the type to leave the registry", func() bool { _, ok := h.Registry().Get("reload.example"); return !ok })
	if err := hd.DeRegisterPlugin(ctx, sandboxtest.Info("reload.example", "p")); err != nil {
		t.Errorf("DeRegisterPlugin through the retired handler: %v", err)
	}
	if len(h.Handlers()) != 0 {
		t.Errorf("Handlers() after removal = %+v", h.Handlers())
	}
	testwait.Until(t, "the grace period to end", func() bool {
		return errors.Is(hd.DeRegisterPlugin(ctx, sandboxtest.Info("reload.example", "p")), sandbox.ErrRetired)
	})
	sandboxtest.ErrContains(t, hd.ValidatePlugin(ctx, sandboxtest.Info("reload.example", "p")), sandbox.ErrRetired, "reload.example", path, "was removed")
	testwait.Until(t, "every module to close", func() bool { return h.sb.OpenModules() == 0 })
}

// TestRunTypeChange: a new version that declares other plugin types retires the old types and
// registers the new ones.
func TestRunTypeChange(t *testing.T) {
	dir := sandboxtest.TempDir(t)
	h, _ := newTestHost(t, Config{HandlerDir: dir})
	path := filepath.Join(dir, "h.wasm")
	sandboxtest.CopyFile(t, fixture("ok"), path, 0o644)
	startRun(t, h)
	old := handlerFor(t, h.Registry(), "ok.example")
	installFile(t, fixture("kv"), path)
	handlerFor(t, h.Registry(), "kv.example")
	testwait.Until(t, "ok.example to leave", func() bool { _, ok := h.Registry().Get("ok.example"); return !ok })
	// Still within its grace period.
	if err := old.DeRegisterPlugin(context.Background(), sandboxtest.Info("ok.example", "p")); err != nil {
		t.Error(err)
	}
}

func TestRunConflict(t *testing.T) {
	dir := sandboxtest.TempDir(t)
	a, b := filepath.Join(dir, "a.wasm"), filepath.Join(dir, "b.wasm")
	sandboxtest.CopyFile(t, fixture("reload_v1"), a, 0o644)
	sandboxtest.CopyFile(t, fixture("reload_v2"), b, 0o644)
	h, _ := newTestHost(t, Config{HandlerDir: dir, RemovalGrace: 100 * time.Millisecond})
	startRun(t, h)

	// Of the files present at start, the first by name wins.
	winner, loser := a, b
	if sa, _ := status(h, a); !sa.Serving {
		t.Fatalf("a.wasm is not serving: %+v", sa)
	}
	sl, _ := status(h, loser)
	want := fmt.Sprintf("host: bad module %s: plugin type reload.example is already handled by %s", loser, winner)
	if sl.LastError != want {
		t.Errorf("refused file's error %q, want %q", sl.LastError, want)
	}
	// The winner goes away: the other file takes the type.
	if err := os.Remove(winner); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the other file to take the type", func() bool { s, _ := status(h, loser); return s.Serving })
	handlerFor(t, h.Registry(), "reload.example")
}

// TestRunConfigMap follows a Kubernetes ConfigMap volume: name.wasm -> ..data/name.wasm, and
// an update swaps the ..data symlink to a new timestamped directory.
func TestRunConfigMap(t *testing.T) {
	dir := sandboxtest.TempDir(t)
	mk := func(ts, fix string) {
		if err := os.Mkdir(filepath.Join(dir, ts), 0o755); err != nil {
			t.Fatal(err)
		}
		sandboxtest.CopyFile(t, fixture(fix), filepath.Join(dir, ts, "reload.wasm"), 0o644)
	}
	mk("..2025_01_01_00_00_00.1", "reload_v1")
	if err := os.Symlink("..2025_01_01_00_00_00.1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/reload.wasm", filepath.Join(dir, "reload.wasm")); err != nil {
		t.Fatal(err)
	}
	h, _ := newTestHost(t, Config{HandlerDir: dir, RemovalGrace: 100 * time.Millisecond})
	startRun(t, h)
	ctx := context.Background()
	hd := handlerFor(t, h.Registry(), "reload.example")
	if err := hd.ValidatePlugin(ctx, sandboxtest.Info("reload.example", "p")); err != nil {
		t.Fatal(err)
	}

	// The kubelet's atomic update.
	mk("..2025_01_01_00_00_00.2", "reload_v2")
	if err := os.Symlink("..2025_01_01_00_00_00.2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "..2025_01_01_00_00_00.1")); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "version 2", func() bool { return isV2(hd.ValidatePlugin(ctx, sandboxtest.Info("reload.example", "p"))) })
	if len(h.Handlers()) != 1 {
		t.Errorf("Handlers() = %+v, want only reload.wasm", h.Handlers())
	}

	// The key removed from the ConfigMap.
	if err := os.Remove(filepath.Join(dir, "reload.wasm")); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the type to leave the registry", func() bool { _, ok := h.Registry().Get("reload.example"); return !ok })
}

// TestRunHalfWritten writes a new version in place, in two halves with a pause: the half file
// is refused, the old version serves throughout, and the whole file then loads.
func TestRunHalfWritten(t *testing.T) {
	dir := sandboxtest.TempDir(t)
	path := filepath.Join(dir, "reload.wasm")
	sandboxtest.CopyFile(t, fixture("reload_v1"), path, 0o644)
	h, logs := newTestHost(t, Config{HandlerDir: dir})
	startRun(t, h)
	ctx := context.Background()
	hd := handlerFor(t, h.Registry(), "reload.example")
	hm := startHammer(t, func() registration.Handler { return hd }, isV2)

	v2, err := os.ReadFile(fixture("reload_v2"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(v2[:len(v2)/2]); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the half file to be refused", func() bool { return logs.Count("update refused") > 0 })
	if err := hd.ValidatePlugin(ctx, sandboxtest.Info("reload.example", "p")); err != nil {
		t.Errorf("version 1 stopped serving: %v", err)
	}
	if _, err := f.Write(v2[len(v2)/2:]); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "version 2", func() bool { return isV2(hd.ValidatePlugin(ctx, sandboxtest.Info("reload.example", "p"))) })
	hm.check(t)
}

// TestRunDebounce: a file written in small pieces is loaded once, after it is quiet.
func TestRunDebounce(t *testing.T) {
	dir := sandboxtest.TempDir(t)
	h, logs := newTestHost(t, Config{HandlerDir: dir, Debounce: 300 * time.Millisecond})
	startRun(t, h)
	bin, err := os.ReadFile(fixture("reload_v1"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "reload.wasm"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	for chunk := range slices.Chunk(bin, 16) {
		if _, err := f.Write(chunk); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond) // a slow writer, not a wait for the code under test
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	handlerFor(t, h.Registry(), "reload.example")
	if n := logs.Count("refused"); n != 0 {
		t.Errorf("%d refusals of a file being written", n)
	}
}

func TestRunInsecureFile(t *testing.T) {
	dir := sandboxtest.TempDir(t)
	path := filepath.Join(dir, "ok.wasm")
	sandboxtest.CopyFile(t, fixture("ok"), path, 0o666)
	h, _ := newTestHost(t, Config{HandlerDir: dir})
	startRun(t, h)
	s, _ := status(h, path)
	if s.Serving || !strings.Contains(s.LastError, "writable by group or other") {
		t.Errorf("status of a world-writable file %+v", s)
	}
	// Fixing the mode is a change: the file is loaded.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	handlerFor(t, h.Registry(), "ok.example")
}
