// Package sandboxtest holds the test helpers of the host's and the sandbox's tests
// (internal/host and internal/host/sandbox): temporary directories and files, error and hang
// checks, hostile modules, and what their benchmarks share. A test package cannot import
// another's test files, so what both need is here once.
//
// It imports nothing of the host or the sandbox (the sandbox's own tests import it), and the
// helpers that need a host or a sandbox of a given type stay with those tests. The fixtures
// stay in internal/host/testdata; a caller names them by path.
//
// This package is part of the daemon's tests, not a stable API.
package sandboxtest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/registration"
)

// TempDir returns a new directory under /tmp, which tb removes when it ends.
func TempDir(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// Info is the plugin a call is about: its type and name, nothing else.
func Info(pluginType, name string) registration.PluginInfo {
	return registration.PluginInfo{Type: pluginType, Name: name}
}

// ErrContains fails tb unless err is an error that matches sentinel (errors.Is; nil matches
// any) and whose text contains each of parts. No error at all stops the test.
func ErrContains(tb testing.TB, err error, sentinel error, parts ...string) {
	tb.Helper()
	if err == nil {
		tb.Fatalf("got no error, want %v with %q", sentinel, parts)
	}
	if sentinel != nil && !errors.Is(err, sentinel) {
		tb.Errorf("error %q does not match %v", err, sentinel)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			tb.Errorf("error %q does not contain %q", err, p)
		}
	}
}

// CopyFile copies src to dst, with mode whatever the umask.
func CopyFile(tb testing.TB, src, dst string, mode os.FileMode) {
	tb.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(dst, b, mode); err != nil {
		tb.Fatal(err)
	}
	if err := os.Chmod(dst, mode); err != nil {
		tb.Fatal(err)
	}
}

// WriteFile puts b at path at once: written to the hidden name .tmp beside it, then renamed,
// so that a watcher of the directory never sees it half written.
func WriteFile(tb testing.TB, path string, b []byte) {
	tb.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		tb.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		tb.Fatal(err)
	}
}

// Exists reports whether path names a file (of any kind) that can be stat'd.
func Exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// FileSHA256 is the SHA-256 of the file at path, in hex: the digest the host shows for a
// handler file and keys its revisions by.
func FileSHA256(tb testing.TB, path string) string {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// NoHang fails tb if f has not returned within a minute: a call that does not stop is
// reported instead of hanging the run. The bound is no timing assertion: the calls it waits on
// have deadlines a hundred times shorter. Call it from the test's goroutine.
func NoHang(tb testing.TB, what string, f func()) {
	tb.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		tb.Fatalf("%s: still running after a minute", what)
	}
}
