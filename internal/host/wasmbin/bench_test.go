package wasmbin_test

import (
	"os"
	"testing"

	"github.com/wasmhost/wasmhost/internal/host/sandbox/sandboxtest"
	"github.com/wasmhost/wasmhost/internal/host/wasmbin"
	"github.com/wasmhost/wasmhost/internal/limits"
)

// BenchmarkPasses measures each pass the host makes over a dropped module's bytes before it
// compiles them (Scan, Check, Instrument with the default call-stack bound), on the Go and C
// SDKs' example handlers: what this package adds to a load, beside wazero's compile.
func BenchmarkPasses(b *testing.B) {
	lim := limits.Defaults()
	check := wasmbin.Limits{Functions: lim.MaxFunctions, FunctionBytes: int(lim.MaxFunctionSize), Nesting: lim.MaxNesting,
		NestingWork: wasmbin.MaxNestingWork, Locals: lim.MaxLocals, TableElements: lim.MaxTableElements, Entries: lim.MaxEntries}
	for _, lang := range []string{"go-sdk", "c-sdk"} {
		b.Run(lang, func(b *testing.B) {
			bin, err := os.ReadFile(sandboxtest.ExampleHandler[lang](b))
			if err != nil {
				b.Fatal(err)
			}
			b.Run("scan", func(b *testing.B) {
				b.SetBytes(int64(len(bin)))
				for b.Loop() {
					if _, err := wasmbin.Scan(bin); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("check", func(b *testing.B) {
				b.SetBytes(int64(len(bin)))
				for b.Loop() {
					if _, msg := wasmbin.Check(bin, check); msg != "" {
						b.Fatal(msg)
					}
				}
			})
			b.Run("instrument", func(b *testing.B) {
				b.SetBytes(int64(len(bin)))
				for b.Loop() {
					if _, err := wasmbin.Instrument(bin, uint64(lim.MaxCallStack)); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
