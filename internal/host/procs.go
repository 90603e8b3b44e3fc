package host

import (
	"log/slog"
	"os"
	"runtime"
	"sync"
)

// A goroutine running guest code cannot be preempted by Go's scheduler: it keeps its P until
// the guest returns or its deadline stops it. The deadline is a timer, and a timer lives on the
// P of the goroutine that set it, which is the one running the guest; Go runs another P's
// timers only from a P that is idle. So when every P is busy (guest loops, or the daemon's own
// work beside one), a looping call's deadline fires late: measured with GOMAXPROCS 2 on 2 cores,
// one looping call beside busy handler calls was stopped 18 ms (p50) and 809 ms (p99) after its
// deadline, and with 4 looping calls 21 ms / 75 ms; with GOMAXPROCS 6, 2.5 ms / 39 ms and
// 3.2 ms / 19 ms (docs/benchmarks.md). The OS, which can preempt guest code, shares the cores
// between the extra threads. So the host runs with NumCPU+4 Ps unless GOMAXPROCS is set.

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
