package host

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkDeadlineLateness measures how late a looping handler call is stopped: the time from
// its deadline to the call's return, p50/p99/max over every looping call.
//
//   - idle: one looping call at a time, nothing else running.
//   - busy: the same while GOMAXPROCS goroutines call a well-behaved handler (ok.wasm) in a
//     tight loop: the daemon under load.
//   - loopers: 2×NumCPU looping calls at once, more guest loops than cores.
//
// It runs with the GOMAXPROCS the host sets (NumCPU+4, see procs.go; the testing package sets
// its own for each benchmark, so it is set again here), or with the environment's GOMAXPROCS
// when there is one: GOMAXPROCS=2 on two cores measures without the headroom.
// docs/benchmarks.md records the figures.
func BenchmarkDeadlineLateness(b *testing.B) {
	for _, bc := range []struct {
		name          string
		loopers, busy int
	}{
		{"idle", 1, 0},
		{"busy", 1, runtime.NumCPU()},
		{"loopers", 2 * runtime.NumCPU(), 0},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if os.Getenv("GOMAXPROCS") == "" {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(wantProcs()))
			}
			const timeout = 20 * time.Millisecond
			// Logged as the daemon logs (info, JSON), to a writer that keeps nothing: the tests'
			// log capture keeps every record, and the heap it grew (650 MB over a run) made each
			// garbage collection's mark phase last 50-260 ms, which this measured before.
			logger := slog.New(slog.NewJSONHandler(io.Discard, nil))
			h, _ := newTestHost(b, Config{CallTimeout: timeout, PoolSize: max(bc.loopers, bc.busy), Quarantine: Quarantine{After: -1}, Logger: logger})
			m := mustLoad(b, h, "loop")
			ok := mustLoad(b, h, "ok")
			p := info("loop.example", "p")
			var (
				mu     sync.Mutex
				late   []time.Duration
				wg     sync.WaitGroup
				next   = make(chan struct{})
				stop   atomic.Bool
				others atomic.Int64
				failed atomic.Int64
			)
			for range bc.busy {
				wg.Go(func() {
					for !stop.Load() {
						if err := ok.ValidatePlugin(context.Background(), info("ok.example", "q")); err != nil {
							failed.Add(1) // timed out: reported, not fatal
						}
						others.Add(1)
					}
				})
			}
			var loops sync.WaitGroup
			b.ResetTimer()
			for range bc.loopers {
				loops.Go(func() {
					for range next {
						t0 := time.Now()
						err := m.ValidatePlugin(context.Background(), p)
						d := time.Since(t0) - timeout
						if !errors.Is(err, context.DeadlineExceeded) {
							b.Errorf("a looping call ended with %v", err)
						}
						mu.Lock()
						late = append(late, d)
						mu.Unlock()
					}
				})
			}
			for b.Loop() {
				next <- struct{}{}
			}
			close(next)
			loops.Wait()
			b.StopTimer()
			stop.Store(true)
			wg.Wait()
			percentiles(b, late, "late-ns")
			b.ReportMetric(float64(runtime.GOMAXPROCS(0)), "procs")
			if bc.busy > 0 {
				b.ReportMetric(float64(others.Load())/float64(b.N), "other-calls/op")
				b.ReportMetric(float64(failed.Load()), "other-failed")
			}
		})
	}
}
