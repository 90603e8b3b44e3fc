package host

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/internal/host/sandbox/sandboxtest"
	"github.com/wasmhost/wasmhost/internal/testwait"
)

// moduleCacheDir is where the sandbox keeps each module's compile cache in CacheDir
// (sandbox/cachedirs.go).
const moduleCacheDir = "modules"

// The compile cache holds the modules in use and no others: a module replaced leaves it, a
// module refused after compiling is not kept, what the host had loaded when it closed is
// kept for the next start, and a directory of a module no longer loaded is removed at the
// next start.
func TestCompileCacheHoldsOnlyModulesInUse(t *testing.T) {
	cache := filepath.Join(sandboxtest.TempDir(t), "cache")
	modDir := func(name string) string {
		return filepath.Join(cache, moduleCacheDir, sandboxtest.FileSHA256(t, fixture(name)))
	}

	h, dir, _, _ := runningHost(t, Config{CacheDir: cache})
	if !sandboxtest.Exists(modDir("ok")) {
		t.Fatalf("no cache directory for the loaded ok.wasm: %s", modDir("ok"))
	}

	path := filepath.Join(dir, "reload.wasm")
	installFile(t, fixture("reload_v1"), path)
	handlerFor(t, h.Registry(), "reload.example")
	testwait.Until(t, "reload_v1's cache directory", func() bool { return sandboxtest.Exists(modDir("reload_v1")) })

	sandboxtest.CopyFile(t, fixture("reload_v2"), path, 0o644) // in place
	testwait.Until(t, "reload_v2 to serve", func() bool {
		s, ok := status(h, path)
		return ok && s.SHA256 == sandboxtest.FileSHA256(t, fixture("reload_v2"))
	})
	testwait.Until(t, "reload_v1's cache directory to go once v2 serves", func() bool { return !sandboxtest.Exists(modDir("reload_v1")) })
	if !sandboxtest.Exists(modDir("reload_v2")) {
		t.Errorf("no cache directory for reload_v2, which serves")
	}

	bad := filepath.Join(dir, "noexport.wasm")
	installFile(t, fixture("noexport"), bad)
	errorOf(t, h, bad)
	if sandboxtest.Exists(modDir("noexport")) {
		t.Errorf("the refused module's compile is kept in the cache: %s", modDir("noexport"))
	}

	if err := h.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !sandboxtest.Exists(modDir("ok")) || !sandboxtest.Exists(modDir("reload_v2")) {
		t.Fatal("closing the host removed the cache of what it had loaded")
	}

	// Next start: reload.wasm is gone; its directory goes once the handlers are loaded, ok's stays.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(cache, moduleCacheDir, strings.Repeat("ab", 32))
	if err := os.MkdirAll(stale, 0o700); err != nil {
		t.Fatal(err)
	}
	h2, lg := newStrictHost(t, Config{HandlerDir: dir, CacheDir: cache})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h2.Run(ctx) }()
	defer func() { cancel(); <-done }()
	<-h2.Ready()
	handlerFor(t, h2.Registry(), "ok.example")
	if sandboxtest.Exists(modDir("reload_v2")) || sandboxtest.Exists(stale) {
		t.Errorf("directories of modules not loaded at start are kept (reload_v2 %v, stale %v)", sandboxtest.Exists(modDir("reload_v2")), sandboxtest.Exists(stale))
	}
	if !sandboxtest.Exists(modDir("ok")) {
		t.Errorf("the cache of ok.wasm, loaded again, is gone")
	}
	if attrs, ok := lg.Find("compile cache pruned: modules no longer loaded"); !ok || attrs["removed"] != "2" {
		t.Errorf("prune logged as %v, want removed=2", attrs)
	}
}
