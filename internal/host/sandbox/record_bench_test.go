package sandbox

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/capture"
	"github.com/wasmhost/wasmhost/internal/registration"
)

// BenchmarkCaptureHostile is issue 27's hostile handlers with session capture on (the
// daemon's ring, 16 sessions per type): kvloop reads a 60,000-byte value in a loop until its
// deadline (5 s by default: its time is mostly the host's, which the CPU budget does not count); kvread reads it 5,000 times and
// accepts, for four plugins. It reports the Go heap in use at its peak during the calls and
// after a GC (what the capture holds), and the process's peak RSS.
func BenchmarkCaptureHostile(b *testing.B) {
	for _, tc := range []struct {
		name    string
		plugins int
	}{{"kvloop", 1}, {"kvread", 4}} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				ring := capture.New(capture.Config{Sessions: 16})
				sb, _ := newTestSandbox(b, Config{Recorder: ring, CallTimeout: DefaultCallTimeout})
				m := mustLoad(b, sb, tc.name)
				peak, stop := sampleHeap()
				for i := range tc.plugins {
					p := registration.PluginInfo{Type: tc.name + ".example", Name: "p" + strconv.Itoa(i), Socket: "/s/p" + strconv.Itoa(i)}
					if err := m.ValidatePlugin(context.Background(), p); err == nil {
						_, _ = m.RegisterPlugin(context.Background(), p)
					}
				}
				stop()
				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				b.ReportMetric(float64(peak.Load())/1e6, "peak-heap-MB")
				b.ReportMetric(float64(ms.HeapInuse)/1e6, "held-heap-MB")
				b.ReportMetric(vmHWM()/1e6, "peak-rss-MB")
				runtime.KeepAlive(ring)
			}
		})
	}
}

// sampleHeap samples the Go heap in use every 2 ms until stop is called, keeping the peak.
func sampleHeap() (peak *atomic.Uint64, stop func()) {
	peak = new(atomic.Uint64)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	})
	return peak, func() { close(done); wg.Wait() }
}

// vmHWM is the process's peak resident set, in bytes (0 where /proc is not).
func vmHWM() float64 {
	b, _ := os.ReadFile("/proc/self/status")
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb * 1024
		}
	}
	return 0
}
