package sandbox

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

	"github.com/wasmhost/wasmhost/internal/host/sandbox/sandboxtest"
)

// BenchmarkDeadlineLateness measures how late a looping handler call is stopped: the time from
// its deadline to the call's return, p50/p99/max over every looping call.
//
//   - idle: one looping call at a time, nothing else running.
//   - spare: the same while NumCPU-1 goroutines call a well-behaved handler (ok.wasm) in a
//     tight loop: the daemon under load, with a core left for the looping call.
//   - busy: the same with NumCPU such goroutines: every core taken, one more busy thread than
//     cores.
//   - loopers: 2×NumCPU looping calls at once, twice as many guest loops as cores.
//
// BenchmarkDeadlineFloor runs spare, busy and loopers with plain Go loops in place of the
// guests: the floor the machine's scheduler sets, which no deadline mechanism in the process
// goes below.
//
// Both run with the GOMAXPROCS the host sets (NumCPU+1, see procs.go; the testing package sets
// its own for each benchmark, so it is set again here), or with the environment's GOMAXPROCS
// when there is one: GOMAXPROCS=2 on two cores measures without the headroom.
// docs/benchmarks.md records the figures.
func BenchmarkDeadlineLateness(b *testing.B) {
	const timeout = 20 * time.Millisecond
	for _, lc := range latenessCases(true) {
		b.Run(lc.name, func(b *testing.B) {
			// Logged as the daemon logs (info, JSON), to a writer that keeps nothing: the tests'
			// log capture keeps every record, and the heap it grew (650 MB over a run) made each
			// garbage collection's mark phase last 50-260 ms, which this measured before.
			logger := slog.New(slog.NewJSONHandler(io.Discard, nil))
			h, _ := newTestSandbox(b, Config{CallTimeout: timeout, PoolSize: max(lc.loopers, lc.busy), Logger: logger})
			m := mustLoad(b, h, "loop")
			ok := mustLoad(b, h, "ok")
			p := sandboxtest.Info("loop.example", "p")
			var others, failed atomic.Int64
			lc.run(b,
				func() {
					if err := ok.ValidatePlugin(context.Background(), sandboxtest.Info("ok.example", "q")); err != nil {
						failed.Add(1) // timed out: reported, not fatal
					}
					others.Add(1)
				},
				func() time.Duration {
					t0 := time.Now()
					err := m.ValidatePlugin(context.Background(), p)
					d := time.Since(t0) - timeout
					if !errors.Is(err, context.DeadlineExceeded) {
						b.Errorf("a looping call ended with %v", err)
					}
					return d
				})
			if lc.busy > 0 {
				b.ReportMetric(float64(others.Load())/float64(b.N), "other-calls/op")
				b.ReportMetric(float64(failed.Load()), "other-failed")
			}
		})
	}
}

// BenchmarkDeadlineFloor is BenchmarkDeadlineLateness's spare, busy and loopers cases without
// WebAssembly: each looping call is a goroutine locked to its thread that spins, reading the
// clock, until its deadline has passed, and each busy goroutine allocates and computes in a
// loop as a quick handler call does. What it measures, from the deadline to the moment the
// spinning goroutine sees it passed, is how long the OS keeps a runnable thread off the CPU
// when there are more busy threads than cores: the floor under BenchmarkDeadlineLateness,
// whose guests check their deadline the same way, at their yields.
func BenchmarkDeadlineFloor(b *testing.B) {
	const timeout = 20 * time.Millisecond
	for _, lc := range latenessCases(false) {
		b.Run(lc.name, func(b *testing.B) {
			lc.run(b,
				func() {
					buf := make([]byte, 512)
					for i := range buf {
						buf[i] = byte(i)
					}
				},
				func() time.Duration {
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					at := time.Now().Add(timeout)
					for time.Now().Before(at) {
					}
					return time.Since(at)
				})
		})
	}
}

// latenessCase is one load shape of the lateness benchmarks: loopers looping calls at once,
// beside busy goroutines working without pause.
type latenessCase struct {
	name          string
	loopers, busy int
}

func latenessCases(idle bool) []latenessCase {
	cs := []latenessCase{
		{"spare", 1, runtime.NumCPU() - 1},
		{"busy", 1, runtime.NumCPU()},
		{"loopers", 2 * runtime.NumCPU(), 0},
	}
	if idle {
		cs = append([]latenessCase{{"idle", 1, 0}}, cs...)
	}
	return cs
}

// run runs the case: lc.busy goroutines call work until the end, and for each b.Loop round
// one of lc.loopers goroutines calls loop, which says how late it ended. It reports the
// lateness's p50, p99 and max, and GOMAXPROCS.
func (lc latenessCase) run(b *testing.B, work func(), loop func() time.Duration) {
	if os.Getenv("GOMAXPROCS") == "" {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(wantProcs()))
	}
	var (
		mu          sync.Mutex
		late        []time.Duration
		busy, loops sync.WaitGroup
		next        = make(chan struct{})
		stop        atomic.Bool
	)
	for range lc.busy {
		busy.Go(func() {
			for !stop.Load() {
				work()
			}
		})
	}
	b.ResetTimer()
	for range lc.loopers {
		loops.Go(func() {
			for range next {
				d := loop()
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
	busy.Wait()
	sandboxtest.Percentiles(b, late, "late-ns")
	b.ReportMetric(float64(runtime.GOMAXPROCS(0)), "procs")
}
