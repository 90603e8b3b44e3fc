package host

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/host/sandbox"
	"github.com/wasmhost/wasmhost/internal/host/sandbox/sandboxtest"
	"github.com/wasmhost/wasmhost/internal/logtest"
	"github.com/wasmhost/wasmhost/internal/watcher"
)

// followDir is the daemon's follower of the handler directory (internal/daemon's followDir).
func followDir(dir string, resync, retry time.Duration) (DirFollower, error) {
	f, err := watcher.FollowDir(dir, resync, retry)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// logs captures log records for assertions (shown with $WASMHOST_TESTLOG).
type logs = logtest.Logs

// newTestHost returns a host with test-friendly defaults and a log capture; the test closes it.
// A host that loads the testdata fixtures in place (no HandlerDir) allows insecure files when the
// checkout made them group-writable (umask 002); newStrictHost never does.
func newTestHost(t testing.TB, cfg Config) (*Host, *logs) {
	t.Helper()
	if cfg.HandlerDir == "" && fixturesShared() {
		cfg.AllowInsecure = true
	}
	return newStrictHost(t, cfg)
}

func fixturesShared() bool {
	fi, err := os.Stat(fixture("ok"))
	return err != nil || sandbox.CheckNotShared("", "", fi) != nil
}

func newStrictHost(t testing.TB, cfg Config) (*Host, *logs) {
	t.Helper()
	l := &logs{}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(l)
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = 2 * time.Second
	}
	if cfg.PoolSize == 0 {
		cfg.PoolSize = 2
	}
	if cfg.FollowDir == nil {
		cfg.FollowDir = followDir
	}
	h, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := h.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return h, l
}

func fixture(name string) string { return filepath.Join("testdata", name+".wasm") }

// installFile puts src at dst atomically (write a hidden temporary name, then rename).
func installFile(t testing.TB, src, dst string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp")
	sandboxtest.CopyFile(t, src, tmp, 0o644)
	if err := os.Rename(tmp, dst); err != nil {
		t.Fatal(err)
	}
}
