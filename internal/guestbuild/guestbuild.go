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
// SDK with the SDK's build script (abi/rust/build, as the walkthrough does) and the rustc
// WasmRustc finds, and returns the module's path in a temporary directory tb removes.
func Rust(tb testing.TB, src string) string {
	tb.Helper()
	rustc, _ := WasmRustc(tb)
	root := repoRoot()
	out := filepath.Join(tempDir(tb), strings.TrimSuffix(filepath.Base(src), ".rs")+".wasm")
	start := time.Now()
	cmd := exec.Command(filepath.Join(root, "abi", "rust", "build"), filepath.Join(root, src), out)
	cmd.Env = append(os.Environ(), "RUSTC="+rustc)
	b, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("abi/rust/build %s: %v\n%s", src, err, b)
	}
	tb.Logf("abi/rust/build %s, in %v:\n%s", src, time.Since(start).Round(time.Millisecond), b)
	return out
}

// RustTest builds the unit tests of a Rust handler or test file, src (a path relative to the
// repository's root), natively with rustc --test against the Rust SDK built natively (whose
// host functions are then its fake host, wasmhost::fake), warnings as errors, and returns the
// test program's path in a temporary directory tb removes. It uses the rustc in PATH, which
// needs no wasm target for this.
func RustTest(tb testing.TB, src string) string {
	tb.Helper()
	rustc := tool(tb, "rustc", "rustup, or Debian: rustc")
	tb.Logf("rustc in PATH: %s, %s", rustc, rustcVersion(rustc))
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
	return ASWithFlags(tb, src, ASFlags...)
}

// ASFlags are the compiler's flags of the walkthrough, after the SDK's --path.
var ASFlags = []string{"--use", "abort=", "-O3"}

// ASWithFlags is AS with the compiler's flags given in place of ASFlags: a build the
// walkthrough warns against, to see what the daemon says of it.
func ASWithFlags(tb testing.TB, src string, flags ...string) string {
	tb.Helper()
	root := repoRoot()
	asc := filepath.Join(root, "examples", "handler-as", "node_modules", ".bin", "asc")
	if _, err := os.Stat(asc); err != nil {
		missing(tb, "the AssemblyScript compiler ("+asc+")", "Node.js 20 and npm, then npm ci in examples/handler-as")
	}
	tool(tb, "node", "Node.js 20 and npm")
	out := filepath.Join(tempDir(tb), strings.TrimSuffix(filepath.Base(src), ".ts")+".wasm")
	args := append([]string{filepath.Join(root, src), "--path", filepath.Join(root, "abi", "assemblyscript")}, flags...)
	run(tb, asc, append(args, "-o", out)...)
	return out
}

// WasmTargets are the WASI targets a Rust handler is built for, in the order abi/rust/build
// prefers them: wasm32-wasip1 (rustc 1.78 and later), wasm32-wasi (before 1.78; removed in 1.84).
var WasmTargets = []string{"wasm32-wasip1", "wasm32-wasi"}

// WasmRustc returns a rustc with the standard library of one of WasmTargets, and that target:
// the rustc in PATH when it has one, else the first other rustc found that has one (a later
// rustc in PATH, Debian's /usr/bin/rustc), since a rustup toolchain may have no wasm target
// installed. It logs which rustc and target it chose, and why when it is not the one in PATH.
func WasmRustc(tb testing.TB) (rustc, target string) {
	tb.Helper()
	candidates := rustcs()
	for k, rustc := range candidates {
		target := wasmTarget(rustc)
		if target == "" {
			tb.Logf("rustc %s (%s) has no wasm target installed (%s)", rustc, rustcVersion(rustc), strings.Join(WasmTargets, ", "))
			continue
		}
		if k > 0 {
			tb.Logf("rustc in PATH lacks a wasm target: using %s instead", rustc)
		}
		tb.Logf("rustc %s (%s), target %s", rustc, rustcVersion(rustc), target)
		return rustc, target
	}
	missing(tb, "a rustc with a wasm standard library ("+strings.Join(WasmTargets, " or ")+")",
		"rustup target add wasm32-wasip1, or Debian: rustc libstd-rust-dev-wasm32")
	return "", ""
}

// rustcs lists every rustc found: each in PATH, in PATH's order, then Debian's /usr/bin/rustc,
// each once (by the file it resolves to).
func rustcs() []string {
	var found []string
	seen := map[string]bool{}
	for _, dir := range append(filepath.SplitList(os.Getenv("PATH")), "/usr/bin") {
		p := filepath.Join(dir, "rustc")
		if dir == "" || !isExecutable(p) {
			continue
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil || seen[real] {
			continue
		}
		seen[real] = true
		found = append(found, p)
	}
	return found
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// wasmTarget returns the first of WasmTargets whose standard library rustc has, or "".
func wasmTarget(rustc string) string {
	out, err := exec.Command(rustc, "--print", "sysroot").Output()
	if err != nil {
		return ""
	}
	for _, t := range WasmTargets {
		if _, err := os.Stat(filepath.Join(strings.TrimSpace(string(out)), "lib", "rustlib", t)); err == nil {
			return t
		}
	}
	return ""
}

func rustcVersion(rustc string) string {
	out, err := exec.Command(rustc, "--version").Output()
	if err != nil {
		return "version unknown: " + err.Error()
	}
	return strings.TrimSpace(string(out))
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
