// Package host runs the WebAssembly handlers of wasmhost: it loads handler modules (.wasm
// files that implement the ABI of package abi) with wazero, validates them before they
// serve, and registers one registration.Handler per plugin type in a registration.Registry.
// Run keeps the registry in step with a handler directory: modules added, replaced or
// removed there are loaded, swapped or retired while the daemon runs.
//
// Every module runs in its own wazero runtime with a memory limit, every call has a deadline,
// and a module gets no filesystem, environment, network or real clock; host functions that
// reach outside (plugin_call) are granted per plugin type by configuration.
//
// The host does three jobs, in three packages, in the order a call meets them from below:
//
//   - the sandbox (package sandbox, internal/host/sandbox): what a host's modules share (the
//     compile cache, the turns to run guest code, instance memory, the key-value stores), a
//     module loaded, its pool of instances, a call of one of its exports under its deadline,
//     CPU and budgets, and the host functions; `wasmhost handler inspect`'s report of a module
//     described in it is package inspect's (internal/host/inspect), beside it;
//   - the policy layer over it (package policy, internal/host/policy): what serves a plugin
//     type's calls, and the policies of a handler's revisions and failures, rollback pins,
//     shadow runs and quarantine;
//   - here, the reloader: the handler directory followed, its files loaded, swapped and
//     retired behind their types' handlers (dir.go); and the Host that holds the three
//     (host.go; config.go its configuration).
//
// Each imports only those below it: the sandbox nothing of the others (it reaches the
// layer only through the policy it is given for a call, sandbox.Policy), the policy layer
// nothing of this package; internal/daemon's layout_test.go keeps it so. Callers take the
// sandbox's and the layer's names from their packages.
//
// This package is part of the wasmhost daemon, not a stable API.
package host

import (
	"context"
	"log/slog"
	"maps"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wasmhost/wasmhost/internal/host/inspect"
	"github.com/wasmhost/wasmhost/internal/host/policy"
	"github.com/wasmhost/wasmhost/internal/host/sandbox"
	"github.com/wasmhost/wasmhost/internal/registration"
)

// Host loads and runs handler modules. Create it with New; it is safe for concurrent use.
//
// It holds the sandbox (package sandbox: what its modules share), the policy layer over it
// (package policy: its revisions, rollbacks, shadows, whose methods are the Host's), and the
// handler directory's reloader (dir.go).
type Host struct {
	*policy.Layer                  // the policy layer (package policy)
	sb            *sandbox.Sandbox // the sandbox: what the host's modules share (package sandbox)
	cfg           Config           // with its defaults
	log           *slog.Logger

	ready     chan struct{}
	readyOnce sync.Once
	running   atomic.Bool

	// The reloader's (dir.go), under mu; the sandbox's state is under a mutex of its own.
	mu       sync.Mutex
	files    map[string]*fileEntry // Run's handler files by name
	refusals map[string]uint64     // refused handler files by reason
	dirErr   string                // why the handler directory is refused now
}

// New returns a Host for cfg. ctx is used only while New runs.
func New(ctx context.Context, cfg Config) (*Host, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	sb, err := sandbox.New(ctx, cfg.sandboxConfig())
	if err != nil {
		return nil, err
	}
	h := &Host{
		sb:       sb,
		cfg:      cfg,
		log:      cfg.Logger,
		ready:    make(chan struct{}),
		files:    make(map[string]*fileEntry),
		refusals: make(map[string]uint64),
	}
	h.Layer = policy.New(sb, policy.Config{
		Registry: cfg.Registry, Bindings: cfg.Bindings, Quarantine: cfg.Quarantine,
		OnChange: cfg.OnChange, PoolSize: cfg.PoolSize, Logger: cfg.Logger,
	})
	return h, nil
}

// Registry returns the registry the host registers its handlers in.
func (h *Host) Registry() *registration.Registry { return h.cfg.Registry }

// Ready returns a channel closed once Run has loaded or refused the handler files present
// when it started (or has returned).
func (h *Host) Ready() <-chan struct{} { return h.ready }

// LoadFile loads the module at path: it checks the file's permissions, compiles it,
// checks its exports and imports, instantiates it once and reads its ABI version and
// manifest. The Module is not registered anywhere; it handles calls for its plugin types
// until the caller closes it (or the host is closed).
func (h *Host) LoadFile(ctx context.Context, path string) (*sandbox.Module, error) {
	if !h.sb.BeginWork() {
		return nil, sandbox.ErrClosed
	}
	defer h.sb.EndWork()
	bin, err := h.sb.ReadHandlerFile(path)
	if err != nil {
		return nil, err
	}
	m, err := h.sb.Load(ctx, path, bin, new(sandbox.Stats))
	if err != nil {
		return nil, err
	}
	m.SetOwn(h.NewServing(m, nil, nil))
	return m, nil
}

// Close stops Run, closes every module (waiting until ctx is done for calls in progress
// to return, then closing them anyway) and the compilation cache. It is idempotent.
func (h *Host) Close(ctx context.Context) error { return h.sb.Close(ctx) }

// The sandbox's, for tools and the daemon: see package sandbox.

// PruneCache removes the cache directories of the modules that are not loaded, nor being
// loaded, and what the cache's former layout left at its top. Run calls it once the handlers
// present at start have loaded. It returns how many directories it removed.
func (h *Host) PruneCache() int { return h.sb.PruneCache() }

// AbandonedCompiles returns how many compiles were abandoned at their deadline and are still
// running, and how many were abandoned since the host was made.
func (h *Host) AbandonedCompiles() (running int, total uint64) { return h.sb.AbandonedCompiles() }

// Store returns a copy of the key-value store of pluginType as its handlers see it (nil when
// nothing was ever stored for that type). It is for tools and tests; the daemon does not use it.
func (h *Host) Store(pluginType string) map[string][]byte { return h.sb.Store(pluginType) }

// SetStore replaces the key-value store of pluginType with a copy of kv, as a session recorded
// it before a call (`wasmhost handler test --replay`). It is for tools; the daemon does not
// use it. The store is charged to the next handler that writes it.
func (h *Host) SetStore(pluginType string, kv map[string][]byte) { h.sb.SetStore(pluginType, kv) }

// Inspect reports what bin (a module named name in messages) exports and imports, with
// signatures, and what its abi_version and manifest exports answer, described in the host's
// sandbox (package inspect: the host's memory limit and call timeout, stub host functions).
// Unlike LoadFile it neither checks grants nor permissions, and a module it can describe may
// still be refused: load it to know. The error (sandbox.ErrBadModule) is for bytes that are not
// a WebAssembly module at all.
func (h *Host) Inspect(ctx context.Context, name string, bin []byte) (*inspect.Report, error) {
	return inspect.Inspect(ctx, h.sb, name, bin)
}

// HandlerStatus describes one handler file of the handler directory.
type HandlerStatus struct {
	File         string    // path of the file
	PluginTypes  []string  // the types it handles (none when it never loaded)
	Name         string    // the manifest's name
	Version      string    // the manifest's version
	SHA256       string    // of the module serving (hex)
	Size         int64     // of the module serving, in bytes
	ABIVersion   uint32    // of the module serving
	Capabilities []string  // granted and used by the module serving
	LoadedAt     time.Time // when the module serving was loaded
	PoolSize     int       // the most instances of the module at once
	Instances    int       // instances now alive
	Serving      bool      // a module of this file serves calls
	Calls        uint64    // calls into validate, register, deregister (all versions)
	Rejected     uint64    // calls that returned abi.StatusRejected
	Failures     uint64    // calls that returned abi.StatusError or a bad result
	Traps        uint64    // calls that trapped
	Timeouts     uint64    // calls that ran over the deadline (or over their CPU budget)
	// CPU is the CPU time its guest code used (calls and instantiations, all versions);
	// Throttled, the time its calls waited for a turn to run guest code (Limits.GuestThreads).
	CPU, Throttled time.Duration
	LastError      string    // the last load or call error, if any
	LastErrorAt    time.Time // when
	// Refusal is the reason (sandbox.Refused*, or this package's Refused*) when LastError is a
	// refusal of the file (of its only version, or of an update while an older one serves), ""
	// otherwise.
	Refusal string
	// GoneSince is when the file went from the directory, zero while it is there: it is
	// removed (its plugin types leave the registry) at GoneSince + RemovalGrace unless it is
	// back by then.
	GoneSince time.Time

	// Quarantine: whether its calls fail at once after repeated traps or timeouts, until
	// when, and why (Config.Quarantine).
	Quarantine policy.QuarantineStatus
	// KVKeys and KVBytes are what the key-value stores of its plugin types hold, against
	// Limits.KVKeysPerHandler and KVBytesPerHandler.
	KVKeys  int
	KVBytes int64
}

// Handlers returns the status of the handler files Run manages, sorted by file.
func (h *Host) Handlers() []HandlerStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]HandlerStatus, 0, len(h.files))
	for _, e := range h.files {
		c := e.stats.Counts()
		s := HandlerStatus{
			File:      e.path,
			PoolSize:  h.cfg.PoolSize,
			Calls:     c.Calls,
			Rejected:  c.Rejected,
			Failures:  c.Failures,
			Traps:     c.Traps,
			Timeouts:  c.Timeouts,
			CPU:       c.CPU,
			Throttled: c.Throttled,
		}
		if e.cur != nil {
			m := e.cur.Module()
			s.PluginTypes = m.PluginTypes()
			s.Name, s.Version = m.Manifest().Name, m.Manifest().Version
			s.SHA256, s.Size, s.ABIVersion = m.SHA256(), m.Size(), m.ABIVersion()
			s.Capabilities = m.Capabilities()
			s.LoadedAt = m.LoadedAt()
			s.Instances = m.Instances()
			s.Serving = true
		}
		if last := c.Last; last != nil {
			s.LastError, s.LastErrorAt, s.Refusal = last.Msg, last.At, last.Refusal
		}
		s.GoneSince = e.goneSince
		s.Quarantine = e.q.Status()
		s.KVKeys, s.KVBytes = c.KVKeys, c.KVBytes
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].File < out[j].File })
	return out
}

// The reasons a handler file is refused that are the reloader's, beside the sandbox's when it
// loads a file (sandbox.Refused*), for the wasmhost_handler_refusals_total metric.
const (
	RefusedConflict  = "conflict"           // declares a plugin type another file handles
	RefusedNotBound  = "not_bound"          // declares a plugin type bound to another file or digest
	RefusedDirectory = "insecure_directory" // the handler directory became insecure
)

// countRefusal counts a refused handler file (or directory) by reason.
func (h *Host) countRefusal(reason string) {
	h.mu.Lock()
	h.refusals[reason]++
	h.mu.Unlock()
}

// Refusals returns how many times a handler file was refused since the host was made, by
// reason (the Refused* constants, the sandbox's and this package's): an update refused counts,
// a file refused again for the same bytes does not.
func (h *Host) Refusals() map[string]uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.refusals)
}

func (h *Host) setDirError(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dirErr = ""
	if err != nil {
		h.dirErr = err.Error()
	}
}

// DirectoryError says why no handler file is loaded from the handler directory now (its mode
// or owner became insecure while the daemon ran), or "".
func (h *Host) DirectoryError() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.dirErr
}
