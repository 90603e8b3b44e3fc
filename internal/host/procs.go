package host

import (
	"log/slog"
	"os"
	"runtime"
	"sync"
)

// Guest code keeps its P between two yields (wasmbin.Instrument: 50-200 µs of guest code, or the
// 4-6 ms of one bulk instruction over a whole memory), and at most Limits.GuestThreads calls run
// guest code at once. Before the yields a looping guest held its P until its deadline, and with
// GOMAXPROCS 2 on 2 cores one looping call beside busy handler calls was stopped 18 ms (p50) and
// 809 ms (p99) late; with GOMAXPROCS 6, 2.5 ms / 39 ms (docs/benchmarks.md). The host still runs
// with NumCPU+4 Ps unless GOMAXPROCS is set, so that the daemon's own goroutines find a P at
// once whatever the guests hold; the OS shares the cores between the threads.

var procsOnce sync.Once

// ensureProcs raises GOMAXPROCS to NumCPU+4, once, unless the environment sets it.
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
func wantProcs() int { return runtime.NumCPU() + 4 }
