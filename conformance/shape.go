package conformance

import (
	"context"
	"slices"
	"testing"

	"github.com/tetratelabs/wazero"

	"github.com/wasmhost/wasmhost/abi"
)

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
