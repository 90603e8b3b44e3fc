package host

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/host/policy"
	"github.com/wasmhost/wasmhost/internal/host/sandbox"
	"github.com/wasmhost/wasmhost/internal/limits"
	"github.com/wasmhost/wasmhost/internal/registration"
)

// Config configures a Host. The zero value is usable: every field has a default.
type Config struct {
	// HandlerDir is the directory Run loads *.wasm handler modules from and watches for
	// changes (not recursively). Defaults to DefaultHandlerDir.
	HandlerDir string

	// CacheDir keeps wazero's compiled code between runs, so a restarted daemon loads its
	// handlers without compiling them again. It is created with mode 0700 and refused when
	// group or other can access it or another user owns it: wazero runs what it reads there
	// without validating it again. Defaults to "": compiled code is cached in memory only.
	CacheDir string

	// Registry receives one handler per plugin type that a loaded module declares. Defaults
	// to a new empty registry, available from (*Host).Registry.
	Registry *registration.Registry

	// CallTimeout bounds every call into a handler module, including the wait for a free
	// instance. A call that runs over is interrupted and its instance thrown away. Defaults
	// to 5 seconds.
	CallTimeout time.Duration

	// MemoryLimit is the most linear memory one instance may have, in bytes, rounded down to
	// whole 64 KiB pages. A module whose declared memory minimum is over it is refused at
	// load; memory.grow past it fails. Defaults to 64 MiB.
	MemoryLimit int64

	// PoolSize is the most instances of one module that run at once (one call at a time
	// each). Instances are created when calls need them. Defaults to runtime.NumCPU().
	PoolSize int

	// Grants maps a plugin type to the capabilities (abi.Capability*) granted to the
	// handlers of that type. A module that imports a host function of a capability not
	// granted for every plugin type it declares is refused at load. Defaults to nil: nothing
	// is granted.
	Grants map[string][]string

	// Bindings give a plugin type to one handler: only the file, or only a module of the
	// digest, that its Binding names may serve it; another module that declares it is refused
	// (RefusedNotBound), whatever the order in which they arrive. Without a binding, a type
	// belongs to the file that serves it first: a file that declares it later is refused, and
	// of the files present at start the one that served it before the restart (the revision
	// store remembers), else the first by name, takes it. Defaults to nil: no binding.
	Bindings map[string]policy.Binding

	// AllowInsecure loads handler files, and reads a handler directory, that are writable
	// by group or other or owned by a user other than the daemon's. It does not apply to
	// CacheDir. Defaults to false: such files are refused.
	AllowInsecure bool

	// PluginCaller serves the plugin_call host function. Defaults to nil: the
	// abi.CapabilityPluginCall capability cannot be granted (New fails if it is).
	PluginCaller sandbox.PluginCaller

	// PluginCallPolicy, if set, decides whether plugin_call may dial endpoint for the plugin
	// of pluginType registered from socket: it returns the path to dial (symlinks resolved,
	// so that what was checked is what is dialled) or an error saying why not, which the
	// guest reads with error_read (the call returns CodeDenied). Defaults to nil: any
	// endpoint (the conformance kit and `wasmhost handler test` use a fixture).
	PluginCallPolicy func(pluginType, socket, endpoint string) (string, error)

	// Recorder, if set, receives what the plugin calls of the types it records exchanged with
	// the host, and their results (sandbox.Recorder): the daemon's session capture, `wasmhost handler
	// test --record`. Defaults to nil: nothing is recorded.
	Recorder sandbox.Recorder

	// Tracer, if set, traces each handler call (wasmhost.call.<export>: its CPU, memory, host
	// calls and result code) under the caller's span, and each load, replacement and removal
	// of a handler file (wasmhost.reload), a trace of its own (internal/tracing). Defaults to
	// nil: none.
	Tracer trace.Tracer

	// OnChange, if set, is called from Run's goroutine after each step of following the
	// handler directory (a load, a replacement, a removal, a refusal), so that the caller can
	// publish Handlers() at once; it must be quick and must not call back into Run. The
	// daemon publishes the handler set into its state store with it. Defaults to nil.
	OnChange func()

	// RetireGrace is how long the handler of a plugin type keeps working after its module
	// file was removed (it is no longer in the registry), so that the plugins of that type
	// can still be deregistered through it. Defaults to 1 minute.
	RetireGrace time.Duration

	// RemovalGrace is how long a handler file must stay gone before Run removes it (its plugin
	// types leave the registry): a file that comes back within it (unlinked and created again
	// by install, its directory deleted and made again) is a replacement, not a removal. A
	// deleted handler directory counts as the removal of every file in it. Defaults to 10 s.
	RemovalGrace time.Duration

	// Debounce is how long a handler file must not have changed (its size, modification
	// time, inode) before Run loads it: a file being written is complete once it is quiet. A
	// file that arrives whole (renamed into place, a ConfigMap update) and was written before
	// is loaded at once. A load that fails while the file still changes is tried again
	// quietly; only a file that stays broken is refused. Defaults to 100 ms.
	Debounce time.Duration

	// Resync is the interval of Run's periodic re-scan of HandlerDir, which repairs anything
	// the file watcher missed. Defaults to 1 minute.
	Resync time.Duration

	// FollowDir starts following HandlerDir for Run, with a pass due every resync after one
	// that succeeded and every retry after one that failed: internal/watcher's FollowDir, on
	// inotify, which the daemon gives. The host does not import a file watcher itself, so that
	// what builds a host only to load modules by path (the conformance kit, `wasmhost handler
	// test`) links none. Defaults to nil: Run fails (New, Load and calls do not need it).
	FollowDir func(dir string, resync, retry time.Duration) (DirFollower, error)

	// Limits bound what loading a handler file, and each of its calls, may cost: the table of
	// handlers.limits, read from the config file (internal/limits). Zero fields take their
	// defaults (limits.Defaults); GuestThreads zero is sandbox.DefaultGuestThreads.
	Limits limits.Handler

	// Quarantine stops calling a handler that keeps trapping or timing out: handlers.quarantine
	// (internal/limits), After 0 disabling it. A zero Backoff or MaxBackoff takes its default.
	// Defaults to nil: limits.DefaultQuarantine().
	Quarantine *limits.Quarantine

	// Logger receives the host's logs and the handlers' (guest log lines and captured
	// stdout/stderr). Defaults to nil: logs are discarded.
	Logger *slog.Logger
}

// Defaults.
const (
	DefaultHandlerDir  = "/etc/wasmhost/handlers"
	DefaultRetireGrace = time.Minute
	// DefaultRemovalGrace is the default of Config.RemovalGrace.
	DefaultRemovalGrace = 10 * time.Second
	DefaultDebounce     = 100 * time.Millisecond
	DefaultResync       = time.Minute
)

// withDefaults returns c with defaults filled in, or an error naming the field that is wrong.
func (c Config) withDefaults() (Config, error) {
	if c.HandlerDir == "" {
		c.HandlerDir = DefaultHandlerDir
	}
	if c.Registry == nil {
		c.Registry = registration.NewRegistry()
	}
	if c.RetireGrace == 0 {
		c.RetireGrace = DefaultRetireGrace
	}
	if c.RemovalGrace == 0 {
		c.RemovalGrace = DefaultRemovalGrace
	}
	if c.Debounce == 0 {
		c.Debounce = DefaultDebounce
	}
	if c.Resync == 0 {
		c.Resync = DefaultResync
	}
	if c.RetireGrace < 0 || c.RemovalGrace < 0 || c.Debounce < 0 || c.Resync < 0 {
		return c, fmt.Errorf("host: Config.RetireGrace, RemovalGrace, Debounce and Resync must not be negative")
	}
	// The sandbox's fields: its defaults and checks, the one place of them.
	sc, err := c.sandboxConfig().WithDefaults()
	if err != nil {
		return c, err
	}
	c.CallTimeout, c.MemoryLimit, c.PoolSize, c.Limits = sc.CallTimeout, sc.MemoryLimit, sc.PoolSize, sc.Limits
	// A copy: the caller's is not changed.
	dq := limits.DefaultQuarantine()
	q := &dq
	if c.Quarantine != nil {
		q = new(limits.Quarantine)
		*q = *c.Quarantine
	}
	c.Quarantine = q
	if q.Backoff == 0 {
		q.Backoff = dq.Backoff
	}
	if q.MaxBackoff == 0 {
		q.MaxBackoff = max(dq.MaxBackoff, q.Backoff)
	}
	if q.After < 0 || q.Backoff < 0 || q.MaxBackoff < q.Backoff {
		return c, fmt.Errorf("host: Config.Quarantine: After %d must not be negative (0 disables it), Backoff %v must be positive and at most MaxBackoff %v",
			q.After, q.Backoff, q.MaxBackoff)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	types := make([]string, 0, len(c.Grants))
	for t := range c.Grants {
		types = append(types, t)
	}
	sort.Strings(types)
	grants := make(map[string][]string, len(c.Grants))
	for _, t := range types {
		for _, capName := range c.Grants[t] {
			if _, ok := abi.CapabilityImports[capName]; !ok {
				return c, fmt.Errorf("host: Config.Grants[%q]: unknown capability %q (known: %v)", t, capName, knownCapabilities())
			}
			if capName == abi.CapabilityPluginCall && c.PluginCaller == nil {
				return c, fmt.Errorf("host: Config.Grants[%q]: capability %q needs Config.PluginCaller, which is nil", t, capName)
			}
			if !slices.Contains(grants[t], capName) {
				grants[t] = append(grants[t], capName)
			}
		}
	}
	c.Grants = grants
	return c, nil
}

func knownCapabilities() []string {
	out := make([]string, 0, len(abi.CapabilityImports))
	for k := range abi.CapabilityImports {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// sandboxConfig is what the sandbox uses of c (with its defaults).
func (c *Config) sandboxConfig() sandbox.Config {
	return sandbox.Config{
		CacheDir:         c.CacheDir,
		CallTimeout:      c.CallTimeout,
		MemoryLimit:      c.MemoryLimit,
		PoolSize:         c.PoolSize,
		Grants:           c.Grants,
		AllowInsecure:    c.AllowInsecure,
		PluginCaller:     c.PluginCaller,
		PluginCallPolicy: c.PluginCallPolicy,
		Recorder:         c.Recorder,
		Limits:           c.Limits,
		Logger:           c.Logger,
		Tracer:           c.Tracer,
	}
}
