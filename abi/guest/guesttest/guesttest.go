// Package guesttest helps a handler's Go tests: Build builds a handler package for wasip1 the
// way the Makefile does (to run it in the conformance kit, github.com/wasmhost/wasmhost/conformance),
// and Fake gives native tests the SDK's in-memory host, emptied before and after each test.
package guesttest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Build builds the Go package pkg (an import path, or a directory relative to the test's
// package) for wasip1 as a reactor module, the way the Makefile builds handlers, and returns
// the module's path, in a temporary directory the test removes. It skips the test in -short
// mode, or when there is no go command.
func Build(tb testing.TB, pkg string) string {
	tb.Helper()
	if testing.Short() {
		tb.Skip("builds a WebAssembly module with the Go toolchain")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		tb.Skip("no go command in PATH")
	}
	dir, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	out := filepath.Join(dir, filepath.Base(filepath.Clean(pkg))+".wasm")
	if filepath.Base(out) == "..wasm" {
		out = filepath.Join(dir, "handler.wasm")
	}
	cmd := exec.Command(gobin, "build", "-buildmode=c-shared", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	start := time.Now()
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("go build %s for wasip1: %v\n%s", pkg, err, b)
	}
	if fi, err := os.Stat(out); err == nil {
		tb.Logf("%s: %d bytes, built in %v", pkg, fi.Size(), time.Since(start).Round(time.Millisecond))
	}
	return out
}

// BuildBytes is Build, returning the module's bytes.
func BuildBytes(tb testing.TB, pkg string) []byte {
	tb.Helper()
	b, err := os.ReadFile(Build(tb, pkg))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
