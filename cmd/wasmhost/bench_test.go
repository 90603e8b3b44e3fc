package main

// Benchmarks of the whole daemon, measured from the plugins' side: fake plugins
// (registrationtest) in this process create their sockets on tmpfs (/dev/shm) and time what
// they see. docs/benchmarks.md records the figures, the commands and the targets.
//
//	BenchmarkE2ERegister      socket created → the plugin receives Notify(true), one plugin at a
//	                          time: p50-ms, p99-ms (native no-op handler; /wasm: the example
//	                          WebAssembly handler)
//	BenchmarkE2EDeregister    socket removed → DeRegisterPlugin called: p50-ms, p99-ms
//	BenchmarkE2EReregister    socket removed and created again at the same path (a plugin
//	                          restarting) → the new plugin receives Notify(true): p50-ms, p99-ms
//	BenchmarkE2EBurst         N sockets created at once → all notified: wall-ms
//	BenchmarkDaemonProcess    the daemon as a separate process (built with go build), the
//	                          example handler, N plugins of its type: wall-ms for N at once,
//	                          burst-cpu-ms (the daemon's CPU time for them), idle-cpu-% over
//	                          -wasmhost.idle with N registered, loaded-rss-MB (VmRSS with the
//	                          handler loaded, before the plugins), peak-rss-MB (VmHWM) and
//	                          rss-MB (VmRSS) and go-heap-MB with N registered, shutdown-ms
//
// The daemon logs at info level as JSON into io.Discard, so that formatting the log lines is
// part of the cost, as it is in production.

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/abi/guest/guesttest"
	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/daemon"
	"github.com/wasmhost/wasmhost/internal/guestbuild"
	"github.com/wasmhost/wasmhost/internal/reconciler"
	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
)

var idleWindow = flag.Duration("wasmhost.idle", 10*time.Second, "BenchmarkDaemonProcess: how long the idle CPU of the daemon is measured")

var daemonConfig = flag.String("wasmhost.config", "", "BenchmarkDaemonProcess: a configuration file for the daemon (its directories, metrics and log flags are the benchmark's)")

var exampleLang = flag.String("wasmhost.example", "", "BenchmarkDaemonProcess, BenchmarkE2ERegister: the example handler built with this SDK, go, c, rust or as (default: the shipped one)")

var alsoHandlers = flag.String("wasmhost.also", "", "BenchmarkDaemonProcess: more handler modules to install beside the example, comma-separated (the shipped csi and dra handlers, for instance)")

// benchExampleWasm is the example handler of -wasmhost.example.
func benchExampleWasm(b *testing.B) []byte {
	read := func(path string) []byte {
		wasm, err := os.ReadFile(path)
		if err != nil {
			b.Fatal(err)
		}
		return wasm
	}
	switch *exampleLang {
	case "":
		return exampleWasm(b)
	case "go":
		return guesttest.BuildBytes(b, "../../examples/handler-go")
	case "c":
		return read(guestbuild.Shipped(b, "example"))
	case "rust":
		return read(guestbuild.Rust(b, "examples/handler-rust/example.rs"))
	case "as":
		return read(guestbuild.AS(b, "examples/handler-as/example.ts"))
	}
	b.Fatalf("-wasmhost.example=%s: want go, c, rust or as", *exampleLang)
	return nil
}

// exampleType is the plugin type of the example handler (handlers-wasm/example).
const exampleType = "example.wasmhost.dev"

// benchDirs makes the daemon's directories on tmpfs when there is one.
func benchDirs(b *testing.B) e2eDirs {
	root := "/dev/shm"
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		root = "/tmp"
	}
	return newE2EDirs(b, root)
}

// benchConfig is the default configuration on dirs, without the metrics endpoint.
func benchConfig(dirs e2eDirs) config.Config {
	cfg := config.Default()
	cfg.SocketDir, cfg.HandlerDir, cfg.StateDir = dirs.Socket, dirs.Handler, dirs.State
	cfg.Metrics.Listen = "off"
	return cfg
}

func benchLog() *slog.Logger {
	return slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// noopHandler accepts every plugin and does nothing, except tell whoever waits for the
// deregistration of a socket when it came.
type noopHandler struct {
	mu      sync.Mutex
	waiting map[string]chan time.Time
}

func (h *noopHandler) ValidatePlugin(context.Context, registration.PluginInfo) error { return nil }

func (h *noopHandler) RegisterPlugin(context.Context, registration.PluginInfo) (map[string]string, error) {
	return nil, nil
}

func (h *noopHandler) DeRegisterPlugin(_ context.Context, p registration.PluginInfo) error {
	now := time.Now()
	h.mu.Lock()
	ch := h.waiting[p.Socket]
	delete(h.waiting, p.Socket)
	h.mu.Unlock()
	if ch != nil {
		ch <- now
	}
	return nil
}

// expectDeregister returns a channel that receives the time of socket's next deregistration.
func (h *noopHandler) expectDeregister(socket string) <-chan time.Time {
	ch := make(chan time.Time, 1)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.waiting == nil {
		h.waiting = make(map[string]chan time.Time)
	}
	h.waiting[socket] = ch
	return ch
}

// startBenchDaemon runs a daemon with h as the native handler of fakeType (h may be nil) and,
// when wasm is not nil, the example handler in its handler directory; it returns once a first
// plugin of each type was registered.
func startBenchDaemon(b *testing.B, dirs e2eDirs, h registration.Handler, wasm []byte) *runningDaemon {
	b.Helper()
	return startBenchDaemonWith(b, benchConfig(dirs), dirs, h, wasm)
}

// startBenchDaemonWith is startBenchDaemon with the config cfg.
func startBenchDaemonWith(b *testing.B, cfg config.Config, dirs e2eDirs, h registration.Handler, wasm []byte) *runningDaemon {
	b.Helper()
	if wasm != nil {
		if err := os.WriteFile(filepath.Join(dirs.Handler, "example.wasm"), wasm, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	rd := startDaemon(b, cfg, benchLog(), func(d *daemon.Daemon) {
		if h != nil {
			d.SetHandler(fakeType, h)
		}
	})
	warm := func(typ string) {
		sock := filepath.Join(dirs.Socket, "warm-"+strings.Split(typ, ".")[0]+".sock")
		p, err := registrationtest.Start(sock, pluginInfo(typ, "warm"), registrationtest.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		for !p.WaitNotification(b, e2eWait).Registered {
		}
	}
	if h != nil {
		warm(fakeType)
	}
	if wasm != nil {
		warm(exampleType)
	}
	return rd
}

// percentile returns the q-quantile of d (sorted in place), by the nearest-rank method.
func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(q*float64(len(d))+0.999999) - 1
	return d[min(max(i, 0), len(d)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkE2ERegister: a plugin creates its socket; the time until it receives
// Notify(true). One plugin at a time; after each, the plugin is stopped and its socket
// removed, and the next starts once the daemon has deregistered it.
func BenchmarkE2ERegister(b *testing.B) {
	b.Run("native", func(b *testing.B) { benchRegister(b, false) })
	b.Run("wasm", func(b *testing.B) { benchRegister(b, true) })
}

func benchRegister(b *testing.B, useWasm bool) {
	dirs := benchDirs(b)
	h := &noopHandler{}
	typ := fakeType
	var wasm []byte
	if useWasm {
		wasm = benchExampleWasm(b)
		typ = exampleType
	}
	rd := startBenchDaemon(b, dirs, h, wasm)
	registerOneByOne(b, rd, dirs, typ)
}

// registerOneByOne is BenchmarkE2ERegister's measure: b.N plugins of typ, one at a time,
// each from its socket's creation to its Notify(true), the next after the previous was
// deregistered; it reports p50-ms and p99-ms.
func registerOneByOne(b *testing.B, rd *runningDaemon, dirs e2eDirs, typ string) {
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		sock := filepath.Join(dirs.Socket, "p"+strconv.Itoa(i)+".sock")
		start := time.Now()
		p, err := registrationtest.Start(sock, pluginInfo(typ, "p"+strconv.Itoa(i)), registrationtest.Options{})
		if err != nil {
			b.Fatal(err)
		}
		n := p.WaitNotification(b, e2eWait)
		lat = append(lat, time.Since(start))
		b.StopTimer()
		if !n.Registered {
			b.Fatalf("plugin %s: %+v", sock, n)
		}
		rd.waitState(sock, reconciler.StateRegistered)
		p.Close()
		rd.waitGone(sock)
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(ms(percentile(lat, 0.50)), "p50-ms")
	b.ReportMetric(ms(percentile(lat, 0.99)), "p99-ms")
	b.ReportMetric(ms(slices.Max(lat)), "max-ms")
	b.ReportMetric(ms(lat[0]), "first-ms")
}

// BenchmarkE2EDeregister: the socket of a registered plugin is removed; the time until the
// handler's DeRegisterPlugin is called.
func BenchmarkE2EDeregister(b *testing.B) {
	dirs := benchDirs(b)
	h := &noopHandler{}
	rd := startBenchDaemon(b, dirs, h, nil)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		sock := filepath.Join(dirs.Socket, "p"+strconv.Itoa(i)+".sock")
		p, err := registrationtest.Start(sock, pluginInfo(fakeType, "p"+strconv.Itoa(i)), registrationtest.Options{})
		if err != nil {
			b.Fatal(err)
		}
		if n := p.WaitNotification(b, e2eWait); !n.Registered {
			b.Fatalf("plugin %s: %+v", sock, n)
		}
		rd.waitState(sock, reconciler.StateRegistered)
		// The plugin unlinks its socket as it shuts down, and stops serving after (killing it
		// first would be noticed by the liveness watch: BenchmarkE2ELiveness measures that).
		ch := h.expectDeregister(sock)
		b.StartTimer()
		start := time.Now()
		if err := os.Remove(sock); err != nil {
			b.Fatal(err)
		}
		var at time.Time
		select {
		case at = <-ch:
		case <-time.After(e2eWait):
			b.Fatalf("no DeRegisterPlugin for %s within %v", sock, e2eWait)
		}
		lat = append(lat, at.Sub(start))
		b.StopTimer()
		p.Close()
		rd.waitGone(sock)
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(ms(percentile(lat, 0.50)), "p50-ms")
	b.ReportMetric(ms(percentile(lat, 0.99)), "p99-ms")
}

// BenchmarkE2EReregister: a registered plugin restarts: it stops (removing its socket) and a
// new one creates a socket at the same path; the time from the old socket's removal until
// the new plugin receives Notify(true) (the daemon deregisters the old plugin first).
func BenchmarkE2EReregister(b *testing.B) {
	dirs := benchDirs(b)
	h := &noopHandler{}
	rd := startBenchDaemon(b, dirs, h, nil)
	sock := filepath.Join(dirs.Socket, "p.sock")
	p, err := registrationtest.Start(sock, pluginInfo(fakeType, "p"), registrationtest.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { p.Close() }()
	waitRegistered(b, []*registrationtest.Plugin{p})
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		rd.waitState(sock, reconciler.StateRegistered)
		p.Kill()
		b.StartTimer()
		start := time.Now()
		if err := os.Remove(sock); err != nil {
			b.Fatal(err)
		}
		p, err = registrationtest.Start(sock, pluginInfo(fakeType, "p"), registrationtest.Options{})
		if err != nil {
			b.Fatal(err)
		}
		if n := p.WaitNotification(b, e2eWait); !n.Registered {
			b.Fatalf("plugin %s: %+v", sock, n)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	b.ReportMetric(ms(percentile(lat, 0.50)), "p50-ms")
	b.ReportMetric(ms(percentile(lat, 0.99)), "p99-ms")
}

// raiseFDLimit raises the soft limit of open files to the hard limit, for the benchmarks that
// open thousands of sockets.
func raiseFDLimit(b *testing.B, want uint64) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatal(err)
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			b.Fatal(err)
		}
	}
	if lim.Cur < want {
		b.Skipf("open files limit %d, want %d", lim.Cur, want)
	}
}

// startPlugins starts n fake plugins of typ at once (from one goroutine per CPU), named
// <prefix><i>.sock in dir, and returns them.
func startPlugins(b *testing.B, dir, prefix, typ string, n int) []*registrationtest.Plugin {
	plugins := make([]*registrationtest.Plugin, n)
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	workers := runtime.GOMAXPROCS(0)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				name := prefix + strconv.Itoa(i)
				p, err := registrationtest.Start(filepath.Join(dir, name+".sock"), pluginInfo(typ, name), registrationtest.Options{})
				if err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
				plugins[i] = p
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		closePlugins(plugins)
		b.Fatal(err)
	default:
	}
	return plugins
}

// waitRegistered waits until every plugin has received Notify(true) (a Notify(false) before
// it, from a daemon whose handler was not loaded yet, is skipped).
func waitRegistered(b *testing.B, plugins []*registrationtest.Plugin) {
	for _, p := range plugins {
		for !p.WaitNotification(b, e2eWait).Registered {
		}
	}
}

// waitNotified waits until every plugin has received a first notification.
func waitNotified(b *testing.B, plugins []*registrationtest.Plugin) {
	for _, p := range plugins {
		p.WaitNotification(b, e2eWait)
	}
}

func closePlugins(plugins []*registrationtest.Plugin) {
	var wg sync.WaitGroup
	for _, p := range plugins {
		if p != nil {
			wg.Go(p.Close)
		}
	}
	wg.Wait()
}

// BenchmarkE2EBurst: N plugins create their sockets at once; the time until the last of them
// has received Notify(true). Each iteration is one burst; wall-ms is the median over them.
func BenchmarkE2EBurst(b *testing.B) {
	for _, n := range []int{1000, 4000} {
		b.Run("sockets="+strconv.Itoa(n), func(b *testing.B) {
			raiseFDLimit(b, uint64(n)+1000)
			dirs := benchDirs(b)
			h := &noopHandler{}
			rd := startBenchDaemon(b, dirs, h, nil)
			var walls []time.Duration
			b.ResetTimer()
			for i := range b.N {
				start := time.Now()
				plugins := startPlugins(b, dirs.Socket, "b"+strconv.Itoa(i)+"-", fakeType, n)
				waitRegistered(b, plugins)
				walls = append(walls, time.Since(start))
				b.StopTimer()
				closePlugins(plugins)
				waitFor(b, "every plugin to be deregistered", func() bool {
					return rd.d.State().Actual().Len() == 0 && len(rd.d.State().Statuses()) == 0
				})
				b.StartTimer()
			}
			b.StopTimer()
			b.ReportMetric(ms(percentile(walls, 0.5)), "wall-ms")
		})
	}
}

// BenchmarkDaemonProcess runs the daemon as a separate process (go build of this package)
// with the example handler, starts N plugins of its type at once, and measures the wall time
// until all are notified, the daemon's CPU over the -wasmhost.idle window with N registered,
// its peak and current resident memory (VmHWM, VmRSS), and how long SIGTERM takes to stop
// it. handler=cold starts with an empty compile cache (the handler is compiled at start);
// handler=warm on the cache a first run left; handler=none has no handler at all, so the
// plugins only reach waiting-for-handler (they are told Notify(false)): the daemon's own
// cost, without WebAssembly.
func BenchmarkDaemonProcess(b *testing.B) {
	if testing.Short() {
		b.Skip("builds the daemon and the example handler")
	}
	binDir, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(binDir)
	bin := buildDaemon(b, binDir)
	wasm := benchExampleWasm(b)
	for _, n := range []int{1000, 4000} {
		for _, mode := range []string{"cold", "warm", "none"} {
			b.Run(fmt.Sprintf("plugins=%d/handler=%s", n, mode), func(b *testing.B) {
				raiseFDLimit(b, uint64(n)+1000)
				for range b.N {
					benchDaemonProcess(b, bin, wasm, n, mode)
				}
			})
		}
	}
}

func benchDaemonProcess(b *testing.B, bin string, wasm []byte, n int, mode string) {
	dirs := benchDirs(b)
	if mode == "none" {
		wasm = nil
	}
	// Every plugin has heard the outcome: Notify(true), or Notify(false) without a handler.
	wait := waitRegistered
	if wasm == nil {
		wait = waitNotified
	} else if err := os.WriteFile(filepath.Join(dirs.Handler, "example.wasm"), wasm, 0o644); err != nil {
		b.Fatal(err)
	}
	if wasm != nil && *alsoHandlers != "" {
		for _, f := range strings.Split(*alsoHandlers, ",") {
			also, err := os.ReadFile(f)
			if err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dirs.Handler, filepath.Base(f)), also, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	metricsSock := filepath.Join(dirs.State, "metrics.sock")
	args := []string{"run", "--socket-dir", dirs.Socket, "--handler-dir", dirs.Handler, "--state-dir", dirs.State,
		"--metrics-listen", "unix:" + metricsSock, "--log-format", "json", "--log-level", "info"}
	if *daemonConfig != "" {
		args = append(args, "--config", *daemonConfig)
	}
	logFile, err := os.Create(filepath.Join(dirs.Base, "daemon.log"))
	if err != nil {
		b.Fatal(err)
	}
	defer logFile.Close()
	start := func() (*exec.Cmd, <-chan error) {
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = logFile, logFile
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		return cmd, exited
	}
	stop := func(cmd *exec.Cmd, exited <-chan error) time.Duration {
		t0 := time.Now()
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				b.Errorf("daemon exited with %v; log in %s", err, logFile.Name())
			}
		case <-time.After(e2eWait):
			cmd.Process.Kill()
			<-exited
			b.Errorf("daemon did not stop within %v of SIGTERM", e2eWait)
		}
		return time.Since(t0)
	}
	// probe waits for a plugin's outcome, as wait does, and fails at once, with the daemon's
	// log, if the daemon exits first (a config it refuses, say).
	probe := func(exited <-chan error) {
		p, err := registrationtest.Start(filepath.Join(dirs.Socket, "probe.sock"), pluginInfo(exampleType, "probe"), registrationtest.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		deadline := time.After(e2eWait)
		for {
			for _, n := range p.Notifications() {
				if n.Registered || wasm == nil {
					return
				}
			}
			select {
			case err := <-exited:
				log, _ := os.ReadFile(logFile.Name())
				b.Fatalf("the daemon exited (%v) before the probe plugin was registered; its log:\n%s", err, log)
			case <-deadline:
				b.Fatalf("probe plugin: no outcome within %v", e2eWait)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	if mode == "warm" { // a first run fills the compile cache
		cmd, exited := start()
		probe(exited)
		stop(cmd, exited)
	}

	cmd, exited := start()
	defer func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-exited
		}
	}()
	pid := cmd.Process.Pid
	probe(exited) // the handler is loaded and the daemon registers plugins
	loadedRSS := procMem(b, pid, "VmRSS")
	// The plugins run in this process: its CPU over the burst is theirs (their gRPC servers),
	// and with the daemon's it bounds the wall time from below on a machine of few cores.
	cpu0, plugins0 := procCPU(b, pid), procCPU(b, os.Getpid())
	t0 := time.Now()
	plugins := startPlugins(b, dirs.Socket, "p", exampleType, n)
	defer closePlugins(plugins)
	wait(b, plugins)
	wall := time.Since(t0)
	burstCPU := procCPU(b, pid) - cpu0
	pluginsCPU := procCPU(b, os.Getpid()) - plugins0

	// Idle: let the last registrations be recorded, then measure over the window.
	time.Sleep(2 * time.Second)
	c0, w0 := procCPU(b, pid), time.Now()
	time.Sleep(*idleWindow)
	idle := float64(procCPU(b, pid)-c0) / float64(time.Since(w0)) * 100
	hwm, rss := procMem(b, pid, "VmHWM"), procMem(b, pid, "VmRSS")
	// RSS in two parts: the daemon's own memory (heap, stacks, compiled handler code) and the
	// pages of its binary (and libc) mapped in: file-backed, clean, shared with every process
	// running the same binary.
	anon, file := procMem(b, pid, "RssAnon"), procMem(b, pid, "RssFile")
	goHeap := scrapeMetric(b, metricsSock, "go_memstats_heap_inuse_bytes")
	shutdown := stop(cmd, exited)

	b.ReportMetric(ms(wall), "wall-ms")
	b.ReportMetric(ms(burstCPU), "burst-cpu-ms")
	b.ReportMetric(ms(pluginsCPU), "plugins-cpu-ms")
	b.ReportMetric(idle, "idle-cpu-%")
	b.ReportMetric(float64(loadedRSS)/(1<<20), "loaded-rss-MB")
	b.ReportMetric(float64(hwm)/(1<<20), "peak-rss-MB")
	b.ReportMetric(float64(rss)/(1<<20), "rss-MB")
	b.ReportMetric(float64(anon)/(1<<20), "rss-anon-MB")
	b.ReportMetric(float64(file)/(1<<20), "rss-file-MB")
	b.ReportMetric(goHeap/(1<<20), "go-heap-MB")
	b.ReportMetric(ms(shutdown), "shutdown-ms")
}

// scrapeMetric reads one unlabelled sample from the daemon's /metrics on a unix socket.
func scrapeMetric(b *testing.B, socket, name string) float64 {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: e2eWait}).Get("http://wasmhost/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				b.Fatalf("metric %s: %v", name, err)
			}
			return f
		}
	}
	b.Fatalf("no metric %s", name)
	return 0
}

// clockTicks is the unit of utime and stime in /proc/<pid>/stat (USER_HZ, 100 on Linux).
const clockTicks = 100

// procCPU returns the CPU time (user + system) the process has used.
func procCPU(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	// The command name (field 2) may hold spaces; the fields after its ")" are fixed.
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	// fields[0] is field 3 (state); utime and stime are fields 14 and 15.
	utime, err1 := strconv.ParseUint(fields[11], 10, 64)
	stime, err2 := strconv.ParseUint(fields[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		b.Fatalf("/proc/%d/stat: %v", pid, err)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks
}

// procMem returns a memory figure of /proc/<pid>/status (VmHWM, VmRSS) in bytes.
func procMem(b *testing.B, pid int, key string) int64 {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				b.Fatalf("/proc/%d/status %s: %v", pid, key, err)
			}
			return kb << 10
		}
	}
	b.Fatalf("/proc/%d/status has no %s", pid, key)
	return 0
}

// loopingHandler stands for a handler that loops in every call: each call lasts until its
// deadline (the daemon's handler timeout).
type loopingHandler struct{}

func (loopingHandler) ValidatePlugin(ctx context.Context, _ registration.PluginInfo) error {
	<-ctx.Done()
	return ctx.Err()
}

func (loopingHandler) RegisterPlugin(ctx context.Context, _ registration.PluginInfo) (map[string]string, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (loopingHandler) DeRegisterPlugin(context.Context, registration.PluginInfo) error { return nil }

// BenchmarkE2EFairness: BenchmarkE2ERegister's measure (socket created → Notify(true), one
// plugin at a time, native no-op handler) while the daemon is busy with plugins that will not
// register: looping-type=500 keeps 500 plugins of a type whose handler loops in every call
// until its 5 s deadline pending (they fail and retry all along); hung-sockets=300 keeps 300
// sockets whose server accepts connections and never answers GetInfo; full-backlog=300 keeps
// 300 sockets whose listen backlog is full (a connect finds EAGAIN until the dial timeout).
// first-ms is the first plugin's, right after the busy sockets appeared: the one that waits
// behind their first attempts, if anything does.
func BenchmarkE2EFairness(b *testing.B) {
	b.Run("looping-type=500", func(b *testing.B) { benchFairness(b, 500, busyLooping) })
	b.Run("hung-sockets=300", func(b *testing.B) { benchFairness(b, 300, busyHung) })
	b.Run("full-backlog=300", func(b *testing.B) { benchFairness(b, 300, busyBacklog) })
}

type busyKind int

const (
	busyLooping busyKind = iota
	busyHung
	busyBacklog
)

// fullBacklogSocket listens on path with a backlog of one connection and fills it: a
// further connect fails with EAGAIN, as with a plugin that stopped accepting.
func fullBacklogSocket(b *testing.B, path string) {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: path}); err != nil {
		b.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		b.Fatal(err)
	}
	for {
		c, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC|syscall.SOCK_NONBLOCK, 0)
		if err != nil {
			b.Fatal(err)
		}
		if err := syscall.Connect(c, &syscall.SockaddrUnix{Name: path}); err != nil {
			syscall.Close(c)
			if errors.Is(err, syscall.EAGAIN) {
				return
			}
			b.Fatal(err)
		}
		b.Cleanup(func() { syscall.Close(c) })
	}
}

func benchFairness(b *testing.B, n int, kind busyKind) {
	const loopType = "loop.wasmhost.dev"
	dirs := benchDirs(b)
	rd := startDaemon(b, benchConfig(dirs), benchLog(), func(d *daemon.Daemon) {
		d.SetHandler(fakeType, &noopHandler{})
		d.SetHandler(loopType, loopingHandler{})
	})
	busyDir := filepath.Join(dirs.Socket, "busy")
	if err := os.Mkdir(busyDir, 0o755); err != nil {
		b.Fatal(err)
	}
	for i := range n {
		sock := filepath.Join(busyDir, "b"+strconv.Itoa(i)+".sock")
		if kind == busyBacklog {
			fullBacklogSocket(b, sock)
			continue
		}
		p, err := registrationtest.Start(sock, pluginInfo(loopType, "b"+strconv.Itoa(i)), registrationtest.Options{GetInfoHang: kind == busyHung})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(p.Close)
	}
	waitFor(b, "the busy sockets to be known", func() bool { return len(rd.d.State().Statuses()) >= n })
	registerOneByOne(b, rd, dirs, fakeType)
}

// BenchmarkE2ELiveness: with N plugins registered, one is killed as SIGKILL does (its server
// stops, its socket file stays); the time until its handler's DeRegisterPlugin is called.
// The daemon's idle CPU with the same plugins watched is BenchmarkDaemonProcess's idle-cpu-%.
func BenchmarkE2ELiveness(b *testing.B) {
	for _, n := range []int{1000, 4000} {
		b.Run("plugins="+strconv.Itoa(n), func(b *testing.B) { benchLiveness(b, n) })
	}
}

func benchLiveness(b *testing.B, n int) {
	dirs := benchDirs(b)
	h := &noopHandler{}
	rd := startBenchDaemon(b, dirs, h, nil)
	plugins := make([]*registrationtest.Plugin, 0, n)
	for i := range n {
		sock := filepath.Join(dirs.Socket, "p"+strconv.Itoa(i)+".sock")
		p, err := registrationtest.Start(sock, pluginInfo(fakeType, "p"+strconv.Itoa(i)), registrationtest.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(p.Close)
		plugins = append(plugins, p)
	}
	for _, p := range plugins {
		if note := p.WaitNotification(b, e2eWait); !note.Registered {
			b.Fatalf("plugin %s: %+v", p.Path(), note)
		}
	}
	waitFor(b, "every plugin registered", func() bool { return rd.d.State().Actual().Len() >= n })
	if b.N > n {
		b.Fatalf("-benchtime over %dx: each iteration kills one of the %d plugins", n, n)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		p := plugins[i]
		ch := h.expectDeregister(p.Path())
		start := time.Now()
		p.Kill()
		select {
		case at := <-ch:
			lat = append(lat, at.Sub(start))
		case <-time.After(e2eWait):
			b.Fatalf("no DeRegisterPlugin for %s within %v of its server stopping", p.Path(), e2eWait)
		}
	}
	b.StopTimer()
	b.ReportMetric(ms(percentile(lat, 0.50)), "p50-ms")
	b.ReportMetric(ms(percentile(lat, 0.99)), "p99-ms")
}
