package host

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/host/sandbox"
	"github.com/wasmhost/wasmhost/internal/host/sandbox/sandboxtest"
	"github.com/wasmhost/wasmhost/internal/limits"
)

// BenchmarkShadowCost is what a failing shadow costs the serving revision (issue 27): the
// latency of the serving handler's ValidatePlugin (testdata/hogpeer.wat, which accepts at
// once), alone, and with a shadow candidate whose Validate grows its memory one page at a time
// to the 64 MiB limit, fills every page and traps (testdata/hogtrap.wat). The quarantine is off,
// so that the candidate runs on every registration that finds one of its pool's runs free and
// fails over and over in the background, the worst a failing shadow can do (with the default
// quarantine it would run 3 times in 10 s); shadow-runs/op says how many of the calls it
// shadowed. The calls come one
// every pace, as registrations do, not back to back: the latency of a call that meets the
// candidate's work, not the throughput of calls between its runs.
func BenchmarkShadowCost(b *testing.B) {
	const pace = time.Millisecond
	for _, tc := range []struct {
		name   string
		shadow bool
	}{{"alone", false}, {"failing-64MiB-shadow", true}} {
		b.Run(tc.name, func(b *testing.B) {
			dir := sandboxtest.TempDir(b)
			sandboxtest.CopyFile(b, fixture("hogpeer"), filepath.Join(dir, "hogpeer.wasm"), 0o600)
			h, _ := newStrictHost(b, Config{HandlerDir: dir, MemoryLimit: 64 << 20, CallTimeout: sandbox.DefaultCallTimeout,
				Quarantine: &limits.Quarantine{}})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- h.Run(ctx) }()
			defer func() { cancel(); <-done }()
			<-h.Ready()
			if tc.shadow {
				cand := filepath.Join(sandboxtest.TempDir(b), "hogtrap.wasm")
				sandboxtest.CopyFile(b, fixture("hogtrap"), cand, 0o600)
				if _, err := h.SetShadow(ctx, "hog.example", cand); err != nil {
					b.Fatal(err)
				}
			}
			hd, ok := h.Registry().Get("hog.example")
			if !ok {
				b.Fatal("hog.example is not served")
			}
			p := sandboxtest.Info("hog.example", "p")
			for range 100 {
				if err := hd.ValidatePlugin(ctx, p); err != nil {
					b.Fatal(err)
				}
			}
			ds := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for b.Loop() {
				t0 := time.Now()
				err := hd.ValidatePlugin(ctx, p)
				ds = append(ds, time.Since(t0))
				if err != nil {
					b.Fatal(err)
				}
				time.Sleep(time.Until(t0.Add(pace)))
			}
			b.StopTimer()
			sandboxtest.Percentiles(b, ds, "ns")
			if tc.shadow {
				b.ReportMetric(float64(h.Shadows()[0].Runs)/float64(b.N+100), "shadow-runs/op")
			}
		})
	}
}
