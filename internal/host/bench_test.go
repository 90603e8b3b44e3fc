package host

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/abi/guest/guesttest"
	"github.com/wasmhost/wasmhost/internal/guestbuild"
	"github.com/wasmhost/wasmhost/internal/registration"
)

// BenchmarkValidate is the host's: a handler call through the policy layer (served.Serve) and
// the sandbox, as the daemon makes it. The sandbox's benchmarks are in package sandbox; the
// helpers below are theirs too (a test package cannot import another's).

func benchValidate(b *testing.B, path string, p registration.PluginInfo) {
	h, _ := newTestHost(b, Config{PoolSize: 1})
	m := mustLoadPath(b, h, path)
	ctx := context.Background()
	for range 100 {
		if err := m.ValidatePlugin(ctx, p); err != nil {
			b.Fatal(err)
		}
	}
	ds := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		err := m.ValidatePlugin(ctx, p)
		ds = append(ds, time.Since(t0))
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	percentiles(b, ds, "ns")
}

// BenchmarkValidate measures one ValidatePlugin call through the host: a minimal WAT
// handler, a raw Go guest, and the example handler written with each SDK.
func BenchmarkValidate(b *testing.B) {
	b.Run("wat", func(b *testing.B) {
		p := benchPlugin
		p.Type = "min.example"
		benchValidate(b, fixture("min"), p)
	})
	b.Run("go-raw", func(b *testing.B) {
		path := guesttest.Build(b, "./testdata/goguest")
		p := benchPlugin
		p.Type = "go.example"
		benchValidate(b, path, p)
	})
	for _, lang := range sdks {
		b.Run(lang, func(b *testing.B) {
			path := exampleHandler[lang](b)
			p := benchPlugin
			p.Type, p.Versions = "example.wasmhost.dev", []string{"v1"}
			benchValidate(b, path, p)
		})
	}
	// Guest code running flat out: 65,536 function calls and a loop of 100,000 iterations
	// (testdata/work.wat), what the ticks cost at their densest.
	b.Run("work", func(b *testing.B) {
		p := benchPlugin
		p.Type = "work.example"
		benchValidate(b, fixture("work"), p)
	})
}

// percentiles reports the p50 and p99 of ds as metrics.
func percentiles(b *testing.B, ds []time.Duration, unit string) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Nanoseconds()), "p50-"+unit)
	b.ReportMetric(float64(ds[len(ds)*99/100].Nanoseconds()), "p99-"+unit)
	b.ReportMetric(float64(ds[len(ds)-1].Nanoseconds()), "max-"+unit)
}

var benchPlugin = registration.PluginInfo{
	Socket: "/var/lib/kubelet/plugins_registry/csi.example.com-reg.sock", Name: "csi.example.com",
	Endpoint: "/var/lib/kubelet/plugins/csi.example.com/csi.sock", Versions: []string{"1.0.0"},
}

// sdks names the SDKs the example handler is written with, in the order of the table in
// docs/benchmarks.md.
var sdks = []string{"go-sdk", "c-sdk", "rust-sdk", "as-sdk"}

// exampleHandler builds the example handler (example.wasmhost.dev) with each SDK.
var exampleHandler = map[string]func(b *testing.B) string{
	"go-sdk":   func(b *testing.B) string { return guesttest.Build(b, "../../examples/handler-go") },
	"c-sdk":    func(b *testing.B) string { return guestbuild.Shipped(b, "example") },
	"rust-sdk": func(b *testing.B) string { return guestbuild.Rust(b, "examples/handler-rust/example.rs") },
	"as-sdk":   func(b *testing.B) string { return guestbuild.AS(b, "examples/handler-as/example.ts") },
}

func mustLoadPath(t testing.TB, h *Host, path string) *Module {
	t.Helper()
	m, err := h.LoadFile(context.Background(), path)
	if err != nil {
		t.Fatalf("LoadFile(%s): %v", path, err)
	}
	return m
}
