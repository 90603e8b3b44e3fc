package watcher

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// bindSocket creates a unix socket file at p the way a plugin does (socket, bind) and closes
// the descriptor, leaving the file: cheaper than a listener and holding no descriptor.
func bindSocket(tb testing.TB, p string) {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: p}); err != nil {
		tb.Fatalf("bind %s: %v", p, err)
	}
}

// BenchmarkBurst creates N sockets at once in the socket directory and measures until all of
// them are desired. lag-ms is the time from the last socket created to the last one desired.
func BenchmarkBurst(b *testing.B) {
	for _, n := range []int{1000, 4000} {
		b.Run("N="+strconv.Itoa(n), func(b *testing.B) {
			h := newHarness(b, nil)
			paths := make([]string, n)
			for i := range paths {
				paths[i] = filepath.Join(h.dir, "plugin-"+strconv.Itoa(i)+"-reg.sock")
			}
			var lag time.Duration
			b.ResetTimer()
			for range b.N {
				for _, p := range paths {
					bindSocket(b, p)
				}
				created := time.Now()
				h.waitUntil("all sockets", func() bool { return h.desired.Len() == n })
				lag += time.Since(created)
				b.StopTimer()
				for _, p := range paths {
					if err := os.Remove(p); err != nil {
						b.Fatal(err)
					}
				}
				h.waitUntil("no sockets", func() bool { return h.desired.Len() == 0 })
				b.StartTimer()
			}
			b.ReportMetric(float64(lag.Microseconds())/1000/float64(b.N), "lag-ms")
			if st := h.w.Stats(); st.Errors != 0 {
				b.Logf("stats: %+v", st)
			}
		})
	}
}

// BenchmarkRelist measures a full re-list of 4,000 sockets in 40 directories, all desired
// already: the cost of the periodic resync and of the re-list after an overflow.
func BenchmarkRelist(b *testing.B) {
	h := newHarness(b, nil)
	for d := range 40 {
		dir := filepath.Join(h.dir, "d"+strconv.Itoa(d))
		if err := os.Mkdir(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for i := range 100 {
			bindSocket(b, filepath.Join(dir, "s"+strconv.Itoa(i)))
		}
	}
	h.waitUntil("all sockets", func() bool { return h.desired.Len() == 4000 })
	h.stop() // call relist directly, from this goroutine only
	w := h.w
	f, err := newFollower(w.dir, Pacing{}, w.newFSW, &w.watches)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	w.f, w.dirs = f, make(map[string]dirState)
	if err := w.relist("benchmark", false); err != nil { // watches everything again
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if err := w.relist("benchmark", false); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if n := h.desired.Len(); n != 4000 {
		b.Fatalf("%d sockets desired after re-lists, want 4000", n)
	}
}
