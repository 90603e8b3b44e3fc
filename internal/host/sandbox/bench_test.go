package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/host/sandbox/sandboxtest"
)

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
		err := m.ValidatePlugin(ctx, sandboxtest.Info("loop.example", "p"))
		ds = append(ds, time.Since(t0)-timeout)
		if !errors.Is(err, context.DeadlineExceeded) {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	sandboxtest.Percentiles(b, ds, "overshoot-ns")
}

// BenchmarkLoad measures LoadFile in a new Host: compiled from scratch (cold) and from a warm
// on-disk compilation cache (a restarted daemon).
func BenchmarkLoad(b *testing.B) {
	benchNewHost(b, [2]string{"cold", "warm-cache"}, func(ctx context.Context, h *Sandbox, path string, _ []byte) error {
		_, err := loadFile(h, ctx, path)
		return err
	})
}

// BenchmarkDescribe measures Describe (what `handler inspect` and a pulled module's admission
// run, through package inspect, whose report of it costs next to nothing) in a new Host: with
// no cache entry of the module (it compiles), and with the cache directory a load of the same
// bytes left (a pulled module admitted again when the daemon restarts).
func BenchmarkDescribe(b *testing.B) {
	benchNewHost(b, [2]string{"no-cache-entry", "cache-entry"}, func(ctx context.Context, h *Sandbox, path string, bin []byte) error {
		_, err := h.Describe(ctx, path, bin)
		return err
	})
}

// benchNewHost measures op on the WAT fixture and each SDK's example handler, each time in a
// new Host: without a cache on disk (modes[0]), or with the cache directory a load of the
// module left (modes[1]).
func benchNewHost(b *testing.B, modes [2]string, op func(ctx context.Context, h *Sandbox, path string, bin []byte) error) {
	modules := map[string]func(b *testing.B) string{"wat": func(*testing.B) string { return fixture("ok") }}
	for _, lang := range sandboxtest.SDKs {
		modules[lang] = sandboxtest.ExampleHandler[lang]
	}
	for _, name := range append([]string{"wat"}, sandboxtest.SDKs...) {
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
						cache = filepath.Join(sandboxtest.TempDir(b), "cache")
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

// BenchmarkInstanceMemory measures the Go heap that one new instance holds (wazero's
// bookkeeping: its linear memory is a mapping of its own, memory.go), and the linear memory
// of one that served 6,000 calls, for a WAT handler and the example handler of each SDK.
func BenchmarkInstanceMemory(b *testing.B) {
	const n = 8
	for _, tc := range []struct {
		name string
		path func(b *testing.B) string
		typ  string
	}{
		{"wat", func(*testing.B) string { return fixture("ok") }, "ok.example"},
		{"go-sdk", sandboxtest.ExampleHandler["go-sdk"], "example.wasmhost.dev"},
		{"c-sdk", sandboxtest.ExampleHandler["c-sdk"], "example.wasmhost.dev"},
		{"rust-sdk", sandboxtest.ExampleHandler["rust-sdk"], "example.wasmhost.dev"},
		{"as-sdk", sandboxtest.ExampleHandler["as-sdk"], "example.wasmhost.dev"},
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
			p := sandboxtest.BenchPlugin()
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
