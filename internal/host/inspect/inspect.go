// Package inspect reports what a handler module is without serving it: its exports and imports
// with their signatures, the capabilities its imports need, its ABI version and manifest. It is
// `wasmhost handler inspect`'s report, which the conformance kit, `handler test` and the
// admission of a module pulled from a registry read too.
//
// The sandbox (package sandbox) does the work that runs guest code: it compiles the module as
// a load would, under the same bounds, and runs its description exports with stub host
// functions (sandbox.Describe). This package makes the report of what it found, and imports
// nothing of the host's packages over the sandbox (internal/daemon's layout_test.go).
//
// This package is part of the wasmhost daemon, not a stable API.
package inspect

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"

	"github.com/tetratelabs/wazero/api"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/host/sandbox"
	"github.com/wasmhost/wasmhost/internal/host/wasmbin"
)

// Report is what Inspect learns about a module.
type Report struct {
	Size   int64  // of the module's bytes
	SHA256 string // of the module's bytes, hex

	Exports []Export // every export, sorted by name
	Imports []Import // every import, in the module's order

	// Capabilities are the capabilities (abi.Capability*) the module's imports need, sorted.
	Capabilities []string

	// ABIVersion and Manifest are what the module's exports answered in a sandbox with stub
	// host functions. DescribeError says why they are missing, when they are.
	ABIVersion    uint32
	Manifest      abi.Manifest
	DescribeError string
}

// Export is one export of a module.
type Export struct {
	Name string
	Kind string // function, memory, table or global
	// Signature is a function's WebAssembly type, "(i32) -> (i32)"; for a memory, its limits
	// in 64 KiB pages, "min 17 pages, no max".
	Signature string
}

// Import is one import of a module.
type Import struct {
	Module, Name string
	Kind         string // function, table, memory, global or tag
	Signature    string // a function's WebAssembly type; "" for other kinds
	// Capability is the capability a host function needs (abi.CapabilityImports), or "".
	Capability string
}

// Inspect reads what bin (a module named name in messages) exports and imports, with
// signatures, and what its abi_version and manifest exports answer, as sb describes it
// (sandbox.Describe: the sandbox's memory limit and call timeout, stub host functions). Unlike a
// load it neither checks grants nor permissions, and a module it can describe may still be
// refused: load it to know. The error (sandbox.ErrBadModule) is for bytes that are not a
// WebAssembly module at all, or that the sandbox refuses to compile.
func Inspect(ctx context.Context, sb *sandbox.Sandbox, name string, bin []byte) (*Report, error) {
	d, err := sb.Describe(ctx, name, bin)
	if err != nil {
		return nil, err
	}
	return report(d), nil
}

// report reads a description into a report.
func report(d *sandbox.Description) *Report {
	r := &Report{
		Size: d.Size, SHA256: d.SHA256,
		ABIVersion: d.ABIVersion, Manifest: d.Manifest, DescribeError: d.DescribeError,
	}
	for n, def := range d.ExportedFunctions {
		r.Exports = append(r.Exports, Export{Name: n, Kind: "function", Signature: sandbox.Signature(def.ParamTypes(), def.ResultTypes())})
	}
	for n, mem := range d.ExportedMemories {
		r.Exports = append(r.Exports, Export{Name: n, Kind: "memory", Signature: memLimits(mem)})
	}
	sort.Slice(r.Exports, func(i, j int) bool { return r.Exports[i].Name < r.Exports[j].Name })

	funcs := map[[2]string]api.FunctionDefinition{}
	for _, def := range d.ImportedFunctions {
		mod, n, _ := def.Import()
		funcs[[2]string{mod, n}] = def
	}
	imports := d.Scan.Imports
	if imports == nil { // the scan could not read them: the functions are what is known
		for _, def := range d.ImportedFunctions {
			mod, n, _ := def.Import()
			if mod == wasmbin.SandboxModule {
				continue // the host's rewrite imports it, not the module
			}
			imports = append(imports, wasmbin.Import{Module: mod, Name: n})
		}
	}
	caps := map[string]bool{}
	for _, imp := range imports {
		out := Import{Module: imp.Module, Name: imp.Name, Kind: imp.KindName()}
		if def, ok := funcs[[2]string{imp.Module, imp.Name}]; ok && imp.Kind == 0 {
			out.Signature = sandbox.Signature(def.ParamTypes(), def.ResultTypes())
		}
		if imp.Module == abi.ImportModule && imp.Kind == 0 {
			if c := sandbox.CapabilityOf(imp.Name); c != "" {
				out.Capability = c
				caps[c] = true
			}
		}
		r.Imports = append(r.Imports, out)
	}
	r.Capabilities = slices.Sorted(maps.Keys(caps))
	return r
}

// memLimits writes a memory's limits in 64 KiB pages.
func memLimits(mem api.MemoryDefinition) string {
	s := fmt.Sprintf("min %d pages", mem.Min())
	if max, ok := mem.Max(); ok {
		return s + fmt.Sprintf(", max %d pages", max)
	}
	return s + ", no max"
}
