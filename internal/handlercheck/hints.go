// Package handlercheck is `wasmhost handler test`, `handler inspect` and `handler diff` without
// their command line: one handler module file, checked as the daemon would load it (Inspect)
// and called as the daemon would call it for one plugin (Test), or two revisions replaying the
// same sessions (Diff), each giving a report, the document that -o json and -o yaml print and
// the command writes as text; with the hints that say what to do about each SDK's usual
// mistakes. It is built on the host (Inspect) and the harness (Test, Diff), set up as the
// daemon's sandbox by the caller.
package handlercheck

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/host/sandbox"
)

// MaxModuleSize is the largest module file read: the daemon's limit for a handler.
const MaxModuleSize = 64 << 20

// ReadModule reads a module file for a check, refusing what is not a regular file or is over
// MaxModuleSize, as the daemon would.
func ReadModule(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if fi.Size() > MaxModuleSize {
		return nil, fmt.Errorf("%s: %d bytes, over the daemon's limit of 64 MiB for a handler", path, fi.Size())
	}
	return os.ReadFile(path)
}

// NotLoadable is the error of a module that no call can be made to, whatever the plugin: the
// daemon would not load it, for Why.
type NotLoadable struct {
	Path, Why string
}

func (e *NotLoadable) Error() string { return e.Path + " would not load: " + e.Why }

// NotWasmHint says what a file that is not WebAssembly seems to be; "" when it cannot tell.
func NotWasmHint(b []byte) string {
	switch {
	case len(b) == 0:
		return "the file is empty"
	case strings.HasPrefix(string(b), "\x7fELF"), strings.HasPrefix(string(b), "MZ"), strings.HasPrefix(string(b), "\xcf\xfa\xed\xfe"):
		return "it is a native executable: build the handler with GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared"
	case utf8.Valid(b) && strings.Contains(string(b), "(module"):
		return "it is WebAssembly text: assemble it first (wat2wasm)"
	case strings.HasPrefix(string(b), "\x00asm") && !strings.HasPrefix(string(b), "\x00asm\x01\x00\x00\x00"):
		return "it is WebAssembly of an unsupported binary version"
	}
	return ""
}

// notWasm is the error of a module the host could not describe: what the file seems to be
// when that can be told, else the host's error.
func notWasm(path string, b []byte, err error) error {
	if hint := NotWasmHint(b); hint != "" {
		return fmt.Errorf("%s is not a WebAssembly module: %s", path, hint)
	}
	return err
}

// LoadHints says what to do about the daemon's refusal of the module at path, whose manifest
// declares types and whose imports ask for caps.
func LoadHints(err error, path string, types []string, caps []string) []string {
	var hints []string
	switch {
	case errors.Is(err, sandbox.ErrNotGranted):
		for _, t := range types {
			hints = append(hints, fmt.Sprintf("the operator grants it in the daemon's config: handlers.types.%s.capabilities: [%s]", t, strings.Join(caps, ", ")))
		}
	case errors.Is(err, sandbox.ErrInsecure):
		hints = append(hints, "make the file writable by its owner only (chmod go-w "+path+"), or pass --allow-insecure (the daemon: handlers.allowInsecure or --allow-insecure-handlers)")
	case strings.Contains(err.Error(), "memory minimum"):
		hints = append(hints, "raise handlers.memoryLimit, or make the module declare less memory")
	case slices.ContainsFunc(abi.RequiredExports, func(e string) bool { return strings.Contains(err.Error(), "missing export "+e) }):
		hints = append(hints, "is it a handler? Each SDK makes the ABI's exports: "+sdkExportHints())
	case strings.Contains(err.Error(), "imports unknown host function env.abort"), strings.Contains(err.Error(), "module[env] not instantiated"):
		hints = append(hints, asAbortHint)
	}
	return hints
}

// sdkExportHints says, for each SDK, what a module lacking the ABI's exports left out.
func sdkExportHints() string {
	return "Go: call guest.Handle in init, build with GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared; " +
		"C: define wh_handler_def and compile abi/c/wasmhost.c into the module (clang ... handler.c wasmhost.c); " +
		"Rust: wasmhost::export!(YourHandler, Manifest { ... }), built as --crate-type cdylib (abi/rust/build does both); " +
		"AssemblyScript: re-export them from the entry file (export { " + strings.Join(abi.RequiredExports, ", ") + " } from \"wasmhost\")"
}

// asAbortHint is the hint for an AssemblyScript module built without --use abort=: it imports
// env.abort, which wazero reports as "module[env] not instantiated" when it instantiates it.
const asAbortHint = "an AssemblyScript build imports env.abort unless told not to: build with asc ... --use abort= " +
	"(the daemon provides only its own functions and WASI's; an abort then traps)"
