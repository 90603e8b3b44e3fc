package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/wasmhost/wasmhost/internal/host/sandbox/sandboxtest"
)

// Describe reads the cache directory that a load of the same bytes left (a pulled module
// admitted again when the daemon restarts), leaves it in place when it is done, and makes
// none for bytes that have none: a description is not kept.
func TestDescribeUsesTheCacheItFinds(t *testing.T) {
	ctx := context.Background()
	cache := filepath.Join(sandboxtest.TempDir(t), "cache")
	modDir := func(name string) string {
		return filepath.Join(cache, moduleCacheDir, sandboxtest.FileSHA256(t, fixture(name)))
	}
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

	h1, _ := newStrictSandbox(t, Config{CacheDir: cache})
	if _, err := loadFile(h1, ctx, fixture("ok")); err != nil {
		t.Fatal(err)
	}
	if err := h1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	before := entries("ok")
	if len(before) == 0 {
		t.Fatalf("the load left no cache entry in %s", modDir("ok"))
	}

	h2, _ := newStrictSandbox(t, Config{CacheDir: cache})
	defer h2.Close(ctx)
	rep, err := h2.Describe(ctx, fixture("ok"), read("ok"))
	if err != nil {
		t.Fatal(err)
	}
	if rep.DescribeError != "" || !slices.Contains(rep.Manifest.PluginTypes, "ok.example") {
		t.Fatalf("described as %+v", rep)
	}
	if after := entries("ok"); !slices.Equal(after, before) {
		t.Errorf("cache entries of ok.wasm after Describe %v, want %v as the load left them", after, before)
	}
	if _, err := h2.Describe(ctx, fixture("reload_v1"), read("reload_v1")); err != nil {
		t.Fatal(err)
	}
	if sandboxtest.Exists(modDir("reload_v1")) {
		t.Errorf("Describe of bytes never loaded made a cache directory: %s", modDir("reload_v1"))
	}
	// A load after the description still finds its entry, and the directory goes with the
	// last module of those bytes, as ever.
	m, err := loadFile(h2, ctx, fixture("ok"))
	if err != nil {
		t.Fatal(err)
	}
	m.Close(ctx)
	if sandboxtest.Exists(modDir("ok")) {
		t.Errorf("the directory of ok.wasm stays after its last module closed")
	}
}
