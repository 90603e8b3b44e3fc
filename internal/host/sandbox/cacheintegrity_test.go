package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCompileCacheTamperDetected: an entry of the on-disk compile cache changed, or planted,
// by anything but the host's own compiles is discarded before wazero reads it, and the module
// is compiled again.
func TestCompileCacheTamperDetected(t *testing.T) {
	cache := filepath.Join(t.TempDir(), "cache")
	load := func() *logs {
		h, l := newTestSandbox(t, Config{CacheDir: cache})
		m := mustLoad(t, h, "ok")
		checkOK(t, m)
		if err := h.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		return l
	}
	load()
	entries := newCacheSums(cache, nil).entries()
	if len(entries) == 0 {
		t.Fatal("the compile left no cache entry")
	}
	list, err := os.ReadFile(filepath.Join(cache, cacheSumsFile))
	if err != nil || !strings.Contains(string(list), entries[0]) {
		t.Fatalf("integrity list %q (%v) does not name %s", list, err, entries[0])
	}

	// Untouched: nothing is discarded.
	if l := load(); l.Count("compile cache entry discarded") != 0 {
		t.Errorf("an untouched cache entry was discarded")
	}

	// Changed in place, and a planted one: both discarded, the module compiled again.
	entry := filepath.Join(cache, entries[0])
	b, _ := os.ReadFile(entry)
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(entry, b, 0o600); err != nil {
		t.Fatal(err)
	}
	planted := filepath.Join(filepath.Dir(entry), strings.Repeat("ab", 32))
	if err := os.WriteFile(planted, []byte("not compiled here"), 0o600); err != nil {
		t.Fatal(err)
	}
	l := load()
	if n := l.Count("compile cache entry discarded"); n != 2 {
		t.Errorf("%d entries discarded, want the changed one and the planted one", n)
	}
	if _, err := os.Stat(planted); !os.IsNotExist(err) {
		t.Errorf("planted entry still there: %v", err)
	}
	again, _ := os.ReadFile(entry)
	if len(again) == 0 || string(again) == string(b) {
		t.Errorf("the changed entry was not compiled again")
	}
}
