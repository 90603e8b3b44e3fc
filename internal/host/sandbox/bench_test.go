package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/abi/guest/guesttest"
	"github.com/wasmhost/wasmhost/internal/guestbuild"

	"github.com/wasmhost/wasmhost/internal/registration"
)

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
	"go-sdk":   func(b *testing.B) string { return guesttest.Build(b, "../../../examples/handler-go") },
	"c-sdk":    func(b *testing.B) string { return guestbuild.Shipped(b, "example") },
	"rust-sdk": func(b *testing.B) string { return guestbuild.Rust(b, "examples/handler-rust/example.rs") },
	"as-sdk":   func(b *testing.B) string { return guestbuild.AS(b, "examples/handler-as/example.ts") },
}

// BenchmarkInterruption measures how long after its deadline a looping guest's call returns
// (overshoot), including the instance replacement that follows.
func BenchmarkInterruption(b *testing.B) {
	const timeout = 5 * time.Millisecond
	h, _ := newTestSandbox(b, Config{PoolSize: 1, CallTimeout: timeout})
	m := mustLoad(b, h, "loop")
	ctx := context.Background()
	ds := make([]time.Duration, 0, b.N)
	for b.Loop() {
		t0 := time.Now()
		err := m.ValidatePlugin(ctx, info("loop.example", "p"))
		ds = append(ds, time.Since(t0)-timeout)
		if !errors.Is(err, context.DeadlineExceeded) {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	percentiles(b, ds, "overshoot-ns")
}

// BenchmarkLoad measures LoadFile in a new Host: compiled from scratch (cold) and from a warm
// on-disk compilation cache (a restarted daemon).
func BenchmarkLoad(b *testing.B) {
	benchNewHost(b, [2]string{"cold", "warm-cache"}, func(ctx context.Context, h *Sandbox, path string, _ []byte) error {
		_, err := loadFile(h, ctx, path)
		return err
	})
}

// BenchmarkInspect measures Inspect (what `handler inspect` and a pulled module's admission
// run) in a new Host: with no cache entry of the module (it compiles), and with the cache
// directory a load of the same bytes left (a pulled module admitted again when the daemon
// restarts).
func BenchmarkInspect(b *testing.B) {
	benchNewHost(b, [2]string{"no-cache-entry", "cache-entry"}, func(ctx context.Context, h *Sandbox, path string, bin []byte) error {
		_, err := h.Inspect(ctx, path, bin)
		return err
	})
}

// benchNewHost measures op on the WAT fixture and each SDK's example handler, each time in a
// new Host: without a cache on disk (modes[0]), or with the cache directory a load of the
// module left (modes[1]).
func benchNewHost(b *testing.B, modes [2]string, op func(ctx context.Context, h *Sandbox, path string, bin []byte) error) {
	modules := map[string]func(b *testing.B) string{"wat": func(*testing.B) string { return fixture("ok") }}
	for _, lang := range sdks {
		modules[lang] = exampleHandler[lang]
	}
	for _, name := range append([]string{"wat"}, sdks...) {
		b.Run(name, func(b *testing.B) {
			path := modules[name](b) // built once for both modes
			bin, err := os.ReadFile(path)
			if err != nil {
				b.Fatal(err)
			}
			for i, mode := range modes {
				b.Run(mode, func(b *testing.B) {
					ctx := context.Background()
					cache := "" // modes[0]: no cache on disk
					if i == 1 {
						cache = filepath.Join(tempDir(b), "cache")
						h, err := New(ctx, withDefaults(Config{CacheDir: cache}))
						if err != nil {
							b.Fatal(err)
						}
						if _, err := loadFile(h, ctx, path); err != nil {
							b.Fatal(err)
						}
						h.Close(ctx)
					}
					for b.Loop() {
						h, err := New(ctx, withDefaults(Config{CacheDir: cache}))
						if err != nil {
							b.Fatal(err)
						}
						if err := op(ctx, h, path, bin); err != nil {
							b.Fatal(err)
						}
						h.Close(ctx)
					}
				})
			}
		})
	}
}

// BenchmarkInstanceMemory measures the Go heap that one new instance holds (its linear memory
// and wazero's bookkeeping), and the linear memory of one that served 6,000 calls, for a WAT
// handler and the example handler of each SDK.
func BenchmarkInstanceMemory(b *testing.B) {
	const n = 8
	for _, tc := range []struct {
		name string
		path func(b *testing.B) string
		typ  string
	}{
		{"wat", func(*testing.B) string { return fixture("ok") }, "ok.example"},
		{"go-sdk", exampleHandler["go-sdk"], "example.wasmhost.dev"},
		{"c-sdk", exampleHandler["c-sdk"], "example.wasmhost.dev"},
		{"rust-sdk", exampleHandler["rust-sdk"], "example.wasmhost.dev"},
		{"as-sdk", exampleHandler["as-sdk"], "example.wasmhost.dev"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			path := tc.path(b)
			h, _ := newTestSandbox(b, Config{PoolSize: n + 1})
			m := mustLoadPath(b, h, path)
			ctx := context.Background()
			var total float64
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				ins := make([]*instance, n)
				for i := range ins {
					in, err := m.newInstance(ctx)
					if err != nil {
						b.Fatal(err)
					}
					ins[i] = in
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				total += float64(int64(after.HeapInuse)-int64(before.HeapInuse)) / n
				for _, in := range ins {
					in.mod.Close(ctx)
				}
			}
			b.ReportMetric(total/float64(b.N), "heap-bytes/instance")
			// What an instance's linear memory grows to once it has served calls, as a warm
			// pooled instance holds it (a guest with a garbage collector lets garbage pile up
			// to its first collection): in a host of its own, where calls one at a time all
			// go to the one instance the load made (the instances above, closed without the
			// pool's accounting, would have the pool trim it).
			hc, _ := newTestSandbox(b, Config{PoolSize: 1})
			mc := mustLoadPath(b, hc, path)
			if !mc.Enter() {
				b.Fatal("the module is retired")
			}
			defer mc.Leave()
			first, err := mc.acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			mc.release(first)
			p := benchPlugin
			p.Type, p.Versions = tc.typ, []string{"v1"}
			for range 2000 {
				if err := mc.ValidatePlugin(ctx, p); err != nil {
					b.Fatal(err)
				}
				if _, err := mc.RegisterPlugin(ctx, p); err != nil {
					b.Fatal(err)
				}
				if err := mc.DeRegisterPlugin(ctx, p); err != nil {
					b.Fatal(err)
				}
			}
			in, err := mc.acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if in != first {
				b.Fatal("the calls went to another instance than the load's")
			}
			b.ReportMetric(float64(in.memSize()), "linear-bytes-after-calls")
			mc.release(in)
		})
	}
}
