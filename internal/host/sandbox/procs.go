package sandbox

import (
	"log/slog"
	"os"
	"runtime"
	"sync"
)

// Guest code keeps its P only between two yields (wasmbin.Instrument: 50-200 µs of guest code,
// or the 4-6 ms of one bulk instruction over a whole memory), and at most Limits.GuestThreads
// calls run guest code at once. Before the yields a looping guest held its P until its
// deadline, so the host ran with NumCPU+4 Ps. With the yields, the extra Ps mostly gave the
// garbage collector's mark workers (a quarter of the Ps) more threads to take the cores from
// the calls with: measured on 2 cores (docs/benchmarks-history.md, "Interruptible guest calls"), with
// NumCPU+4 Ps a looping call beside one busy goroutine was stopped 7.5-8.2 ms late at p99 and
// a plugin of another type beside 16 looping handlers registered in 20 ms at p99; with
// NumCPU+1, 0.9-2.9 ms and 3.7-5.0 ms. NumCPU+1 keeps one P for the daemon when every core
// runs guest code or its own work. The environment's GOMAXPROCS, when set, is kept.

var procsOnce sync.Once

// ensureProcs raises GOMAXPROCS to NumCPU+1, once, unless the environment sets it.
func ensureProcs(log *slog.Logger) {
	procsOnce.Do(func() {
		if os.Getenv("GOMAXPROCS") != "" {
			return
		}
		want := wantProcs()
		if have := runtime.GOMAXPROCS(0); have < want {
			runtime.GOMAXPROCS(want)
			log.Debug("GOMAXPROCS raised so that guest code cannot hold every P", "from", have, "to", want)
		}
	})
}

// wantProcs is the GOMAXPROCS the host runs with.
func wantProcs() int { return runtime.NumCPU() + 1 }
