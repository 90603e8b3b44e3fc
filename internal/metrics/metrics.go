// Package metrics exposes wasmhost's Prometheus metrics and its health endpoints over HTTP:
// /metrics, /healthz (the process is alive) and /readyz (the daemon is ready).
//
// The daemon's other packages do not import Prometheus. What they count is read at scrape
// time through the functions in Config (plain func() values over their own counters), and
// latencies are fed by ObserveRegistration and ObserveHandlerCall, which the daemon calls from
// its hooks. Everything is registered on a registry of this package's own, never on
// Prometheus's global default.
//
// This package is part of the daemon, not a stable API.
package metrics

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/wasmhost/wasmhost/internal/unixsock"
)

// DefaultAddr is where the daemon serves metrics unless told otherwise: loopback only, port
// 9436. Prometheus's list of default exporter ports (9100-9999) is fully allocated, so no
// port there is guaranteed free; change it with the daemon's flag when it collides.
const DefaultAddr = "127.0.0.1:9436"

// DefaultMaxConnections is the default of Config.MaxConnections (a constant of the daemon).
const DefaultMaxConnections = 64

// Sentinel errors. Callers decide with errors.Is.
var (
	// ErrConfig: the Config cannot work (a malformed listen address).
	ErrConfig = errors.New("metrics: invalid config")
	// ErrSocketInUse: another process answers on the metrics unix socket.
	ErrSocketInUse = unixsock.ErrInUse
	// ErrNotSocket: something that is not a socket is in the way at the socket path.
	ErrNotSocket = unixsock.ErrNotSocket
	// ErrRunning: Run was called on a Metrics that is running or has run.
	ErrRunning = errors.New("metrics: Run called twice")
)

// Label values for the results of registrations and handler calls, for the daemon's hooks.
// Other values are allowed; keep them few.
const (
	ResultOK           = "ok"
	ResultError        = "error"         // any other failure
	ResultRejected     = "rejected"      // the handler refused the plugin
	ResultUnreachable  = "unreachable"   // the plugin did not answer
	ResultNoHandler    = "no_handler"    // no handler for the plugin's type
	ResultNotifyFailed = "notify_failed" // the plugin did not accept the notification
	ResultTrap         = "trap"          // the handler's module trapped
	ResultTimeout      = "timeout"       // the handler call ran out of time
	ResultQuarantined  = "quarantined"   // the handler is quarantined: the call failed at once
	ResultProtocol     = "protocol"      // the plugin's answer broke HTTP/2 or gRPC
	ResultTypeBusy     = "type_busy"     // every slot of the plugin's type was taken: it waits
)

// The calls a handler answers, for ObserveHandlerCall.
const (
	CallValidate   = "validate"
	CallRegister   = "register"
	CallDeregister = "deregister"
)

// PluginSample is what the metrics need to know about one plugin socket at scrape time.
type PluginSample struct {
	Socket  string
	Type    string // the plugin type; empty until the plugin answered GetInfo
	State   string // the reconciler's state name: pending, registered, failing, ...
	Desired bool   // the socket exists (it is in the desired state)
	Actual  bool   // the plugin is registered (it is in the actual state)
}

// HandlerSample is what the metrics need to know about one loaded handler at scrape time.
type HandlerSample struct {
	// Name identifies the handler in labels: its file's base name (csi.wasm), or a name of
	// the daemon's choosing for a built-in handler.
	Name        string
	PluginTypes []string
	SHA256      string
	ABIVersion  uint32
	// Counts since the handler was loaded. A reloaded handler starts again from zero, which
	// Prometheus treats as a counter reset.
	Calls, Failures, Traps, Timeouts uint64
	// CPU is the CPU time of its guest code; Throttled, the time its calls waited for a turn.
	CPU, Throttled time.Duration
	// Quarantined: its calls fail at once after repeated traps or timeouts. Quarantines counts
	// the times it was put there, FastFailed the calls failed at once because of it.
	Quarantined             bool
	Quarantines, FastFailed uint64
	// Pins are its plugin types served by an older revision after a rollback; Shadows, the
	// shadow runs of its plugin types.
	Pins    []PinSample
	Shadows []ShadowSample
}

// NotServingSample is a handler file or source that serves nothing, and why.
type NotServingSample struct {
	Source string // "file" (the handler directory) or "registry" (handlers.sources)
	Name   string // the file's base name, or the source's reference
	Reason string // a file's refusal reason, a source's pull reason (pending, unreachable, policy, integrity, ...)
}

// PinSample is a plugin type pinned to an older revision of its handler.
type PinSample struct {
	PluginType, SHA256 string
	Auto               bool // an automatic rollback
}

// ShadowSample is the shadow run of a plugin type: registrations validated by the candidate
// too, and those it decided otherwise.
type ShadowSample struct {
	PluginType, SHA256  string
	Runs, Disagreements uint64
}

// Config configures the metrics and their HTTP server. Every function is called at scrape
// time, from any goroutine; it must be safe for that and return promptly.
type Config struct {
	// Addr is where Run serves: "" or "off" serves nothing (Run just waits), "unix:/path" a unix
	// socket (mode 0600; a stale socket there is removed), anything else a TCP host:port.
	// Defaults to "": off. The daemon's flag defaults to DefaultAddr.
	Addr string
	// Logger receives the server's logs. Defaults to nil: discard.
	Logger *slog.Logger
	// Version is the daemon's version, for wasmhost_build_info. Defaults to "(devel)".
	Version string
	// Ready returns nil when the daemon is ready, or an error that says what it waits for;
	// it drives /readyz and wasmhost_ready. Defaults to nil: always ready.
	Ready func() error
	// Problems says what does not serve once ready, one line each: /readyz answers 200 and
	// "ok" followed by them. Defaults to nil: none.
	Problems func() []string
	// NotServing lists the handler files and sources that serve nothing, for
	// wasmhost_handler_not_serving. Defaults to nil: not exported.
	NotServing func() []NotServingSample
	// Plugins lists the plugin sockets, for wasmhost_plugins (and wasmhost_plugin_socket).
	// Defaults to nil: those metrics are not exported.
	Plugins func() []PluginSample
	// PerSocket adds wasmhost_plugin_socket{socket_path,state}, one series per socket path
	// and half (desired, actual), as the kubelet's plugin_manager_total_plugins has. A node
	// with thousands of plugin sockets then exports thousands of series, and every new socket
	// path is a new series, so it is off unless asked for. Defaults to false.
	PerSocket bool
	// Handlers lists the loaded handlers, for wasmhost_handler_info and the per-handler
	// counters. Defaults to nil: those metrics are not exported.
	Handlers func() []HandlerSample
	// Refusals returns how many times a handler file was refused, by reason, for
	// wasmhost_handler_refusals_total. Defaults to nil: not exported.
	Refusals func() map[string]uint64
	// RegistrationRetries, WatcherRelists and WatcherErrors return totals since the daemon
	// started, for the counters of the same names. Each defaults to nil: not exported.
	RegistrationRetries func() uint64
	WatcherRelists      func() uint64
	WatcherErrors       func() uint64
	// Publish lists the publisher's sinks, and PublishRefused counts the keys it refused,
	// for wasmhost_publish_*. Defaults to nil: not exported (nothing is published).
	Publish        func() []PublishSample
	PublishRefused func() int
	// Events returns the Events on the Node by result (recorded, dropped, failed), for
	// wasmhost_publish_events_total. Defaults to nil: not exported.
	Events func() map[string]uint64
	// MaxPluginTypes caps the distinct plugin_type label values: plugin types come from the
	// plugins themselves, and a misbehaving one must not blow up the series count. Types seen
	// after the cap are reported as "other". Defaults to 64.
	MaxPluginTypes int
	// ShutdownTimeout is how long Run waits for open requests after its context is done
	// before it closes the connections. Defaults to 5 s.
	ShutdownTimeout time.Duration
	// MaxConnections bounds the connections served at once: past it, new ones wait in the
	// listen backlog, so that a local user holding connections open cannot take the daemon's
	// file descriptors (each idle one is closed after 30 s, one that sends no request after
	// 10 s). Defaults to 64.
	MaxConnections int
}

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Version == "" {
		c.Version = "(devel)"
	}
	if c.MaxPluginTypes <= 0 {
		c.MaxPluginTypes = 64
	}
	if c.MaxConnections <= 0 {
		c.MaxConnections = DefaultMaxConnections
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 5 * time.Second
	}
	return c
}

// Buckets of the histograms, in seconds.
var (
	// From a millisecond (a plugin that answers at once) to minutes (one that needed retries
	// with backoff).
	registrationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	// From microseconds (a small WebAssembly call) to the deadline of a call.
	handlerCallBuckets = []float64{5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}
)

// Metrics holds wasmhost's metrics. Make it with New; serve it with Run (or mount Handler).
// The Observe methods are safe for concurrent use, and do nothing on a nil *Metrics.
type Metrics struct {
	cfg   Config
	log   *slog.Logger
	reg   *prometheus.Registry
	types *typeLimiter

	registration *prometheus.HistogramVec
	handlerCall  *prometheus.HistogramVec

	running sync.Mutex // held by Run
	ran     bool
}

// New builds the metrics and registers them on a registry of their own.
func New(cfg Config) (*Metrics, error) {
	cfg = cfg.withDefaults()
	if _, _, err := parseAddr(cfg.Addr); err != nil {
		return nil, err
	}
	m := &Metrics{
		cfg:   cfg,
		log:   cfg.Logger,
		reg:   prometheus.NewRegistry(),
		types: &typeLimiter{max: cfg.MaxPluginTypes, seen: make(map[string]struct{})},
	}
	m.registration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "wasmhost_registration_duration_seconds",
		Help: "Time from a plugin socket being seen to the plugin being notified of the outcome " +
			"of its registration, by plugin type and result.",
		Buckets:                         registrationBuckets,
		NativeHistogramBucketFactor:     1.1,
		NativeHistogramMaxBucketNumber:  160,
		NativeHistogramMinResetDuration: time.Hour,
	}, []string{"plugin_type", "result"})
	m.handlerCall = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:                            "wasmhost_handler_call_duration_seconds",
		Help:                            "Duration of handler calls (validate, register, deregister), by plugin type, call and result.",
		Buckets:                         handlerCallBuckets,
		NativeHistogramBucketFactor:     1.1,
		NativeHistogramMaxBucketNumber:  160,
		NativeHistogramMinResetDuration: time.Hour,
	}, []string{"plugin_type", "call", "result"})

	cs := []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "wasmhost_build_info",
			Help:        "Always 1; the labels say which wasmhost this is.",
			ConstLabels: prometheus.Labels{"version": labelValue(cfg.Version), "go_version": runtime.Version()},
		}, func() float64 { return 1 }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "wasmhost_ready",
			Help: "1 when the daemon is ready (first full listing of the socket directory done, start-up handlers loaded), 0 otherwise.",
		}, func() float64 {
			if m.readyErr() != nil {
				return 0
			}
			return 1
		}),
		m.registration,
		m.handlerCall,
		&stateCollector{m: m},
	}
	if cfg.Publish != nil {
		cs = append(cs, publishCollector{sinks: cfg.Publish, refused: cfg.PublishRefused, events: cfg.Events})
	}
	for _, c := range []struct {
		name, help string
		fn         func() uint64
	}{
		{"wasmhost_registration_retries_total", "Registration attempts made after a failed attempt for the same socket.", cfg.RegistrationRetries},
		{"wasmhost_watcher_relists_total", "Full re-listings of the socket directory (at start, after a watcher error or overflow, and periodic).", cfg.WatcherRelists},
		{"wasmhost_watcher_errors_total", "Errors reported by the socket directory watcher (each one leads to a re-list).", cfg.WatcherErrors},
	} {
		if c.fn == nil {
			continue
		}
		fn := c.fn
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: c.name, Help: c.help},
			func() float64 { return float64(fn()) }))
	}
	for _, c := range cs {
		if err := m.reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: registering a collector: %w", err)
		}
	}
	return m, nil
}

// Registry returns the registry the metrics are on, for tests and for the daemon to add
// collectors of its own.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// ObserveRegistration records one registration: pluginType as the plugin said it (empty when
// it did not say), result one of the Result constants, d from the socket being seen to the
// plugin being notified.
func (m *Metrics) ObserveRegistration(pluginType, result string, d time.Duration) {
	if m == nil {
		return
	}
	o, err := m.registration.GetMetricWithLabelValues(m.types.label(pluginType), labelValue(result))
	if err != nil {
		return
	}
	o.Observe(d.Seconds())
}

// ObserveHandlerCall records one handler call: call one of the Call constants, result one of
// ResultOK, ResultError, ResultTrap, ResultTimeout.
func (m *Metrics) ObserveHandlerCall(pluginType, call, result string, d time.Duration) {
	if m == nil {
		return
	}
	o, err := m.handlerCall.GetMetricWithLabelValues(m.types.label(pluginType), labelValue(call), labelValue(result))
	if err != nil {
		return
	}
	o.Observe(d.Seconds())
}

func (m *Metrics) readyErr() error {
	if m.cfg.Ready == nil {
		return nil
	}
	return m.cfg.Ready()
}

// stateCollector reports, at scrape time, what Config.Plugins and Config.Handlers say.
type stateCollector struct {
	m *Metrics
}

var (
	pluginsDesc = prometheus.NewDesc("wasmhost_plugins",
		"Plugin sockets known, by plugin type (\"unknown\" until the plugin answered) and state.",
		[]string{"plugin_type", "state"}, nil)
	pluginSocketDesc = prometheus.NewDesc("wasmhost_plugin_socket",
		"1 for each plugin socket path in the desired state (the socket exists) and in the actual state (the plugin is registered), like the kubelet's plugin_manager_total_plugins.",
		[]string{"socket_path", "state"}, nil)
	handlerInfoDesc = prometheus.NewDesc("wasmhost_handler_info",
		"Always 1, one series per loaded handler and plugin type it serves.",
		[]string{"handler", "plugin_type", "sha256", "abi_version"}, nil)
	handlerCallsDesc = prometheus.NewDesc("wasmhost_handler_calls_total",
		"Calls into a handler since it was loaded.", []string{"handler"}, nil)
	handlerFailuresDesc = prometheus.NewDesc("wasmhost_handler_failures_total",
		"Handler calls that failed: every call that did not accept or reject, traps, timeouts, calls ended by a budget and calls failed at once by a quarantine included.", []string{"handler"}, nil)
	handlerTrapsDesc = prometheus.NewDesc("wasmhost_handler_traps_total",
		"Handler calls that ended in a WebAssembly trap (the instance is thrown away).", []string{"handler"}, nil)
	handlerTimeoutsDesc = prometheus.NewDesc("wasmhost_handler_timeouts_total",
		"Handler calls stopped at their deadline (the instance is thrown away).", []string{"handler"}, nil)
	handlerCPUDesc = prometheus.NewDesc("wasmhost_handler_cpu_seconds_total",
		"CPU time a handler's guest code used (calls and instantiations), counted at the yields the host adds to its code.", []string{"handler"}, nil)
	handlerThrottledDesc = prometheus.NewDesc("wasmhost_handler_throttled_seconds_total",
		"Time a handler's calls waited for a turn to run guest code (handlers.limits.guestThreads); the types that used the least CPU lately go first.", []string{"handler"}, nil)
	handlerQuarantinedDesc = prometheus.NewDesc("wasmhost_handler_quarantined",
		"1 while a handler is quarantined: after repeated traps or timeouts its calls fail at once until a probe call succeeds.", []string{"handler"}, nil)
	handlerQuarantinesDesc = prometheus.NewDesc("wasmhost_handler_quarantines_total",
		"Times a handler was quarantined (a failed probe counts again).", []string{"handler"}, nil)
	handlerPinnedDesc = prometheus.NewDesc("wasmhost_handler_pinned",
		"1 while a plugin type is served by an older revision of its handler than its file holds (a rollback; auto=\"true\" when automatic).",
		[]string{"plugin_type", "sha256", "auto"}, nil)
	handlerShadowRunsDesc = prometheus.NewDesc("wasmhost_handler_shadow_runs_total",
		"Registrations whose Validate the plugin type's shadow candidate ran too.", []string{"plugin_type", "sha256"}, nil)
	handlerShadowDisagreementsDesc = prometheus.NewDesc("wasmhost_handler_shadow_disagreements_total",
		"Of those, the ones the candidate decided otherwise than the serving revision (accept, reject, fail).", []string{"plugin_type", "sha256"}, nil)
	handlerNotServingDesc = prometheus.NewDesc("wasmhost_handler_not_serving",
		"1 for each handler file or source (handlers.sources) that serves nothing, with why: a file's refusal reason, a source's pull reason (pending: not pulled yet, unreachable, not_found, policy, integrity, bad_artifact). Absent when everything serves.",
		[]string{"source", "handler", "reason"}, nil)
	handlerRefusalsDesc = prometheus.NewDesc("wasmhost_handler_refusals_total",
		"Handler files refused (not loaded, or an update not loaded), by reason: not_regular, unreadable, insecure, insecure_directory, too_large, invalid, structure, compile_timeout, compile_busy, memory, abi, not_granted, trap, timeout, conflict, not_bound.",
		[]string{"reason"}, nil)
)

// pluginStates are reported for every plugin type seen, zero or not, so that a query for
// failing plugins finds a series before the first one fails.
var pluginStates = []string{"pending", "registered", "failing", "waiting-for-handler"}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	cfg := c.m.cfg
	if cfg.Plugins != nil {
		ch <- pluginsDesc
		if cfg.PerSocket {
			ch <- pluginSocketDesc
		}
	}
	if cfg.Handlers != nil {
		for _, d := range []*prometheus.Desc{handlerInfoDesc, handlerCallsDesc, handlerFailuresDesc, handlerTrapsDesc, handlerTimeoutsDesc, handlerCPUDesc, handlerThrottledDesc,
			handlerQuarantinedDesc, handlerQuarantinesDesc, handlerPinnedDesc, handlerShadowRunsDesc, handlerShadowDisagreementsDesc} {
			ch <- d
		}
	}
	if cfg.Refusals != nil {
		ch <- handlerRefusalsDesc
	}
	if cfg.NotServing != nil {
		ch <- handlerNotServingDesc
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	cfg := c.m.cfg
	if cfg.Plugins != nil {
		c.collectPlugins(ch, cfg.Plugins(), cfg.PerSocket)
	}
	if cfg.Handlers != nil {
		c.collectHandlers(ch, cfg.Handlers())
	}
	if cfg.Refusals != nil {
		for reason, n := range cfg.Refusals() {
			ch <- prometheus.MustNewConstMetric(handlerRefusalsDesc, prometheus.CounterValue, float64(n), labelValue(reason))
		}
	}
	if cfg.NotServing != nil {
		type key struct{ source, name string }
		seen := map[key]bool{}
		for _, n := range cfg.NotServing() {
			k := key{labelValue(n.Source), labelValue(n.Name)}
			if seen[k] {
				continue // two series with the same labels would fail the whole scrape
			}
			seen[k] = true
			ch <- prometheus.MustNewConstMetric(handlerNotServingDesc, prometheus.GaugeValue, 1, k.source, k.name, labelValue(n.Reason))
		}
	}
}

func (c *stateCollector) collectPlugins(ch chan<- prometheus.Metric, ps []PluginSample, perSocket bool) {
	type key struct{ typ, state string }
	counts := make(map[key]int)
	types := make(map[string]struct{})
	for _, p := range ps {
		if p.State == "gone" {
			continue
		}
		t := c.m.types.label(p.Type)
		types[t] = struct{}{}
		counts[key{t, labelValue(p.State)}]++
	}
	for t := range types {
		for _, s := range pluginStates {
			if _, ok := counts[key{t, s}]; !ok {
				counts[key{t, s}] = 0
			}
		}
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(pluginsDesc, prometheus.GaugeValue, float64(n), k.typ, k.state)
	}
	if !perSocket {
		return
	}
	for _, p := range ps {
		path := labelValue(p.Socket)
		if p.Desired {
			ch <- prometheus.MustNewConstMetric(pluginSocketDesc, prometheus.GaugeValue, 1, path, "desired")
		}
		if p.Actual {
			ch <- prometheus.MustNewConstMetric(pluginSocketDesc, prometheus.GaugeValue, 1, path, "actual")
		}
	}
}

func (c *stateCollector) collectHandlers(ch chan<- prometheus.Metric, hs []HandlerSample) {
	seen := make(map[string]struct{}, len(hs))
	for _, h := range hs {
		name := labelValue(h.Name)
		if _, dup := seen[name]; dup {
			continue // two series with the same labels would fail the whole scrape
		}
		seen[name] = struct{}{}
		abi := fmt.Sprint(h.ABIVersion)
		types := make(map[string]struct{})
		for _, t := range h.PluginTypes {
			t = c.m.types.label(t)
			if _, dup := types[t]; dup {
				continue
			}
			types[t] = struct{}{}
			ch <- prometheus.MustNewConstMetric(handlerInfoDesc, prometheus.GaugeValue, 1, name, t, labelValue(h.SHA256), abi)
		}
		ch <- prometheus.MustNewConstMetric(handlerCallsDesc, prometheus.CounterValue, float64(h.Calls), name)
		ch <- prometheus.MustNewConstMetric(handlerFailuresDesc, prometheus.CounterValue, float64(h.Failures), name)
		ch <- prometheus.MustNewConstMetric(handlerTrapsDesc, prometheus.CounterValue, float64(h.Traps), name)
		ch <- prometheus.MustNewConstMetric(handlerTimeoutsDesc, prometheus.CounterValue, float64(h.Timeouts), name)
		ch <- prometheus.MustNewConstMetric(handlerCPUDesc, prometheus.CounterValue, h.CPU.Seconds(), name)
		ch <- prometheus.MustNewConstMetric(handlerThrottledDesc, prometheus.CounterValue, h.Throttled.Seconds(), name)
		quarantined := 0.0
		if h.Quarantined {
			quarantined = 1
		}
		ch <- prometheus.MustNewConstMetric(handlerQuarantinedDesc, prometheus.GaugeValue, quarantined, name)
		ch <- prometheus.MustNewConstMetric(handlerQuarantinesDesc, prometheus.CounterValue, float64(h.Quarantines), name)
		for _, p := range h.Pins {
			ch <- prometheus.MustNewConstMetric(handlerPinnedDesc, prometheus.GaugeValue, 1,
				c.m.types.label(p.PluginType), labelValue(p.SHA256), fmt.Sprint(p.Auto))
		}
		for _, s := range h.Shadows {
			t, sum := c.m.types.label(s.PluginType), labelValue(s.SHA256)
			ch <- prometheus.MustNewConstMetric(handlerShadowRunsDesc, prometheus.CounterValue, float64(s.Runs), t, sum)
			ch <- prometheus.MustNewConstMetric(handlerShadowDisagreementsDesc, prometheus.CounterValue, float64(s.Disagreements), t, sum)
		}
	}
}

// typeLimiter bounds the distinct plugin_type label values.
type typeLimiter struct {
	mu   sync.Mutex
	max  int
	seen map[string]struct{}
}

// label returns the label value for plugin type t: t itself (made valid), "unknown" for an
// empty type, or "other" once max distinct types were seen.
func (l *typeLimiter) label(t string) string {
	if t == "" {
		return "unknown"
	}
	t = labelValue(t)
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.seen[t]; ok {
		return t
	}
	if len(l.seen) >= l.max {
		return "other"
	}
	l.seen[t] = struct{}{}
	return t
}

// maxLabelLen bounds a label value taken from outside (a plugin type, a socket path).
const maxLabelLen = 256

// labelValue makes s a valid, bounded label value: Prometheus refuses invalid UTF-8, and
// plugin types and socket paths are bytes from outside.
func labelValue(s string) string {
	if len(s) > maxLabelLen {
		s = s[:maxLabelLen]
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return s
}
