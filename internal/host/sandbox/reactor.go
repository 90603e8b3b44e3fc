package sandbox

import "github.com/wasmhost/wasmhost/abi"

// A handler is a WASI reactor: the host calls its exports, after _initialize, as often as it
// likes. A WASI command (it exports _start) is built to run once and exit: the Go runtime of a
// command was never initialized when an export is called (it traps in notInitialized), and a C
// command's exports run its constructors and destructors around every call. Such a module is
// refused before anything of it runs, with the build that makes it a reactor.

// notReactorMsg is the refusal of a module that exports abi.ExportCommandStart.
const notReactorMsg = "exports " + abi.ExportCommandStart + ": it was built as a WASI command, not the reactor a handler must be; " +
	"build it as a reactor: Go: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared; " +
	"C: clang --target=wasm32-wasi -mexec-model=reactor; Rust: rustc --crate-type cdylib (a lib crate, not a bin); " +
	"AssemblyScript: without --exportStart"

// commandExport returns the refusal of a module whose exports include a WASI command's entry
// point, or "".
func commandExport[V any](exports map[string]V) string {
	if _, ok := exports[abi.ExportCommandStart]; ok {
		return notReactorMsg
	}
	return ""
}
