package pulled

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/host"
	"github.com/wasmhost/wasmhost/internal/oci"
	"github.com/wasmhost/wasmhost/internal/oci/ocitest"
	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/watcher"
)

func module(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "host", "testdata", name+".wasm"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func follow(dir string, resync, retry time.Duration) (host.DirFollower, error) {
	f, err := watcher.FollowDir(dir, resync, retry)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// newHandlers returns Handlers for sources, unsigned modules of reload.example allowed, with
// a first wait of an hour: only the sources settling opens the gate within a test.
func newHandlers(t *testing.T, tmp string, reg *registration.Registry, sources ...string) *Handlers {
	t.Helper()
	p, err := New(t.Context(), Config{
		Host: host.Config{HandlerDir: filepath.Join(tmp, "handlers-oci"), Registry: reg, FollowDir: follow},
		Sources: oci.SourcesConfig{Refs: sources, StoreDir: filepath.Join(tmp, "oci"), AllowUnsigned: []string{"reload.example"},
			Retry: time.Hour, PullTimeout: time.Minute, MaxParallel: 2},
		FirstWait: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Prepare(t.Context()); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestGateOpensWhenSettled: the gate opens once the source is pulled and its module served,
// told by the sources' and the host's changes (the first wait is an hour); a new revision
// configured and pulled at once (PullNow) is served when PullNow returns.
func TestGateOpensWhenSettled(t *testing.T) {
	regy := ocitest.Start(t)
	tmp := t.TempDir()
	v1bin, v2bin := module(t, "reload_v1"), module(t, "reload_v2")
	v1 := ocitest.PushArtifact(t, regy.Ref("h/reload:v1"), v1bin)
	v2 := ocitest.PushArtifact(t, regy.Ref("h/reload:v2"), v2bin)

	run := func(source string) (p *Handlers, reg *registration.Registry, stop func()) {
		reg = registration.NewRegistry()
		p = newHandlers(t, tmp, reg, source)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()
		return p, reg, func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
			_ = p.Close(context.Background())
		}
	}
	p, reg, stop := run(v1.String())
	select {
	case <-p.Gate():
	case <-time.After(2 * time.Minute):
		t.Fatalf("the gate did not open; sources %+v", p.Sources().Statuses())
	}
	if !reg.Has("reload.example") || p.Pending() || p.NotReady() != nil {
		t.Fatalf("gate open: reload.example served %v, pending %v", reg.Has("reload.example"), p.Pending())
	}
	st := p.Statuses()
	if len(st) != 1 || !st[0].Serving || st[0].SHA256 != oci.SHA256Hex(v1bin) || !strings.HasPrefix(st[0].File, v1.String()) {
		t.Errorf("statuses %+v, want %s serving %s", st, v1, oci.SHA256Hex(v1bin))
	}
	stop()

	// The next start serves v1 from the store, and PullNow brings v2 in.
	p, _, stop = run(v2.String())
	defer stop()
	<-p.Gate()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := p.PullNow(ctx); err != nil {
		t.Fatal(err)
	}
	if st := p.Statuses(); len(st) != 1 || !st[0].Serving || st[0].SHA256 != oci.SHA256Hex(v2bin) {
		t.Errorf("after PullNow: statuses %+v, want %s serving", st, oci.SHA256Hex(v2bin))
	}
}

// TestNilHandlers: without sources, the daemon's calls on a nil *Handlers do nothing and say
// it is ready.
func TestNilHandlers(t *testing.T) {
	var p *Handlers
	ctx := context.Background()
	if p.Prepare(ctx) != nil || p.Run(ctx) != nil || p.WaitReady(ctx) != nil || p.HostLoaded(ctx) != nil ||
		p.NotReady() != nil || p.Pending() || p.Statuses() != nil || p.Host() != nil || p.Close(ctx) != nil {
		t.Error("a nil *Handlers is not an idle, ready one")
	}
}

// TestNotifier: a waiter that took the channel before a change sees it, one that takes it
// after waits for the next.
func TestNotifier(t *testing.T) {
	var n notifier
	before := n.wait()
	n.after(nil)()
	select {
	case <-before:
	default:
		t.Fatal("a change after wait was missed")
	}
	after := n.wait()
	select {
	case <-after:
		t.Fatal("a change before wait was seen as a new one")
	default:
	}
	called := false
	n.after(func() { called = true })()
	select {
	case <-after:
	default:
		t.Error("after(f) did not notify")
	}
	if !called {
		t.Error("after(f) did not call f")
	}
}
