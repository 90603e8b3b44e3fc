package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/host/wasmbin"
	"github.com/wasmhost/wasmhost/internal/limits"
)

// PluginCaller makes the unary gRPC calls of the plugin_call host function
// (abi.ImportPluginCall) to the endpoint of the plugin a handler is handling.
type PluginCaller interface {
	// Call invokes method (a full gRPC method name, "/package.Service/Method") on the plugin
	// serving at endpoint with the encoded request req, and returns the encoded response. A
	// response longer than maxResp bytes is an error that matches
	// registration.ErrResponseTooLarge (the guest gets CodeTooLarge). ctx carries the handler
	// call's deadline.
	Call(ctx context.Context, endpoint, method string, req []byte, maxResp int) ([]byte, error)
}

// Config configures a Sandbox: the fields of the host's configuration (host.Config) that
// the sandbox uses, documented there, with their defaults filled in and checked (host.New
// does): New takes them as they are.
type Config struct {
	CacheDir         string                                                    // compiled code kept on disk ("": in memory)
	CallTimeout      time.Duration                                             // of every call, the wait for an instance included
	MemoryLimit      int64                                                     // of one instance's linear memory, in bytes
	PoolSize         int                                                       // the most instances of one module at once
	Grants           map[string][]string                                       // capabilities by plugin type, each known and once
	AllowInsecure    bool                                                      // load handler files others may change
	PluginCaller     PluginCaller                                              // serves plugin_call (nil: it cannot be granted)
	PluginCallPolicy func(pluginType, socket, endpoint string) (string, error) // the endpoint plugin_call may dial (nil: any)
	Recorder         Recorder                                                  // receives the calls of the types it records (nil: none)
	Limits           limits.Handler                                            // what a load and each call may cost
	Logger           *slog.Logger                                              // the sandbox's logs and the guests'
	Tracer           trace.Tracer                                              // traces each handler call under the caller's span (nil: none)
}

const pageSize = 65536

// Defaults of the sandbox's fields (host.Config's of the same names).
const (
	DefaultCallTimeout = 5 * time.Second
	DefaultMemoryLimit = 64 << 20
)

// DefaultGuestThreads is the default of Limits.GuestThreads (handlers.limits.guestThreads) on
// this machine: a turn for every core but one, and at least one.
func DefaultGuestThreads() int { return max(runtime.NumCPU()-1, 1) }

// WithDefaults returns c with the defaults of its fields filled in, or an error naming the field
// that is wrong: the one place of the sandbox's defaults, which host.New applies to the host's
// fields of the same names.
func (c Config) WithDefaults() (Config, error) {
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
	c.Limits = c.Limits.OrDefaults()
	if c.Limits.GuestThreads == 0 {
		c.Limits.GuestThreads = DefaultGuestThreads()
	}
	var bad []error
	c.Limits.Check(func(key, format string, args ...any) {
		bad = append(bad, fmt.Errorf("host: Config.Limits: handlers.limits.%s: "+format, append([]any{key}, args...)...))
	})
	if err := errors.Join(bad...); err != nil {
		return c, err
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// structure is what wasmbin.Check bounds of a module's code, from the limits in c.
func (c *Config) structure() wasmbin.Limits {
	l := &c.Limits
	return wasmbin.Limits{
		Functions: l.MaxFunctions, FunctionBytes: int(l.MaxFunctionSize),
		Nesting: l.MaxNesting, NestingWork: wasmbin.MaxNestingWork, Locals: l.MaxLocals,
		TableElements: l.MaxTableElements, Entries: l.MaxEntries,
	}
}

// CapabilityOf returns the capability that grants the host function name, or "" when the
// function needs none.
func CapabilityOf(name string) string {
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
