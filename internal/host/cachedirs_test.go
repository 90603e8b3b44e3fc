package host

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// The compile cache holds the modules in use and no others: a module replaced leaves it, a
// module refused after compiling is not kept, what the host had loaded when it closed is
// kept for the next start, and a directory of a module no longer loaded is removed at the
// next start.
func TestCompileCacheHoldsOnlyModulesInUse(t *testing.T) {
	cache := filepath.Join(tempDir(t), "cache")
	modDir := func(name string) string { return filepath.Join(cache, moduleCacheDir, fixtureSum(t, name)) }

	h, dir, _, _ := runningHost(t, Config{CacheDir: cache})
	if !exists(modDir("ok")) {
		t.Fatalf("no cache directory for the loaded ok.wasm: %s", modDir("ok"))
	}

	path := filepath.Join(dir, "reload.wasm")
	installFile(t, fixture("reload_v1"), path)
	handlerFor(t, h.Registry(), "reload.example")
	waitFor(t, "reload_v1's cache directory", func() bool { return exists(modDir("reload_v1")) })

	copyFile(t, fixture("reload_v2"), path, 0o644) // in place
	waitFor(t, "reload_v2 to serve", func() bool {
		s, ok := status(h, path)
		return ok && s.SHA256 == fixtureSum(t, "reload_v2")
	})
	waitFor(t, "reload_v1's cache directory to go once v2 serves", func() bool { return !exists(modDir("reload_v1")) })
	if !exists(modDir("reload_v2")) {
		t.Errorf("no cache directory for reload_v2, which serves")
	}

	bad := filepath.Join(dir, "noexport.wasm")
	installFile(t, fixture("noexport"), bad)
	errorOf(t, h, bad)
	if exists(modDir("noexport")) {
		t.Errorf("the refused module's compile is kept in the cache: %s", modDir("noexport"))
	}

	if err := h.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !exists(modDir("ok")) || !exists(modDir("reload_v2")) {
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
	if exists(modDir("reload_v2")) || exists(stale) {
		t.Errorf("directories of modules not loaded at start are kept (reload_v2 %v, stale %v)", exists(modDir("reload_v2")), exists(stale))
	}
	if !exists(modDir("ok")) {
		t.Errorf("the cache of ok.wasm, loaded again, is gone")
	}
	if attrs, ok := lg.find("compile cache pruned: modules no longer loaded"); !ok || attrs["removed"] != "2" {
		t.Errorf("prune logged as %v, want removed=2", attrs)
	}
}

// Inspect reads the cache directory that a load of the same bytes left (a pulled module
// admitted again when the daemon restarts), leaves it in place when it is done, and makes
// none for bytes that have none: a description is not kept.
func TestInspectUsesTheCacheItFinds(t *testing.T) {
	ctx := context.Background()
	cache := filepath.Join(tempDir(t), "cache")
	modDir := func(name string) string { return filepath.Join(cache, moduleCacheDir, fixtureSum(t, name)) }
	read := func(name string) []byte {
		b, err := os.ReadFile(fixture(name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	entries := func(name string) []string {
		var out []string
		_ = filepath.WalkDir(modDir(name), func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				out = append(out, p)
			}
			return nil
		})
		return out
	}

	h1, _ := newStrictHost(t, Config{CacheDir: cache})
	if _, err := h1.LoadFile(ctx, fixture("ok")); err != nil {
		t.Fatal(err)
	}
	if err := h1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	before := entries("ok")
	if len(before) == 0 {
		t.Fatalf("the load left no cache entry in %s", modDir("ok"))
	}

	h2, _ := newStrictHost(t, Config{CacheDir: cache})
	defer h2.Close(ctx)
	rep, err := h2.Inspect(ctx, fixture("ok"), read("ok"))
	if err != nil {
		t.Fatal(err)
	}
	if rep.DescribeError != "" || !slices.Contains(rep.Manifest.PluginTypes, "ok.example") {
		t.Fatalf("described as %+v", rep)
	}
	if after := entries("ok"); !slices.Equal(after, before) {
		t.Errorf("cache entries of ok.wasm after Inspect %v, want %v as the load left them", after, before)
	}
	if _, err := h2.Inspect(ctx, fixture("reload_v1"), read("reload_v1")); err != nil {
		t.Fatal(err)
	}
	if exists(modDir("reload_v1")) {
		t.Errorf("Inspect of bytes never loaded made a cache directory: %s", modDir("reload_v1"))
	}
	// A load after the description still finds its entry, and the directory goes with the
	// last module of those bytes, as ever.
	m, err := h2.LoadFile(ctx, fixture("ok"))
	if err != nil {
		t.Fatal(err)
	}
	m.Close(ctx)
	if exists(modDir("ok")) {
		t.Errorf("the directory of ok.wasm stays after its last module closed")
	}
}
