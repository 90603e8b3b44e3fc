package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/metrics"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	adminv1 "github.com/wasmhost/wasmhost/admin/v1"
	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
)

// BenchmarkEndlessHandlers measures what handlers that never return cost the rest of the
// daemon (issue 18): 16 handlers of 16 plugin types whose calls loop (every code shape of
// endlessFixtures, several times each), each with a plugin whose registration is in progress
// throughout, beside an in-process daemon that registers plugins of a good type. Each round
// registers one good plugin (socket created → Notify(true)), asks the admin API for its status
// and /healthz once, and removes the plugin. Reported: p50/p99 of those three, the p99 and
// max of the garbage collector's stop-the-world pauses over the run (runtime/metrics
// /sched/pauses/total/gc:seconds), and how long Run takes to return once its context is
// canceled (what SIGTERM does). loopers=0 is the same daemon without them.
func BenchmarkEndlessHandlers(b *testing.B) {
	for _, loopers := range []int{0, 16} {
		b.Run(fmt.Sprintf("loopers=%d", loopers), func(b *testing.B) { benchEndless(b, loopers) })
	}
}

func benchEndless(b *testing.B, loopers int) {
	dirs := newE2EDirs(b, "/tmp")
	copyFixture(b, "ok", dirs.Handler)
	var types []string
	for i := range loopers {
		shape := endlessFixtures[i%len(endlessFixtures)]
		bin, err := os.ReadFile(filepath.Join("..", "..", "internal", "host", "testdata", shape+".wasm"))
		if err != nil {
			b.Fatal(err)
		}
		// Another plugin type of the same length: its last letter replaced by a digit.
		typ := shape + ".exampl" + string(rune('a'+i))
		bin = bytes.Replace(bin, []byte(shape+".example"), []byte(typ), 1)
		name := fmt.Sprintf("%s-%d.wasm", shape, i)
		if err := os.WriteFile(filepath.Join(dirs.Handler, name), bin, 0o644); err != nil {
			b.Fatal(err)
		}
		types = append(types, typ)
	}
	cfg := e2eConfig(dirs)
	cfg.Handlers.CallTimeout = config.Duration(time.Hour)
	cfg.Handlers.Limits.CallCPU = config.Duration(time.Hour)
	metricsSock := filepath.Join(dirs.Base, "m.sock")
	cfg.Metrics.Listen = "unix:" + metricsSock
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	rd := startDaemon(b, cfg, slog.New(slog.NewJSONHandler(io.Discard, nil)), nil)
	for i, typ := range types {
		registrationtest.Serve(b, filepath.Join(dirs.Socket, fmt.Sprintf("loop-%d.sock", i)), pluginInfo(typ, "loop"), registrationtest.Options{})
	}
	conn, err := grpc.NewClient("unix://"+rd.d.AdminSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	admin := adminv1.NewAdminClient(conn)
	healthz := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", metricsSock)
	}}}
	waitFor(b, "the looping handlers to run", func() bool {
		resp, err := admin.ListHandlers(context.Background(), &adminv1.ListHandlersRequest{})
		if err != nil {
			return false
		}
		running := 0
		for _, h := range resp.GetHandlers() {
			if h.GetCpu().AsDuration() > 0 && filepath.Base(h.GetFile()) != "ok.wasm" {
				running++
			}
		}
		return running == loopers
	})

	pauses := gcPauses()
	var reg, status, health []time.Duration
	b.ResetTimer()
	i := 0
	for b.Loop() {
		i++
		sock := filepath.Join(dirs.Socket, fmt.Sprintf("good-%d.sock", i))
		t0 := time.Now()
		p := registrationtest.Serve(b, sock, pluginInfo("ok.example", fmt.Sprintf("good-%d", i)), registrationtest.Options{})
		wantNotification(b, p, true, "")
		reg = append(reg, time.Since(t0))
		t0 = time.Now()
		if _, err := admin.GetStatus(context.Background(), &adminv1.GetStatusRequest{}); err != nil {
			b.Fatal(err)
		}
		status = append(status, time.Since(t0))
		t0 = time.Now()
		resp, err := healthz.Get("http://wasmhost/healthz")
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		health = append(health, time.Since(t0))
		p.Close()
	}
	b.StopTimer()
	gc := gcPauses().sub(pauses)
	t0 := time.Now()
	if err := rd.stop(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(ms(time.Since(t0)), "shutdown-ms")
	for _, m := range []struct {
		name string
		d    []time.Duration
	}{{"register", reg}, {"status", status}, {"healthz", health}} {
		b.ReportMetric(ms(percentile(m.d, 0.5)), "p50-"+m.name+"-ms")
		b.ReportMetric(ms(percentile(m.d, 0.99)), "p99-"+m.name+"-ms")
	}
	b.ReportMetric(gc.quantile(0.99)*1e3, "p99-gc-pause-ms")
	b.ReportMetric(gc.quantile(1)*1e3, "max-gc-pause-ms")
	b.ReportMetric(float64(gc.count()), "gc-pauses")
}

// gcHist is the runtime's histogram of garbage-collection stop-the-world pauses.
type gcHist struct {
	counts  []uint64
	buckets []float64
}

func gcPauses() gcHist {
	s := []metrics.Sample{{Name: "/sched/pauses/total/gc:seconds"}}
	metrics.Read(s)
	h := s[0].Value.Float64Histogram()
	return gcHist{counts: append([]uint64(nil), h.Counts...), buckets: h.Buckets}
}

// sub returns the pauses of h not in earlier.
func (h gcHist) sub(earlier gcHist) gcHist {
	out := gcHist{counts: make([]uint64, len(h.counts)), buckets: h.buckets}
	for i := range h.counts {
		out.counts[i] = h.counts[i] - earlier.counts[i]
	}
	return out
}

func (h gcHist) count() uint64 {
	var n uint64
	for _, c := range h.counts {
		n += c
	}
	return n
}

// quantile returns the upper bound of the bucket holding quantile q of the pauses, in seconds.
func (h gcHist) quantile(q float64) float64 {
	n := h.count()
	if n == 0 {
		return 0
	}
	want := uint64(q*float64(n) + 0.999999)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= want {
			return h.buckets[i+1]
		}
	}
	return h.buckets[len(h.buckets)-1]
}
