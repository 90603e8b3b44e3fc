package wasmbin

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/tetratelabs/wazero"

	"github.com/wasmhost/wasmhost/internal/limits"
)

// addFixtures seeds a fuzz target with the host's test modules.
func addFixtures(f *testing.F) {
	paths, _ := filepath.Glob(filepath.Join("..", "testdata", "*.wasm"))
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
}

// FuzzScan: Scan never panics, and fails exactly on a bad header.
func FuzzScan(f *testing.F) {
	addFixtures(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		_, err := Scan(b)
		if (err != nil) != !bytes.HasPrefix(b, Header) {
			t.Fatalf("Scan error %v for a header %x", err, b[:min(len(b), 8)])
		}
	})
}

// FuzzInstrument: Check and Instrument never panic, and a module that compiles compiles as
// well once rewritten (or is refused for using a name the rewrite adds).
func FuzzInstrument(f *testing.F) {
	addFixtures(f)
	ctx := context.Background()
	d := limits.Defaults() // the host's
	lim := Limits{Functions: d.MaxFunctions, FunctionBytes: int(d.MaxFunctionSize), Nesting: d.MaxNesting,
		NestingWork: MaxNestingWork, Locals: d.MaxLocals, TableElements: d.MaxTableElements, Entries: d.MaxEntries}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !bytes.HasPrefix(b, Header) {
			return
		}
		out, err := Instrument(b, 1<<20)
		// What the host would not compile (wazero's decoder allocates by the counts it reads).
		if _, bad := Check(b, lim); bad != "" {
			return
		}
		rt := wazero.NewRuntime(ctx)
		defer rt.Close(ctx)
		cm, cerr := rt.CompileModule(ctx, b)
		if cerr != nil {
			return
		}
		defer cm.Close(ctx)
		if err != nil {
			if errors.Is(err, ErrReservedExport) || errors.Is(err, ErrReservedImport) {
				return
			}
			t.Fatalf("a module that compiles was not rewritten: %v", err)
		}
		gm, err := rt.CompileModule(ctx, out)
		if err != nil {
			t.Fatalf("the rewritten module does not compile: %v", err)
		}
		gm.Close(ctx)
	})
}
