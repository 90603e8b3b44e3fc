// Package config is the daemon's configuration: every key, its default, the YAML file and its
// checks. cmd/wasmhost fills one Config from the file and the flags; internal/daemon takes it.
// Not a stable API: the file format (docs/configuration.md) is the contract.
package config

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/host"
	"github.com/wasmhost/wasmhost/internal/host/sandbox"
	"github.com/wasmhost/wasmhost/internal/limits"
	"github.com/wasmhost/wasmhost/internal/metrics"
	"github.com/wasmhost/wasmhost/internal/reconciler"
	"github.com/wasmhost/wasmhost/internal/registration/registrar"
	"github.com/wasmhost/wasmhost/internal/watcher"
)

// Config is everything the daemon can be told, from the config file and then the flags.
// docs/configuration.md documents every key; the defaults are in Default.
type Config struct {
	// APIVersion is the version of the file's format, as in a Kubernetes object: the only one
	// is wasmhost.dev/v1alpha1 (APIVersion). Required in a file.
	APIVersion string `yaml:"apiVersion"`
	// Kind is always WasmhostConfiguration (Kind). Required in a file.
	Kind string `yaml:"kind"`

	// SocketDir is where plugins create their registration sockets. Defaults to
	// /var/lib/wasmhost/plugins_registry. Never the kubelet's own plugins_registry.
	SocketDir string `yaml:"socketDir"`
	// HandlerDir holds the .wasm handlers. Defaults to /etc/wasmhost/handlers.
	HandlerDir string `yaml:"handlerDir"`
	// StateDir holds the compile cache and the admin socket. Defaults to /var/lib/wasmhost.
	StateDir string `yaml:"stateDir"`
	// ShutdownTimeout bounds a graceful shutdown; past it the daemon exits. Defaults to 10s.
	ShutdownTimeout Duration `yaml:"shutdownTimeout"`
	// MemoryLimit is the daemon's soft memory limit (Go's GOMEMLIMIT): past it the garbage
	// collector works harder rather than let the heap grow into an OOM kill. Defaults to 0:
	// 90% of the cgroup's memory.max when one is set, less handlers.limits.instanceMemory
	// (instances are mapped outside the Go heap), else none. GOMEMLIMIT in the environment
	// wins over both.
	MemoryLimit ByteSize `yaml:"memoryLimit"`

	Log          LogConfig          `yaml:"log"`
	Watcher      WatcherConfig      `yaml:"watcher"`
	Reconciler   ReconcilerConfig   `yaml:"reconciler"`
	Registration RegistrationConfig `yaml:"registration"`
	Handlers     HandlersConfig     `yaml:"handlers"`
	Admin        AdminConfig        `yaml:"admin"`
	Metrics      MetricsConfig      `yaml:"metrics"`
	// Publish takes what handlers publish to the cluster (publish.go).
	Publish PublishConfig `yaml:"publish"`
	// Forward presents the plugins of some types to the kubelet once their handlers admitted
	// them (forward.go). Defaults to off.
	Forward ForwardConfig `yaml:"forward"`
	// Tracing exports spans of every registration to an OpenTelemetry collector, as the
	// kubelet's tracing section does (tracing.go). Defaults to off.
	Tracing TracingConfig `yaml:"tracing"`

	// lines maps each key set in the file Load read to its line, for Validate's messages.
	lines map[string]int
}

// LogConfig sets the daemon's log output.
type LogConfig struct {
	// Format is auto (coloured text on a terminal, JSON otherwise), text or json. Defaults to auto.
	Format string `yaml:"format"`
	// Level is debug, info, warn or error. Defaults to info.
	Level string `yaml:"level"`
}

// WatcherConfig tunes the socket directory watcher.
type WatcherConfig struct {
	// Resync is the period of the safety-net re-list of the socket tree; 0 disables it.
	// Defaults to 5m. Any watcher error triggers a re-list at once regardless.
	Resync Duration `yaml:"-"` // a constant, not a key (was resync; docs/configuration.md, "Constants")
}

// ReconcilerConfig tunes the reconciler.
type ReconcilerConfig struct {
	// Resync is the period of the safety-net full pass. Defaults to 1m.
	Resync Duration `yaml:"-"` // a constant, not a key (was resync; docs/configuration.md, "Constants")
	// InitialBackoff is the first retry delay after a failed operation. Defaults to 500ms.
	InitialBackoff Duration `yaml:"-"` // a constant, not a key (was initialBackoff; docs/configuration.md, "Constants")
	// MaxBackoff caps the doubling retry delay. Defaults to 2m2s.
	MaxBackoff Duration `yaml:"-"` // a constant, not a key (was maxBackoff; docs/configuration.md, "Constants")
	// MaxConcurrent bounds the operations running at once that are not stalled (an operation
	// waiting longer than 20ms on a plugin that does not answer stops counting; see
	// docs/configuration.md, "Constants"), and the registrations in their handler phase (past
	// GetInfo) at once across all plugin types. Defaults to 64.
	MaxConcurrent int `yaml:"maxConcurrent"`
	// RejectedRecheck is how long a plugin its handler rejected waits before it is asked
	// again when nothing that could change the answer changed (its handler, its socket, a
	// plugin of the same type and name going away: those ask again at once). Defaults to 5m.
	RejectedRecheck Duration `yaml:"-"` // a constant, not a key (was rejectedRecheck; docs/configuration.md, "Constants")
	// MaxPerType bounds the registrations of one plugin type in their handler phase at once,
	// so that a slow type (a handler that loops or times out) cannot take every slot from
	// the others. Defaults to 16.
	MaxPerType int `yaml:"-"` // a constant, not a key (was maxPerType; docs/configuration.md, "Constants")
}

// RegistrationConfig bounds the calls to plugins.
type RegistrationConfig struct {
	// DialTimeout bounds connecting to a plugin socket. Defaults to 10s.
	DialTimeout Duration `yaml:"-"` // a constant, not a key (was dialTimeout; docs/configuration.md, "Constants")
	// GetInfoTimeout bounds the GetInfo call. Defaults to 5s.
	GetInfoTimeout Duration `yaml:"getInfoTimeout"`
	// NotifyTimeout bounds each NotifyRegistrationStatus call. Defaults to 5s.
	NotifyTimeout Duration `yaml:"notifyTimeout"`
}

// HandlersConfig sets the WebAssembly sandbox.
type HandlersConfig struct {
	// CallTimeout bounds every handler call. Defaults to 5s.
	CallTimeout Duration `yaml:"callTimeout"`
	// MemoryLimit caps each handler instance's linear memory, 64Ki to 4Gi. Defaults to 64Mi.
	MemoryLimit ByteSize `yaml:"memoryLimit"`
	// PoolSize is the number of instances kept per handler. Defaults to the number of CPUs.
	PoolSize int `yaml:"poolSize"`
	// AllowInsecure loads handler files and directories that others than their owner may
	// write. Defaults to false.
	AllowInsecure bool `yaml:"allowInsecure"`
	// RemovalGrace is how long a handler file must stay gone from the handler directory
	// before its plugin types are removed (their plugins deregistered): a file that is back
	// within it (install's unlink and create, the directory deleted and made again) is
	// replaced, not removed. Defaults to 10s.
	RemovalGrace Duration `yaml:"-"` // a constant, not a key (was removalGrace; docs/configuration.md, "Constants")
	// Types Grants capabilities per plugin type. Defaults to none: deny by default.
	Types map[string]TypeConfig `yaml:"types"`
	// Limits bound what a handler may cost: to load, and in each call (internal/limits).
	Limits limits.Handler `yaml:"limits"`
	// Quarantine sets aside a handler that keeps trapping or timing out (internal/limits).
	Quarantine limits.Quarantine `yaml:"quarantine"`
	// Revisions are the revisions kept of each plugin type's handler, and automatic rollback
	// (revisions.go).
	Revisions RevisionsConfig `yaml:"revisions"`
	// Sources are handler modules pulled from OCI registries, each a reference pinned by
	// digest (a tag is resolved once and pinned); served like the files of HandlerDir once
	// the signature policy (Trust) admits them. Defaults to none.
	Sources []string `yaml:"sources"`
	// Trust is the signature policy of Sources (sources.go).
	Trust TrustConfig `yaml:"trust"`
	// Pull is how Sources are pulled (sources.go).
	Pull PullConfig `yaml:"pull"`
	// Capture is what is kept of the registrations handlers served (capture.go).
	Capture CaptureConfig `yaml:"capture"`
}

// TypeConfig is what the operator Grants the handlers of one plugin type.
type TypeConfig struct {
	// Capabilities the handler of this type may import, e.g. [plugin_call]. Defaults to none.
	Capabilities []string `yaml:"capabilities"`
	// PluginCallEndpoints are the path prefixes (directories) under which plugin_call may
	// dial a plugin's endpoint besides the plugin's own registration socket, e.g.
	// [/var/lib/kubelet/plugins/] for CSI drivers. Never the daemon's own sockets. Defaults to
	// none: a handler may call only the socket its plugin registered from.
	PluginCallEndpoints []string `yaml:"pluginCallEndpoints"`
	// File binds the type to one file of the handler directory (a name such as csi.wasm):
	// only it may serve the type, whatever other files declare it. Defaults to "": the first
	// file to serve the type keeps it, across restarts (at start, a type nobody served goes to
	// the first file by name).
	File string `yaml:"file"`
	// Digest binds the type to one module, by the SHA-256 of its bytes (sha256:<hex> or
	// <hex>), from the handler directory or handlers.sources: only it may serve the type.
	// Defaults to "".
	Digest string `yaml:"digest"`
	// Shadow names a candidate for the type: a handler file's absolute path, or sha256:<hex>
	// of a kept revision. Its Validate runs beside the serving one on every registration,
	// without effect; disagreements are counted and logged. Defaults to "": none.
	Shadow string `yaml:"shadow"`
	// Publish is what of the type's published keys reaches the cluster, and as what
	// (publish.go). Defaults to nothing.
	Publish TypePublish `yaml:"publish"`
	// Capture: false keeps the type's registrations out of the sessions the daemon captures
	// (handlers.capture), for a type whose plugins answer with secrets. Defaults to true.
	Capture *bool `yaml:"capture"`
}

// AdminConfig places the admin API.
type AdminConfig struct {
	// Socket is the admin API's unix socket (mode 0600). Defaults to <stateDir>/admin.sock.
	Socket string `yaml:"socket"`
}

// MetricsConfig places the Prometheus and health endpoints.
type MetricsConfig struct {
	// Listen is "off", "unix:/path", or host:port. Defaults to 127.0.0.1:9436.
	Listen string `yaml:"listen"`
	// MaxConnections bounds the connections served at once (more wait in the listen
	// backlog), so that a local user cannot take the daemon's file descriptors. Defaults to 64.
	MaxConnections int `yaml:"-"` // a constant, not a key (was maxConnections; docs/configuration.md, "Constants")
}

func Default() Config {
	return Config{
		APIVersion:      APIVersion,
		Kind:            Kind,
		SocketDir:       "/var/lib/wasmhost/plugins_registry",
		HandlerDir:      host.DefaultHandlerDir,
		StateDir:        "/var/lib/wasmhost",
		ShutdownTimeout: Duration(10 * time.Second),
		Log:             LogConfig{Format: "auto", Level: "info"},
		Watcher:         WatcherConfig{Resync: Duration(watcher.DefaultResync)},
		Reconciler: ReconcilerConfig{
			Resync:          Duration(reconciler.DefaultResync),
			InitialBackoff:  Duration(reconciler.DefaultInitialBackoff),
			MaxBackoff:      Duration(reconciler.DefaultMaxBackoff),
			MaxConcurrent:   reconciler.DefaultMaxConcurrent,
			MaxPerType:      reconciler.DefaultMaxPerType,
			RejectedRecheck: Duration(reconciler.DefaultRecheckRejected),
		},
		Registration: RegistrationConfig{
			DialTimeout:    Duration(registrar.DefaultDialTimeout),
			GetInfoTimeout: Duration(registrar.DefaultGetInfoTimeout),
			NotifyTimeout:  Duration(registrar.DefaultNotifyTimeout),
		},
		Handlers: HandlersConfig{
			CallTimeout:  Duration(sandbox.DefaultCallTimeout),
			MemoryLimit:  sandbox.DefaultMemoryLimit,
			RemovalGrace: Duration(host.DefaultRemovalGrace),
			Limits:       limits.Defaults(),
			Quarantine:   limits.DefaultQuarantine(),
			Revisions:    DefaultRevisions(),
			Pull:         DefaultPull(),
			Capture:      DefaultCapture(),
		},
		Metrics: MetricsConfig{Listen: metrics.DefaultAddr, MaxConnections: metrics.DefaultMaxConnections},
		Publish: DefaultPublish(),
	}
}

// Validate checks the config as a whole and names the key of every mistake.
// Each mistake is a *Problem: the key, the flag that sets it if there is one, and the line of
// the file Load read it from, if it did.
func (c *Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, &Problem{Line: c.lines[key], Key: key, Msg: fmt.Sprintf(format, args...)})
	}
	for key, v := range map[string]string{"socketDir": c.SocketDir, "handlerDir": c.HandlerDir, "stateDir": c.StateDir} {
		if v == "" {
			bad(key, "must not be empty")
		}
	}
	if strings.HasSuffix(strings.TrimSuffix(c.SocketDir, "/"), "/kubelet/plugins_registry") {
		bad("socketDir", "%s is the kubelet's own socket directory: give wasmhost a directory of its own", c.SocketDir)
	}
	positive := map[string]Duration{
		"shutdownTimeout":             c.ShutdownTimeout,
		"registration.getInfoTimeout": c.Registration.GetInfoTimeout,
		"registration.notifyTimeout":  c.Registration.NotifyTimeout,
		"handlers.callTimeout":        c.Handlers.CallTimeout,
	}
	for key, d := range positive {
		if d <= 0 {
			bad(key, "must be a positive duration, got %s", time.Duration(d))
		}
	}
	if c.Reconciler.MaxConcurrent < 1 {
		bad("reconciler.maxConcurrent", "must be at least 1, got %d", c.Reconciler.MaxConcurrent)
	}
	if c.Handlers.MemoryLimit < 64<<10 || c.Handlers.MemoryLimit > 4<<30 {
		bad("handlers.memoryLimit", "must be between 64Ki and 4Gi, got %s", c.Handlers.MemoryLimit)
	}
	c.Handlers.validateLimits(bad)
	c.Handlers.validateRevisions(bad)
	c.Handlers.validateSources(bad)
	c.Handlers.validateCapture(bad)
	c.validatePublish(bad)
	c.validateForward(bad)
	c.validateTracing(bad)
	if c.Handlers.PoolSize < 0 {
		bad("handlers.poolSize", "must not be negative (0 means one per CPU), got %d", c.Handlers.PoolSize)
	}
	for typ, tc := range c.Handlers.Types {
		if typ == "" {
			bad("handlers.types", "a plugin type must not be empty")
		}
		for _, capName := range tc.Capabilities {
			if _, ok := abi.CapabilityImports[capName]; !ok {
				bad("handlers.types."+typ+".capabilities", "unknown capability %q (known: %s)", capName, strings.Join(KnownCapabilities(), ", "))
			}
		}
		for _, prefix := range tc.PluginCallEndpoints {
			p := strings.TrimPrefix(strings.TrimPrefix(prefix, "unix://"), "unix:")
			if !filepath.IsAbs(p) || filepath.Clean(p) == "/" {
				bad("handlers.types."+typ+".pluginCallEndpoints", "%q: want an absolute directory other than / (a path, or unix:// and a path)", prefix)
			}
		}
		if f := tc.File; f != "" && (strings.ContainsRune(f, '/') || strings.HasPrefix(f, ".") || !strings.HasSuffix(f, ".wasm")) {
			bad("handlers.types."+typ+".file", "%q: want the name of a *.wasm file of the handler directory, such as csi.wasm", f)
		}
		if d := strings.TrimPrefix(tc.Digest, "sha256:"); tc.Digest != "" && !isHex64(d) {
			bad("handlers.types."+typ+".digest", "%q: want sha256: and 64 hex digits", tc.Digest)
		}
	}
	switch strings.ToLower(c.Log.Format) {
	case "auto", "text", "json":
	default:
		bad("log.format", "want auto, text or json, got %q", c.Log.Format)
	}
	switch strings.ToLower(c.Log.Level) {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", "want debug, info, warn or error, got %q", c.Log.Level)
	}
	if l := c.Metrics.Listen; l != "" && l != "off" && !strings.HasPrefix(l, "unix:") && !strings.Contains(l, ":") {
		bad("metrics.listen", "want off, unix:/path or host:port, got %q", l)
	}
	return joinProblems(errs)
}

// AbsolutePaths makes the directories absolute, so that logs and the admin socket name them
// the same way whatever the working directory.
func (c *Config) AbsolutePaths() error {
	if err := c.Handlers.absoluteKeyPaths(); err != nil {
		return err
	}
	for _, p := range []*string{&c.SocketDir, &c.HandlerDir, &c.StateDir, &c.Admin.Socket, &c.Publish.FeatureFile.Dir, &c.Publish.Kubeconfig, &c.Forward.KubeletDir} {
		if *p == "" {
			continue
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return fmt.Errorf("config: %s: %w", *p, err)
		}
		*p = abs
	}
	return nil
}

// Grants returns the capabilities granted per plugin type.
func (c *Config) Grants() map[string][]string {
	out := make(map[string][]string, len(c.Handlers.Types))
	for typ, tc := range c.Handlers.Types {
		out[typ] = slices.Clone(tc.Capabilities)
	}
	return out
}

// isHex64 reports whether s is 64 hex digits, a SHA-256.
func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
			return false
		}
	}
	return true
}

// AdminSocket returns the admin socket path, defaulted under the state directory.
func (c *Config) AdminSocket() string {
	if c.Admin.Socket != "" {
		return c.Admin.Socket
	}
	return strings.TrimSuffix(c.StateDir, "/") + "/admin.sock"
}

func KnownCapabilities() []string {
	var out []string
	for k := range abi.CapabilityImports {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Duration and ByteSize are how the config file and the flags write a duration ("500ms") and a
// size ("64Mi"): the units of the handler limits, defined beside them (internal/limits) so that
// the host reads the same table.
type (
	Duration = limits.Duration
	ByteSize = limits.ByteSize
)
