package host

import (
	"context"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/abi/guest/guesttest"
	"github.com/wasmhost/wasmhost/internal/host/sandbox"
	"github.com/wasmhost/wasmhost/internal/host/sandbox/sandboxtest"
	"github.com/wasmhost/wasmhost/internal/registration"
)

// BenchmarkValidate is the host's: a handler call through the policy layer (policy.Serving.Serve) and
// the sandbox, as the daemon makes it. The sandbox's benchmarks are in package sandbox; what
// both use (the SDKs' example handlers, the percentiles) is in sandboxtest.

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
	sandboxtest.Percentiles(b, ds, "ns")
}

// BenchmarkValidate measures one ValidatePlugin call through the host: a minimal WAT
// handler, a raw Go guest, and the example handler written with each SDK.
func BenchmarkValidate(b *testing.B) {
	b.Run("wat", func(b *testing.B) {
		p := sandboxtest.BenchPlugin()
		p.Type = "min.example"
		benchValidate(b, fixture("min"), p)
	})
	// A validate that writes the key-value store (kv_set), capture off: what recording costs a
	// call that is not recorded (nothing: the exchange is built only for a recorded call).
	b.Run("wat-kv", func(b *testing.B) {
		p := sandboxtest.BenchPlugin()
		p.Type = "kv.example"
		benchValidate(b, fixture("kv"), p)
	})
	b.Run("go-raw", func(b *testing.B) {
		path := guesttest.Build(b, "./testdata/goguest")
		p := sandboxtest.BenchPlugin()
		p.Type = "go.example"
		benchValidate(b, path, p)
	})
	for _, lang := range sandboxtest.SDKs {
		b.Run(lang, func(b *testing.B) {
			path := sandboxtest.ExampleHandler[lang](b)
			p := sandboxtest.BenchPlugin()
			p.Type, p.Versions = "example.wasmhost.dev", []string{"v1"}
			benchValidate(b, path, p)
		})
	}
	// Guest code running flat out: 65,536 function calls and a loop of 100,000 iterations
	// (testdata/work.wat), what the ticks cost at their densest.
	b.Run("work", func(b *testing.B) {
		p := sandboxtest.BenchPlugin()
		p.Type = "work.example"
		benchValidate(b, fixture("work"), p)
	})
}

func mustLoadPath(t testing.TB, h *Host, path string) *sandbox.Module {
	t.Helper()
	m, err := h.LoadFile(context.Background(), path)
	if err != nil {
		t.Fatalf("LoadFile(%s): %v", path, err)
	}
	return m
}
