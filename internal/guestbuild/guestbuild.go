// Package guestbuild builds handler modules written with the C, Rust and AssemblyScript SDKs
// (abi/c, abi/rust, abi/assemblyscript) for tests and benchmarks, with the flags the Makefile and
// the walkthroughs use, as guesttest.Build does for Go. A missing toolchain skips the test, or fails it in CI (CI set in
// the environment), which installs them all.
package guestbuild

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// repoRoot is the repository's root, from this file's place in it.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// CFlags are the flags a C handler is built with (the Makefile's WASM_CFLAGS).
var CFlags = []string{"--target=wasm32-wasi", "-mexec-model=reactor", "-O2", "-s"}

// C builds a C handler from srcs (paths relative to the repository's root) and the C SDK, and
// returns the module's path in a temporary directory tb removes.
func C(tb testing.TB, srcs ...string) string {
	tb.Helper()
	clang := tool(tb, "clang", "Debian: clang lld wasi-libc libclang-rt-14-dev-wasm32")
	root := repoRoot()
	out := filepath.Join(tempDir(tb), strings.TrimSuffix(filepath.Base(srcs[0]), ".c")+".wasm")
	args := append(append([]string{}, CFlags...), "-I", filepath.Join(root, "abi", "c"), "-o", out)
	for _, s := range srcs {
		args = append(args, filepath.Join(root, s))
	}
	args = append(args, filepath.Join(root, "abi", "c", "wasmhost.c"))
	run(tb, clang, args...)
	return out
}

// Native builds a native test program with clang from srcs (paths relative to the repository's
// root), the C SDK and its fake host (abi/c/wasmhost_fake.c), warnings as errors, and returns
// its path in a temporary directory tb removes.
func Native(tb testing.TB, srcs ...string) string {
	tb.Helper()
	clang := tool(tb, "clang", "Debian: clang")
	root := repoRoot()
	out := filepath.Join(tempDir(tb), strings.TrimSuffix(filepath.Base(srcs[0]), ".c"))
	args := []string{"-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-I", filepath.Join(root, "abi", "c"), "-o", out}
	for _, s := range append(srcs, "abi/c/wasmhost.c", "abi/c/wasmhost_fake.c") {
		args = append(args, filepath.Join(root, s))
	}
	run(tb, clang, args...)
	return out
}

// Shipped builds the shipped handler name (handlers-wasm/<name>/<name>.c) as the Makefile
// does, and returns the module's path in a temporary directory tb removes.
func Shipped(tb testing.TB, name string) string {
	tb.Helper()
	return C(tb, "handlers-wasm/"+name+"/"+name+".c")
}

// ShippedBytes is Shipped, returning the module's bytes.
func ShippedBytes(tb testing.TB, name string) []byte {
	tb.Helper()
	b, err := os.ReadFile(Shipped(tb, name))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// Rust builds a Rust handler from src (a path relative to the repository's root) and the Rust
// SDK, and returns the module's path in a temporary directory tb removes.
func Rust(tb testing.TB, src string) string {
	tb.Helper()
	rustc := Rustc(tb)
	root, dir := repoRoot(), tempDir(tb)
	run(tb, rustc, "--edition", "2021", "--crate-type", "rlib", "--target", "wasm32-wasi", "-O", "-C", "panic=abort",
		"--crate-name", "wasmhost", "--out-dir", dir, filepath.Join(root, "abi", "rust", "src", "lib.rs"))
	out := filepath.Join(dir, strings.TrimSuffix(filepath.Base(src), ".rs")+".wasm")
	run(tb, rustc, "--edition", "2021", "--crate-type", "cdylib", "--target", "wasm32-wasi", "-O", "-C", "panic=abort",
		"-C", "lto", "-C", "strip=symbols", "-C", "link-arg=-zstack-size=65536",
		"--extern", "wasmhost="+filepath.Join(dir, "libwasmhost.rlib"), "-o", out, filepath.Join(root, src))
	return out
}

// RustTest builds the unit tests of a Rust handler or test file, src (a path relative to the
// repository's root), natively with rustc --test against the Rust SDK built natively (whose
// host functions are then its fake host, wasmhost::fake), warnings as errors, and returns the
// test program's path in a temporary directory tb removes.
func RustTest(tb testing.TB, src string) string {
	tb.Helper()
	rustc := Rustc(tb)
	root, dir := repoRoot(), tempDir(tb)
	run(tb, rustc, "--edition", "2021", "--crate-type", "rlib", "-D", "warnings", "--crate-name", "wasmhost",
		"--out-dir", dir, filepath.Join(root, "abi", "rust", "src", "lib.rs"))
	out := filepath.Join(dir, strings.TrimSuffix(filepath.Base(src), ".rs")+"_test")
	run(tb, rustc, "--edition", "2021", "--test", "-D", "warnings", "--extern", "wasmhost="+filepath.Join(dir, "libwasmhost.rlib"),
		"-o", out, filepath.Join(root, src))
	return out
}

// AS builds an AssemblyScript handler from src (a path relative to the repository's root) and
// the AssemblyScript SDK, with the compiler and the flags of the walkthrough
// (examples/handler-as/README.md), and returns the module's path in a temporary directory tb
// removes. The compiler is the one examples/handler-as pins, installed there by npm ci.
func AS(tb testing.TB, src string) string {
	tb.Helper()
	root := repoRoot()
	asc := filepath.Join(root, "examples", "handler-as", "node_modules", ".bin", "asc")
	if _, err := os.Stat(asc); err != nil {
		missing(tb, "the AssemblyScript compiler ("+asc+")", "Node.js 20 and npm, then npm ci in examples/handler-as")
	}
	tool(tb, "node", "Node.js 20 and npm")
	out := filepath.Join(tempDir(tb), strings.TrimSuffix(filepath.Base(src), ".ts")+".wasm")
	run(tb, asc, filepath.Join(root, src), "--path", filepath.Join(root, "abi", "assemblyscript"),
		"--use", "abort=", "-O3", "-o", out)
	return out
}

// Rustc returns a rustc with the wasm32-wasi standard library: the first in PATH, or
// Debian's /usr/bin/rustc (a rustup toolchain in PATH may lack the target).
func Rustc(tb testing.TB) string {
	tb.Helper()
	var candidates []string
	if p, err := exec.LookPath("rustc"); err == nil {
		candidates = append(candidates, p)
	}
	candidates = append(candidates, "/usr/bin/rustc")
	for _, rustc := range candidates {
		out, err := exec.Command(rustc, "--print", "sysroot").Output()
		if err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(strings.TrimSpace(string(out)), "lib", "rustlib", "wasm32-wasi")); err == nil {
			return rustc
		}
	}
	missing(tb, "a rustc with the wasm32-wasi standard library", "Debian: rustc libstd-rust-dev-wasm32")
	return ""
}

func tool(tb testing.TB, name, install string) string {
	tb.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		missing(tb, name, install)
	}
	return p
}

func missing(tb testing.TB, what, install string) {
	tb.Helper()
	if os.Getenv("CI") != "" {
		tb.Fatalf("%s is not installed, and CI must run this test (install %s)", what, install)
	}
	tb.Skipf("%s is not installed (%s)", what, install)
}

func tempDir(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func run(tb testing.TB, name string, args ...string) {
	tb.Helper()
	start := time.Now()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		tb.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	tb.Logf("%s: built in %v", filepath.Base(name), time.Since(start).Round(time.Millisecond))
}
