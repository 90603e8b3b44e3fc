// Package guesttest builds Go handlers for tests and checks the shape of a module against the
// ABI: the exports and imports a handler author, the SDK's own tests and the shipped
// handlers' tests all check the same way.
package guesttest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/wasmhost/wasmhost/abi"
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
	cmd := exec.Command(gobin, "build", "-buildmode=c-shared", "-trimpath", "-o", out, pkg)
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

// CheckShape compiles wasm and checks that it exports exactly the ABI's exports (and
// _initialize) with their signatures and one memory, and imports exactly wantImports from
// abi.ImportModule, with their signatures, and nothing but WASI besides.
func CheckShape(tb testing.TB, wasm []byte, wantImports []string) {
	tb.Helper()
	ctx := context.Background()
	// The interpreter validates and decodes exactly as the compiler does, and compiles a Go
	// module in a fraction of the time (the compiler takes over 10 s under -race).
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(ctx)
	compiled, err := rt.CompileModule(ctx, wasm)
	if err != nil {
		tb.Fatalf("compiling: %v", err)
	}

	var exports []string
	for name, def := range compiled.ExportedFunctions() {
		exports = append(exports, name)
		if sig, ok := abi.ExportSignatures[name]; ok && !sameSignature(def.ParamTypes(), def.ResultTypes(), sig) {
			tb.Errorf("export %s has signature %v -> %v, want %v -> %v", name, def.ParamTypes(), def.ResultTypes(), sig.Params, sig.Results)
		}
	}
	wantExports := append([]string{abi.ExportInitialize}, abi.RequiredExports...)
	slices.Sort(exports)
	slices.Sort(wantExports)
	if !slices.Equal(exports, wantExports) {
		tb.Errorf("function exports %q, want %q", exports, wantExports)
	}
	if _, ok := compiled.ExportedMemories()[abi.ExportMemory]; !ok || len(compiled.ExportedMemories()) != 1 {
		tb.Errorf("memory exports %v, want only %q", compiled.ExportedMemories(), abi.ExportMemory)
	}

	var imports []string
	for _, def := range compiled.ImportedFunctions() {
		mod, name, _ := def.Import()
		switch mod {
		case "wasi_snapshot_preview1":
		case abi.ImportModule:
			imports = append(imports, name)
			sig, ok := abi.ImportSignatures[name]
			if !ok {
				tb.Errorf("imports %s.%s, which the ABI does not define", mod, name)
			} else if !sameSignature(def.ParamTypes(), def.ResultTypes(), sig) {
				tb.Errorf("import %s has signature %v -> %v, want %v -> %v", name, def.ParamTypes(), def.ResultTypes(), sig.Params, sig.Results)
			}
		default:
			tb.Errorf("imports %s.%s: only %s and WASI are allowed", mod, name, abi.ImportModule)
		}
	}
	if len(compiled.ImportedMemories()) != 0 {
		tb.Errorf("imports a memory")
	}
	slices.Sort(imports)
	want := slices.Sorted(slices.Values(wantImports))
	if !slices.Equal(imports, want) {
		tb.Errorf("%s imports %q, want %q", abi.ImportModule, imports, want)
	}
}

func sameSignature[T ~byte](params, results []T, sig abi.Signature) bool {
	same := func(a []T, b []abi.ValueType) bool {
		return slices.EqualFunc(a, b, func(x T, y abi.ValueType) bool { return byte(x) == byte(y) })
	}
	return same(params, sig.Params) && same(results, sig.Results)
}
