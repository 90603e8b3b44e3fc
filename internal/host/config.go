package host

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"sort"
	"time"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/registration"
)

// PluginCaller makes the unary gRPC calls of the plugin_call host function
// (abi.ImportPluginCall) to the endpoint of the plugin a handler is handling.
type PluginCaller interface {
	// Call invokes method (a full gRPC method name, "/package.Service/Method") on the plugin
	// serving at endpoint with the encoded request req, and returns the encoded response. A
	// response longer than maxResp bytes is an error. ctx carries the handler call's deadline.
	Call(ctx context.Context, endpoint, method string, req []byte, maxResp int) ([]byte, error)
}

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

	// AllowInsecure loads handler files, and reads a handler directory, that are writable
	// by group or other or owned by a user other than the daemon's. It does not apply to
	// CacheDir. Defaults to false: such files are refused.
	AllowInsecure bool

	// PluginCaller serves the plugin_call host function. Defaults to nil: the
	// abi.CapabilityPluginCall capability cannot be granted (New fails if it is).
	PluginCaller PluginCaller

	// OnChange, if set, is called from Run's goroutine after each step of following the
	// handler directory (a load, a replacement, a removal, a refusal), so that the caller can
	// publish Handlers() at once; it must be quick and must not call back into Run. The
	// daemon publishes the handler set into its state store with it. Defaults to nil.
	OnChange func()

	// RetireGrace is how long the handler of a plugin type keeps working after its module
	// file was removed (it is no longer in the registry), so that the plugins of that type
	// can still be deregistered through it. Defaults to 1 minute.
	RetireGrace time.Duration

	// Debounce is how long a handler file must be quiet after a write before Run loads it.
	// A file that arrives whole (by rename or a ConfigMap update) is loaded at once.
	// Defaults to 100 ms.
	Debounce time.Duration

	// Resync is the interval of Run's periodic re-scan of HandlerDir, which repairs anything
	// the file watcher missed. Defaults to 1 minute.
	Resync time.Duration

	// Logger receives the host's logs and the handlers' (guest log lines and captured
	// stdout/stderr). Defaults to nil: logs are discarded.
	Logger *slog.Logger
}

// Defaults.
const (
	DefaultHandlerDir  = "/etc/wasmhost/handlers"
	DefaultCallTimeout = 5 * time.Second
	DefaultMemoryLimit = 64 << 20
	DefaultRetireGrace = time.Minute
	DefaultDebounce    = 100 * time.Millisecond
	DefaultResync      = time.Minute
)

const pageSize = 65536

// withDefaults returns c with defaults filled in, or an error naming the field that is wrong.
func (c Config) withDefaults() (Config, error) {
	if c.HandlerDir == "" {
		c.HandlerDir = DefaultHandlerDir
	}
	if c.Registry == nil {
		c.Registry = registration.NewRegistry()
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	if c.CallTimeout < 0 {
		return c, fmt.Errorf("host: Config.CallTimeout %v is negative", c.CallTimeout)
	}
	if c.MemoryLimit == 0 {
		c.MemoryLimit = DefaultMemoryLimit
	}
	if c.MemoryLimit < pageSize || c.MemoryLimit > 65536*pageSize {
		return c, fmt.Errorf("host: Config.MemoryLimit %d is not between 64 KiB and 4 GiB", c.MemoryLimit)
	}
	if c.PoolSize == 0 {
		c.PoolSize = runtime.NumCPU()
	}
	if c.PoolSize < 0 {
		return c, fmt.Errorf("host: Config.PoolSize %d is negative", c.PoolSize)
	}
	if c.RetireGrace == 0 {
		c.RetireGrace = DefaultRetireGrace
	}
	if c.Debounce == 0 {
		c.Debounce = DefaultDebounce
	}
	if c.Resync == 0 {
		c.Resync = DefaultResync
	}
	if c.RetireGrace < 0 || c.Debounce < 0 || c.Resync < 0 {
		return c, fmt.Errorf("host: Config.RetireGrace, Debounce and Resync must not be negative")
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

// capabilityOf returns the capability that grants the host function name, or "" when the
// function needs none.
func capabilityOf(name string) string {
	for capName, fns := range abi.CapabilityImports {
		if slices.Contains(fns, name) {
			return capName
		}
	}
	return ""
}

// granted reports whether capability capName is granted to the handlers of pluginType.
func (c *Config) granted(pluginType, capName string) bool {
	return slices.Contains(c.Grants[pluginType], capName)
}
