package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/guestbuild"
)

// noABIModule is a WebAssembly reactor with a memory and none of the ABI's exports: what the C
// compiler makes of a handler built without abi/c/wasmhost.c, Rust of one without
// wasmhost::export!, AssemblyScript of one that does not re-export the SDK's functions.
var noABIModule = []byte{
	0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version 1
	0x05, 0x03, 0x01, 0x00, 0x01, // memory section: one memory, min 1 page
	0x07, 0x0a, 0x01, 0x06, 'm', 'e', 'm', 'o', 'r', 'y', 0x02, 0x00, // export "memory"
}

// TestHandlerTestLoadErrorBeforeType: handler test on a module that will not load, which
// therefore declares no plugin type, says why it does not load, with the hint for each SDK,
// where it said "--type is needed" (which adding --type does not cure); with --type, the same.
func TestHandlerTestLoadErrorBeforeType(t *testing.T) {
	dir, cache := handlerCmdDir(t)
	m := filepath.Join(dir, "noabi.wasm")
	if err := os.WriteFile(m, noABIModule, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, extra := range [][]string{nil, {"--type", "example.wasmhost.dev"}} {
		args := append([]string{"handler", "test", m, "--name", "demo", "--cache-dir", cache}, extra...)
		out, err := handlerCmdRun(t, args...)
		if !errors.Is(err, errHandlerFailed) || strings.Contains(err.Error(), "--type") ||
			!strings.Contains(err.Error(), "the module did not load: host: bad module "+m+": missing export "+abi.ExportABIVersion) {
			t.Errorf("%q: %v, want the load error\n%s", args, err, out)
		}
		handlerCmdWant(t, out, "load      error  host: bad module "+m+": missing export "+abi.ExportABIVersion,
			"hint: is it a handler? Each SDK makes the ABI's exports: Go: call guest.Handle in init",
			"C: define wh_handler_def and compile abi/c/wasmhost.c into the module",
			"Rust: wasmhost::export!(YourHandler, Manifest { ... }), built as --crate-type cdylib",
			"AssemblyScript: re-export them from the entry file")
	}
	out, err := handlerCmdRun(t, "handler", "inspect", m, "--cache-dir", cache)
	if !errors.Is(err, errHandlerFailed) {
		t.Errorf("handler inspect: %v, want it to say the daemon would refuse it\n%s", err, out)
	}
	handlerCmdWant(t, out, "hint: is it a handler? Each SDK makes the ABI's exports: Go:")
}

// TestHandlerHintAssemblyScriptAbort builds the AssemblyScript example without --use abort=,
// the walkthrough's flag: the module imports env.abort, which wazero reports as "module[env]
// not instantiated". handler test (without --type: the module's manifest cannot be read) and
// handler inspect say how to build it.
func TestHandlerHintAssemblyScriptAbort(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an AssemblyScript handler")
	}
	dir, cache := handlerCmdDir(t)
	m := handlerCmdCopy(t, dir, guestbuild.ASWithFlags(t, "examples/handler-as/example.ts", "-O3"))
	out, err := handlerCmdRun(t, "handler", "test", m, "--name", "demo", "--versions", "v1", "--cache-dir", cache)
	if !errors.Is(err, errHandlerFailed) || strings.Contains(err.Error(), "--type") {
		t.Errorf("handler test: %v, want the load error\n%s", err, out)
	}
	handlerCmdWant(t, out, "imports unknown host function env.abort",
		"hint: an AssemblyScript build imports env.abort unless told not to: build with asc ... --use abort=")
	out, err = handlerCmdRun(t, "handler", "inspect", m, "--cache-dir", cache)
	if !errors.Is(err, errHandlerFailed) {
		t.Errorf("handler inspect: %v, want it to say the daemon would refuse it\n%s", err, out)
	}
	handlerCmdWant(t, out, "module[env] not instantiated", "hint: an AssemblyScript build imports env.abort")
}
