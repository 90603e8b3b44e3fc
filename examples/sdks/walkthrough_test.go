// Package sdks tests the walkthroughs of the handler SDKs other than Go's (examples/handler-c,
// ...), and so the SDKs and their example handlers: each walkthrough builds its example, runs
// it with wasmhost handler inspect and test, and passes it through the conformance kit. (The
// tests live here, not beside the examples, because the go command refuses a package directory
// with C files in it.)
package sdks

import (
	"testing"

	"github.com/wasmhost/wasmhost/internal/doctest"
	"github.com/wasmhost/wasmhost/internal/guestbuild"
)

// walkthrough follows the README.md of example word for word, in a directory dir outside the
// repository beside a checkout of it, as the language's programmer would.
// env is added to the commands' environment.
func walkthrough(t *testing.T, example, dir string, env ...string) {
	page := doctest.Parse(t, "../"+example+"/README.md", dir)
	if len(page.Steps) < 6 {
		t.Fatalf("%s/README.md shows %d commands, want the walkthrough's", example, len(page.Steps))
	}
	page.Run(t, doctest.Workspace(t, "../..", dir), env...)
}

func TestWalkthroughC(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a C handler and the wasmhost command")
	}
	doctest.Tool(t, "clang", "Debian: clang lld wasi-libc libclang-rt-14-dev-wasm32")
	doctest.Tool(t, "go", "Go 1.26")
	walkthrough(t, "handler-c", "widget")
}

func TestWalkthroughRust(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a Rust handler and the wasmhost command")
	}
	doctest.Tool(t, "go", "Go 1.26")
	// The walkthrough's rustc must have a wasm standard library (wasm32-wasip1 or, before
	// rustc 1.78, wasm32-wasi): the one in PATH when it has one; else another found, put
	// first in PATH (a rustup toolchain may have no wasm target installed, Debian's rustc has
	// wasm32-wasi with libstd-rust-dev-wasm32). WasmRustc logs which rustc and target.
	rustc, _ := guestbuild.WasmRustc(t)
	walkthrough(t, "handler-rust", "widget", doctest.PathFirst(t, rustc))
}

func TestWalkthroughAssemblyScript(t *testing.T) {
	if testing.Short() {
		t.Skip("installs the AssemblyScript compiler with npm, builds a handler and the wasmhost command")
	}
	doctest.Tool(t, "go", "Go 1.26")
	doctest.Tool(t, "npm", "Node.js 20 and npm")
	walkthrough(t, "handler-as", "widget")
}
