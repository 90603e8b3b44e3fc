package metrics_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"go.uber.org/goleak"

	"github.com/wasmhost/wasmhost/internal/metrics"
	"github.com/wasmhost/wasmhost/internal/testwait"
)

func testConfig() metrics.Config {
	return metrics.Config{
		Version: "v1.2.3",
		Plugins: func() []metrics.PluginSample {
			return []metrics.PluginSample{
				{Socket: "/p/a-reg.sock", Type: "CSIPlugin", State: "registered", Desired: true, Actual: true},
				{Socket: "/p/b-reg.sock", Type: "CSIPlugin", State: "failing", Desired: true},
				{Socket: "/p/c-reg.sock", Type: "", State: "pending", Desired: true},
			}
		},
		PerSocket: true,
		Handlers: func() []metrics.HandlerSample {
			return []metrics.HandlerSample{{
				Name: "csi.wasm", PluginTypes: []string{"CSIPlugin"}, SHA256: "abc", ABIVersion: 1,
				Calls: 10, Failures: 3, Traps: 2, Timeouts: 1,
				Quarantined: true, Quarantines: 2, FastFailed: 7,
			}}
		},
		Refusals:            func() map[string]uint64 { return map[string]uint64{"not_regular": 1, "structure": 2} },
		RegistrationRetries: func() uint64 { return 4 },
		WatcherRelists:      func() uint64 { return 2 },
		WatcherErrors:       func() uint64 { return 1 },
	}
}

func TestMetricsNamesAndLabels(t *testing.T) {
	m, err := metrics.New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	m.ObserveRegistration("CSIPlugin", metrics.ResultOK, 3*time.Millisecond)
	m.ObserveRegistration("CSIPlugin", metrics.ResultUnreachable, 2*time.Second)
	m.ObserveHandlerCall("CSIPlugin", metrics.CallValidate, metrics.ResultOK, 40*time.Microsecond)
	m.ObserveHandlerCall("CSIPlugin", metrics.CallRegister, metrics.ResultTrap, time.Millisecond)

	const want = `
# HELP wasmhost_plugins Plugin sockets known, by plugin type ("unknown" until the plugin answered) and state.
# TYPE wasmhost_plugins gauge
wasmhost_plugins{plugin_type="CSIPlugin",state="failing"} 1
wasmhost_plugins{plugin_type="CSIPlugin",state="pending"} 0
wasmhost_plugins{plugin_type="CSIPlugin",state="registered"} 1
wasmhost_plugins{plugin_type="CSIPlugin",state="waiting-for-handler"} 0
wasmhost_plugins{plugin_type="unknown",state="failing"} 0
wasmhost_plugins{plugin_type="unknown",state="pending"} 1
wasmhost_plugins{plugin_type="unknown",state="registered"} 0
wasmhost_plugins{plugin_type="unknown",state="waiting-for-handler"} 0
# HELP wasmhost_plugin_socket 1 for each plugin socket path in the desired state (the socket exists) and in the actual state (the plugin is registered), like the kubelet's plugin_manager_total_plugins.
# TYPE wasmhost_plugin_socket gauge
wasmhost_plugin_socket{socket_path="/p/a-reg.sock",state="actual"} 1
wasmhost_plugin_socket{socket_path="/p/a-reg.sock",state="desired"} 1
wasmhost_plugin_socket{socket_path="/p/b-reg.sock",state="desired"} 1
wasmhost_plugin_socket{socket_path="/p/c-reg.sock",state="desired"} 1
# HELP wasmhost_handler_info Always 1, one series per loaded handler and plugin type it serves.
# TYPE wasmhost_handler_info gauge
wasmhost_handler_info{abi_version="1",handler="csi.wasm",plugin_type="CSIPlugin",sha256="abc"} 1
# HELP wasmhost_handler_traps_total Handler calls that ended in a WebAssembly trap (the instance is thrown away).
# TYPE wasmhost_handler_traps_total counter
wasmhost_handler_traps_total{handler="csi.wasm"} 2
# HELP wasmhost_handler_timeouts_total Handler calls stopped at their deadline (the instance is thrown away).
# TYPE wasmhost_handler_timeouts_total counter
wasmhost_handler_timeouts_total{handler="csi.wasm"} 1
# HELP wasmhost_handler_quarantined 1 while a handler is quarantined: after repeated traps or timeouts its calls fail at once until a probe call succeeds.
# TYPE wasmhost_handler_quarantined gauge
wasmhost_handler_quarantined{handler="csi.wasm"} 1
# HELP wasmhost_handler_quarantines_total Times a handler was quarantined (a failed probe counts again).
# TYPE wasmhost_handler_quarantines_total counter
wasmhost_handler_quarantines_total{handler="csi.wasm"} 2
# HELP wasmhost_handler_refusals_total Handler files refused (not loaded, or an update not loaded), by reason: not_regular, unreadable, insecure, insecure_directory, too_large, invalid, structure, compile_timeout, compile_busy, memory, abi, not_granted, trap, timeout, conflict, not_bound.
# TYPE wasmhost_handler_refusals_total counter
wasmhost_handler_refusals_total{reason="not_regular"} 1
wasmhost_handler_refusals_total{reason="structure"} 2
# HELP wasmhost_registration_retries_total Registration attempts made after a failed attempt for the same socket.
# TYPE wasmhost_registration_retries_total counter
wasmhost_registration_retries_total 4
# HELP wasmhost_watcher_relists_total Full re-listings of the socket directory (at start, after a watcher error or overflow, and periodic).
# TYPE wasmhost_watcher_relists_total counter
wasmhost_watcher_relists_total 2
# HELP wasmhost_watcher_errors_total Errors reported by the socket directory watcher (each one leads to a re-list).
# TYPE wasmhost_watcher_errors_total counter
wasmhost_watcher_errors_total 1
# HELP wasmhost_ready 1 when the daemon is ready (first full listing of the socket directory done, start-up handlers loaded), 0 otherwise.
# TYPE wasmhost_ready gauge
wasmhost_ready 1
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want),
		"wasmhost_plugins", "wasmhost_plugin_socket", "wasmhost_handler_info", "wasmhost_handler_traps_total",
		"wasmhost_handler_timeouts_total", "wasmhost_handler_quarantined", "wasmhost_handler_quarantines_total",
		"wasmhost_handler_refusals_total", "wasmhost_registration_retries_total", "wasmhost_watcher_relists_total",
		"wasmhost_watcher_errors_total", "wasmhost_ready"); err != nil {
		t.Error(err)
	}

	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string][]string{}
	series := map[string]int{}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			series[mf.GetName()]++
			var ls []string
			for _, l := range mt.GetLabel() {
				ls = append(ls, l.GetName())
			}
			labels[mf.GetName()] = ls
		}
	}
	for name, want := range map[string][]string{
		"wasmhost_registration_duration_seconds": {"plugin_type", "result"},
		"wasmhost_handler_call_duration_seconds": {"call", "plugin_type", "result"},
		"wasmhost_build_info":                    {"go_version", "version"},
		"wasmhost_handler_calls_total":           {"handler"},
		"wasmhost_handler_failures_total":        {"handler"},
	} {
		if !slices.Equal(labels[name], want) {
			t.Errorf("%s labels = %v, want %v", name, labels[name], want)
		}
	}
	if series["wasmhost_registration_duration_seconds"] != 2 || series["wasmhost_handler_call_duration_seconds"] != 2 {
		t.Errorf("histogram series = %v, want 2 each", series)
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes"} {
		if series[name] == 0 {
			t.Errorf("%s missing", name)
		}
	}

	// Names, units and help follow Prometheus's conventions.
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "wasmhost_") {
			t.Errorf("promlint: %s: %s", p.Metric, p.Text)
		}
	}
}

func TestMetricsOptional(t *testing.T) {
	// Without the functions and without PerSocket, those metrics are not exported at all.
	cfg := testConfig()
	cfg.PerSocket = false
	cfg.Handlers, cfg.WatcherErrors = nil, nil
	m, err := metrics.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"wasmhost_plugin_socket", "wasmhost_handler_info", "wasmhost_handler_traps_total", "wasmhost_watcher_errors_total"} {
		if n, err := testutil.GatherAndCount(m.Registry(), name); err != nil || n != 0 {
			t.Errorf("%s: %d series (err %v), want none", name, n, err)
		}
	}
	// Observe on a nil *Metrics does nothing.
	var nilM *metrics.Metrics
	nilM.ObserveRegistration("x", metrics.ResultOK, time.Second)
	nilM.ObserveHandlerCall("x", metrics.CallValidate, metrics.ResultOK, time.Second)
}

func TestPluginTypeLabels(t *testing.T) {
	m, err := metrics.New(metrics.Config{MaxPluginTypes: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{"A", "B", "C", "D", "", "bad\xff\xfe" + strings.Repeat("x", 1000)} {
		m.ObserveRegistration(typ, metrics.ResultOK, time.Millisecond)
	}
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, mf := range mfs {
		if mf.GetName() != "wasmhost_registration_duration_seconds" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "plugin_type" {
					got = append(got, l.GetValue())
				}
			}
		}
	}
	slices.Sort(got)
	// A and B take the two slots; the rest is "other", the empty type "unknown".
	if want := []string{"A", "B", "other", "unknown"}; !slices.Equal(got, want) {
		t.Errorf("plugin_type values = %q, want %q", got, want)
	}
}

func TestNewAddr(t *testing.T) {
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"", true},
		{"off", true},
		{metrics.DefaultAddr, true},
		{":9436", true},
		{"[::1]:9436", true},
		{"unix:/run/wasmhost/metrics.sock", true},
		{"unix:relative.sock", false},
		{"unix:/" + strings.Repeat("x", 120), false},
		{"localhost", false},
		{"127.0.0.1:", false},
	} {
		_, err := metrics.New(metrics.Config{Addr: tc.addr})
		if tc.ok && err != nil {
			t.Errorf("Addr %q: %v", tc.addr, err)
		}
		if !tc.ok && !errors.Is(err, metrics.ErrConfig) {
			t.Errorf("Addr %q: %v, want ErrConfig", tc.addr, err)
		}
	}
}

func TestRunUnixSocket(t *testing.T) {
	before := goleak.IgnoreCurrent()
	dir, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "run", "metrics.sock")

	var notReady atomic.Pointer[error]
	reason := errors.New("the socket directory has not been listed yet")
	notReady.Store(&reason)
	cfg := testConfig()
	cfg.Addr = "unix:" + sock
	cfg.Ready = func() error {
		if p := notReady.Load(); p != nil {
			return *p
		}
		return nil
	}
	m, err := metrics.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.ObserveRegistration("CSIPlugin", metrics.ResultOK, time.Millisecond)
	m.ObserveHandlerCall("CSIPlugin", metrics.CallRegister, metrics.ResultOK, 30*time.Microsecond)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(stop)

	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := client.Get("http://wasmhost" + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	// Wait for the socket: Run listens in its own time.
	testwait.Until(t, "the metrics socket to answer", func() bool {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	fi, err := os.Lstat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode = %v, want a socket with 0600", fi.Mode())
	}

	if code, body := get("/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz = %d %q", code, body)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, reason.Error()) {
		t.Errorf("/readyz before ready = %d %q, want 503 with the reason", code, body)
	}
	notReady.Store(nil)
	if code, body := get("/readyz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/readyz once ready = %d %q", code, body)
	}
	code, body := get("/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics = %d", code)
	}
	for _, s := range []string{
		`wasmhost_plugins{plugin_type="CSIPlugin",state="registered"} 1`,
		`wasmhost_ready 1`,
		`wasmhost_build_info{go_version="`,
		`# TYPE wasmhost_registration_duration_seconds histogram`,
		`# TYPE wasmhost_handler_call_duration_seconds histogram`,
		`promhttp_metric_handler_requests_total`,
	} {
		if !strings.Contains(body, s) {
			t.Errorf("/metrics lacks %q", s)
		}
	}
	if code, _ := get("/nope"); code != http.StatusNotFound {
		t.Errorf("/nope = %d, want 404", code)
	}

	tr.CloseIdleConnections()
	stop()
	testwait.NoLeaks(t, before)
	if _, err := os.Lstat(sock); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket still there after Run returned: %v", err)
	}
	if err := m.Run(t.Context()); !errors.Is(err, metrics.ErrRunning) {
		t.Errorf("second Run: %v, want ErrRunning", err)
	}
}

func TestRunOff(t *testing.T) {
	m, err := metrics.New(metrics.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := m.Run(ctx); err != nil {
		t.Errorf("Run with no address: %v", err)
	}
}

func TestRunTCP(t *testing.T) {
	m, err := metrics.New(metrics.Config{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := m.Run(ctx); err != nil {
		t.Errorf("Run on 127.0.0.1:0: %v", err)
	}
}

func BenchmarkObserveHandlerCall(b *testing.B) {
	m, err := metrics.New(metrics.Config{})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		m.ObserveHandlerCall("CSIPlugin", metrics.CallValidate, metrics.ResultOK, 40*time.Microsecond)
	}
}

// Connections past MaxConnections are not served (they wait in the backlog): a local user
// holding connections open cannot take the daemon's descriptors. Served again once one goes.
func TestRunCapsConnections(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "metrics.sock")
	cfg := testConfig()
	cfg.Addr = "unix:" + sock
	cfg.MaxConnections = 1
	m, err := metrics.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	get := func(timeout time.Duration) error {
		c := &http.Client{Timeout: timeout, Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", sock)
			},
			DisableKeepAlives: true,
		}}
		resp, err := c.Get("http://metrics/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	testwait.Until(t, "the metrics endpoint to answer", func() bool { return get(time.Second) == nil })
	hog, err := net.Dial("unix", sock) // holds the one slot, sends nothing
	if err != nil {
		t.Fatal(err)
	}
	if err := get(300 * time.Millisecond); err == nil {
		t.Fatal("a request was served while the one connection allowed was held")
	}
	hog.Close()
	if err := get(10 * time.Second); err != nil {
		t.Fatalf("after the held connection went: %v", err)
	}
}

// Issue 22: a series per handler file or source that serves nothing, with why, so that an
// alert can say "this node has no handler for CSIPlugin"; and /readyz says what does not
// serve below its "ok".
func TestNotServing(t *testing.T) {
	cfg := testConfig()
	cfg.NotServing = func() []metrics.NotServingSample {
		return []metrics.NotServingSample{
			{Source: "registry", Name: "registry.example.com/csi@sha256:ab", Reason: "unreachable"},
			{Source: "file", Name: "bad.wasm", Reason: "invalid"},
			{Source: "file", Name: "bad.wasm", Reason: "invalid"}, // a duplicate must not fail the scrape
		}
	}
	cfg.Problems = func() []string {
		return []string{"2 handler sources or files not serving: …", "no handler for type CSIPlugin while 1 plugin waits"}
	}
	m, err := metrics.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const want = `
# HELP wasmhost_handler_not_serving 1 for each handler file or source (handlers.sources) that serves nothing, with why: a file's refusal reason, a source's pull reason (pending: not pulled yet, unreachable, not_found, policy, integrity, bad_artifact). Absent when everything serves.
# TYPE wasmhost_handler_not_serving gauge
wasmhost_handler_not_serving{handler="bad.wasm",reason="invalid",source="file"} 1
wasmhost_handler_not_serving{handler="registry.example.com/csi@sha256:ab",reason="unreachable",source="registry"} 1
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "wasmhost_handler_not_serving"); err != nil {
		t.Error(err)
	}
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok\n2 handler sources or files not serving: …\nno handler for type CSIPlugin while 1 plugin waits\n" {
		t.Errorf("/readyz = %d %q", resp.StatusCode, body)
	}
}
