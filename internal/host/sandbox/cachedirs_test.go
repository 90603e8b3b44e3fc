package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
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
	m, err := loadFile(h2, ctx, fixture("ok"))
	if err != nil {
		t.Fatal(err)
	}
	m.Close(ctx)
	if exists(modDir("ok")) {
		t.Errorf("the directory of ok.wasm stays after its last module closed")
	}
}

// fixtureSum is the SHA-256 of a fixture, hex (the host's tests' too).
func fixtureSum(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(fixture(name))
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
