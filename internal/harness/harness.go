// Package harness runs a handler module in the daemon's own sandbox (package host, with its
// limits, grants and host functions) and records what each call did: the outcome and reason,
// the handler's log lines, what it published, the plugin calls it made, the key-value store
// after the call, and the time the call took. It is what `wasmhost handler test` and the
// conformance kit (package conformance) are built on.
//
// It is internal, and not a stable API: its types are the daemon's (sandbox.Module,
// registration.PluginInfo). What handler authors use is package conformance, whose API has
// types of its own.
package harness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/wasmhost/wasmhost/internal/host"
	"github.com/wasmhost/wasmhost/internal/host/sandbox"
	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/session"
)

// Harness is a host of one's own, set up as the daemon sets up its host, whose logs and plugin
// calls are recorded. Calls through it run one at a time.
type Harness struct {
	host   *host.Host
	logs   *logRecorder
	caller *callRecorder
	rec    *recorder
	mu     sync.Mutex // one Do at a time: logs and plugin calls are per call
}

// New returns a Harness on a host of cfg, the host's config as the daemon sets it up
// (daemon.SandboxConfig: its limits, grants, call timeout, memory limit, plugin-call policy)
// or a zero one, whose every field has a default. The harness sets four fields itself: it
// loads modules by path (HandlerDir is never read), runs one call at a time (PoolSize 1), and
// records each call's logs (Logger) and host calls (Recorder). cfg.PluginCaller answers the
// plugin_call host function (a *conformance.Fixture, the daemon's registrar.PluginCaller, a
// fake), its calls recorded; nil: every plugin_call fails with "no plugin to call". Close
// the Harness when done.
func New(ctx context.Context, cfg host.Config) (*Harness, error) {
	caller := cfg.PluginCaller
	if caller == nil {
		caller = noCaller{}
	}
	hs := &Harness{logs: &logRecorder{}, caller: &callRecorder{next: caller}, rec: &recorder{}}
	cfg.HandlerDir = "/nonexistent" // never read: modules are loaded by path
	cfg.PoolSize = 1
	cfg.PluginCaller = hs.caller
	cfg.Recorder = hs.rec
	cfg.Logger = slog.New(hs.logs)
	h, err := host.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	hs.host = h
	return hs, nil
}

// Host returns the harness's host.
func (hs *Harness) Host() *host.Host { return hs.host }

// Close closes the host and every module loaded through it.
func (hs *Harness) Close(ctx context.Context) error { return hs.host.Close(ctx) }

// Load loads the module at path as the daemon would (host.(*Host).LoadFile), and returns it
// with the log lines of its loading (what its initialization wrote, and the host's verdict).
func (hs *Harness) Load(ctx context.Context, path string) (*sandbox.Module, []LogLine, error) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	hs.logs.take()
	m, err := hs.host.LoadFile(ctx, path)
	return m, hs.logs.take(), err
}

// Op is a handler call.
type Op string

// The handler calls, as the daemon makes them.
const (
	Validate   Op = "validate"
	Register   Op = "register"
	Deregister Op = "deregister"
)

// Outcome is how a call ended.
type Outcome string

const (
	// OK: the handler accepted the plugin (abi.StatusOK).
	OK Outcome = "ok"
	// Rejected: the handler refused the plugin (abi.StatusRejected); Reason is its reason.
	Rejected Outcome = "rejected"
	// Failed: the handler failed (abi.StatusError), trapped, ran over its deadline or gave a
	// bad answer; Reason is the host's error. The daemon retries such a call with backoff.
	Failed Outcome = "error"
)

// Step is what one call did.
type Step struct {
	Op      Op      `json:"op"`
	Outcome Outcome `json:"result"`
	// Reason is a rejection's reason, or the error of a failed call.
	Reason string `json:"reason,omitempty"`
	// Err is the error the call returned (nil when OK).
	Err error `json:"-"`
	// Trapped and TimedOut say why a failed call failed, when it did so.
	Trapped  bool `json:"trapped,omitempty"`
	TimedOut bool `json:"timed_out,omitempty"`
	// Published is what a successful register published.
	Published map[string]string `json:"published,omitempty"`
	// Store is the key-value store of the plugin's type after the call.
	Store map[string][]byte `json:"store"`
	// Logs are the log lines written during the call, the handler's and the host's.
	Logs []LogLine `json:"logs"`
	// PluginCalls are the plugin_call calls the handler made.
	PluginCalls []PluginCall `json:"plugin_calls,omitempty"`
	// Duration is how long the call took, as the daemon would wait for it.
	Duration time.Duration `json:"duration_ns"`
	// Record is the host's record of the call (what it saw of the store, its host-call exchanges, its
	// result), and Handler the module that made it: what a session keeps (replay.go).
	Record  *session.Call   `json:"-"`
	Handler session.Handler `json:"-"`
}

// Do makes call op about p on m, and records what it did.
func (hs *Harness) Do(ctx context.Context, m *sandbox.Module, op Op, p registration.PluginInfo) Step {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	hs.logs.take()
	hs.caller.take()
	hs.rec.take()
	st := Step{Op: op}
	start := time.Now()
	var err error
	switch op {
	case Validate:
		err = m.ValidatePlugin(ctx, p)
	case Register:
		st.Published, err = m.RegisterPlugin(ctx, p)
	case Deregister:
		err = m.DeRegisterPlugin(ctx, p)
	default:
		err = fmt.Errorf("harness: unknown op %q", op)
	}
	st.Duration = time.Since(start)
	st.Err = err
	switch {
	case err == nil:
		st.Outcome = OK
	case errors.Is(err, registration.ErrRejected):
		st.Outcome = Rejected
		st.Reason = strings.TrimPrefix(err.Error(), registration.ErrRejected.Error()+": ")
	default:
		st.Outcome = Failed
		st.Reason = err.Error()
		st.Trapped = errors.Is(err, sandbox.ErrTrap)
		st.TimedOut = errors.Is(err, context.DeadlineExceeded)
	}
	st.Store = hs.host.Store(p.Type)
	if st.Store == nil {
		st.Store = map[string][]byte{}
	}
	st.Logs = hs.logs.take()
	st.PluginCalls = hs.caller.take()
	st.Record, st.Handler = hs.rec.take()
	return st
}

// LogLine is one log record of a call.
type LogLine struct {
	Level string `json:"level"` // DEBUG, INFO, WARN, ERROR
	// Source is where it came from: "log" (the handler's log host function), "stdout" or
	// "stderr" (what the handler wrote there), or "host" (the host itself).
	Source  string `json:"source"`
	Message string `json:"message"`
	// Attrs are the host's attributes of a host line (an error, a method), without those that
	// name the handler, the plugin and the export.
	Attrs map[string]string `json:"attrs,omitempty"`
}

// String is the line as the tools print it: "INFO registered demo", "WARN stderr: ...",
// "DEBUG host: plugin_call failed error=...".
func (l LogLine) String() string {
	s := l.Level + " "
	if l.Source != "log" {
		s += l.Source + ": "
	}
	s += l.Message
	for _, k := range slices.Sorted(maps.Keys(l.Attrs)) {
		s += " " + k + "=" + l.Attrs[k]
	}
	return s
}

// logRecorder is the slog.Handler of the harness's host.
type logRecorder struct {
	mu    sync.Mutex
	lines []LogLine
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }

func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	l := LogLine{Level: rec.Level.String(), Source: "host", Message: rec.Message}
	rec.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "stream":
			l.Source = a.Value.String()
		case "handler", "plugin_type", "plugin", "export":
		default:
			if l.Attrs == nil {
				l.Attrs = map[string]string{}
			}
			l.Attrs[a.Key] = a.Value.String()
		}
		return true
	})
	if l.Source != "host" {
		l.Attrs = nil // the guest's own lines carry only the host's bookkeeping
	}
	r.mu.Lock()
	r.lines = append(r.lines, l)
	r.mu.Unlock()
	return nil
}

func (r *logRecorder) take() []LogLine {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.lines
	r.lines = nil
	if out == nil {
		out = []LogLine{}
	}
	return out
}

// PluginCall is one plugin_call a handler made.
type PluginCall struct {
	Endpoint      string `json:"endpoint"`
	Method        string `json:"method"`
	RequestBytes  int    `json:"request_bytes"`
	ResponseBytes int    `json:"response_bytes"`
	Error         string `json:"error,omitempty"`
}

// callRecorder records the plugin calls made through it.
type callRecorder struct {
	next   sandbox.PluginCaller
	mu     sync.Mutex
	calls  []PluginCall
	replay *replayCaller // answers instead of next during a replay
}

func (c *callRecorder) Call(ctx context.Context, endpoint, method string, req []byte, maxResp int) ([]byte, error) {
	c.mu.Lock()
	next := c.next
	if c.replay != nil {
		next = c.replay
	}
	c.mu.Unlock()
	resp, err := next.Call(ctx, endpoint, method, req, maxResp)
	pc := PluginCall{Endpoint: endpoint, Method: method, RequestBytes: len(req), ResponseBytes: len(resp)}
	if err != nil {
		pc.Error = err.Error()
	}
	c.mu.Lock()
	c.calls = append(c.calls, pc)
	c.mu.Unlock()
	return resp, err
}

func (c *callRecorder) take() []PluginCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.calls
	c.calls = nil
	return out
}

// noCaller fails every plugin call.
type noCaller struct{}

func (noCaller) Call(_ context.Context, endpoint, method string, _ []byte, _ int) ([]byte, error) {
	return nil, fmt.Errorf("harness: no plugin to call (%s on %s): give a fixture", method, endpoint)
}
