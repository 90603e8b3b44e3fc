package guestbuild

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeRustc writes a rustc that answers --version, --print sysroot (a directory holding the
// standard libraries of installed) and --print target-list (known), and records every other
// command line in its directory's args file; it returns the rustc's path.
func fakeRustc(t *testing.T, version string, installed, known []string) string {
	t.Helper()
	dir := tempDir(t)
	sysroot := filepath.Join(dir, "sysroot")
	for _, target := range append(installed, "x86_64-unknown-linux-gnu") {
		if err := os.MkdirAll(filepath.Join(sysroot, "lib", "rustlib", target), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script := `#!/bin/sh
case "$1 $2" in
"--version ") echo "` + version + `"; exit 0 ;;
"--print sysroot") echo "` + sysroot + `"; exit 0 ;;
"--print target-list") printf '%s\n' ` + strings.Join(known, " ") + `; exit 0 ;;
esac
echo "$*" >> "` + filepath.Join(dir, "args") + `"
`
	rustc := filepath.Join(dir, "rustc")
	if err := os.WriteFile(rustc, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return rustc
}

// TestRustBuildPicksTheTarget runs the Rust SDK's build script (abi/rust/build) with rustcs of
// each kind: it builds for wasm32-wasip1 where the rustc has it (1.78 and later, rustup's
// stable once the target is added), for wasm32-wasi where that is what it has (Debian's 1.63),
// and where it has neither, says which target to install and how, instead of running rustc.
func TestRustBuildPicksTheTarget(t *testing.T) {
	modern := []string{"wasm32-unknown-unknown", "wasm32-wasip1", "wasm32-wasip2"}
	old := []string{"wasm32-unknown-unknown", "wasm32-wasi"}
	for _, c := range []struct {
		name, version      string
		installed, known   []string
		target, errContent string
	}{
		{"rustup stable with wasip1", "rustc 1.95.0 (59807616e 2026-04-14)", []string{"wasm32-wasip1"}, modern, "wasm32-wasip1", ""},
		{"1.80 with both", "rustc 1.80.0", []string{"wasm32-wasi", "wasm32-wasip1"}, append(old, "wasm32-wasip1"), "wasm32-wasip1", ""},
		{"debian 1.63", "rustc 1.63.0", []string{"wasm32-wasi"}, old, "wasm32-wasi", ""},
		{"rustup stable without", "rustc 1.95.0", nil, modern, "", "install wasm32-wasip1: rustup target add wasm32-wasip1"},
		{"debian 1.63 without", "rustc 1.63.0", nil, old, "", "install wasm32-wasi: on Debian, apt-get install libstd-rust-dev-wasm32"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rustc := fakeRustc(t, c.version, c.installed, c.known)
			dir := filepath.Dir(rustc)
			cmd := exec.Command(filepath.Join(repoRoot(), "abi", "rust", "build"), "widget.rs")
			cmd.Dir, cmd.Env = dir, append(os.Environ(), "RUSTC="+rustc)
			out, err := cmd.CombinedOutput()
			args, _ := os.ReadFile(filepath.Join(dir, "args"))
			if c.errContent != "" {
				if err == nil || !strings.Contains(string(out), c.errContent) || !strings.Contains(string(out), c.version) {
					t.Fatalf("build: %v, want a failure naming %q and %q\n%s", err, c.version, c.errContent, out)
				}
				if len(args) != 0 {
					t.Fatalf("build ran rustc without a target:\n%s", args)
				}
				return
			}
			if err != nil {
				t.Fatalf("build: %v\n%s", err, out)
			}
			if want := "build: " + c.version + ", target " + c.target + "\n"; !strings.Contains(string(out), want) {
				t.Errorf("build says\n%s\nwant the line %q", out, want)
			}
			lines := strings.Split(strings.TrimSpace(string(args)), "\n")
			if len(lines) != 2 || !strings.Contains(lines[0], "--crate-type rlib --target "+c.target+" ") ||
				!strings.Contains(lines[1], "--crate-type cdylib --target "+c.target+" ") || !strings.Contains(lines[1], "-o widget.wasm widget.rs") {
				t.Errorf("rustc ran\n%s\nwant the SDK's rlib and the handler's cdylib, both for %s", args, c.target)
			}
			// The tests' choice of target is the script's.
			if got := wasmTarget(rustc); got != c.target {
				t.Errorf("wasmTarget = %q, the script built for %q", got, c.target)
			}
			pr := exec.Command(filepath.Join(repoRoot(), "abi", "rust", "build"), "--target")
			pr.Env = cmd.Env
			if b, err := pr.Output(); err != nil || string(b) != c.target+"\n" {
				t.Errorf("build --target: %q, %v; want %q", b, err, c.target)
			}
		})
	}
}

// TestRustBuildsAModule builds the Rust example with the rustc the tests find (logging which,
// and the target) and checks that the module is WebAssembly.
func TestRustBuildsAModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a Rust handler")
	}
	b, err := os.ReadFile(Rust(t, "examples/handler-rust/example.rs"))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 8 || string(b[:4]) != "\x00asm" {
		t.Fatalf("abi/rust/build wrote %d bytes that are not a WebAssembly module", len(b))
	}
}
