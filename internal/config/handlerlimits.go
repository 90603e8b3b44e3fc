package config

import (
	"time"

	"github.com/wasmhost/wasmhost/abi"
)

// HandlerLimits bound what a handler file may cost the daemon: to load it (read, checked,
// compiled) and in each of its calls (what its host functions may log, store, publish and
// fetch). A load over a limit refuses the file; a call over one ends with an error naming the
// key. docs/configuration.md says why each default is what it is.
type HandlerLimits struct {
	// MaxModuleSize is the largest handler file read. Defaults to 64Mi.
	MaxModuleSize ByteSize `yaml:"maxModuleSize"`
	// CompileTimeout bounds compiling a module; one that runs over is abandoned and the file
	// refused (the compile cannot be stopped: it ends in the background). Defaults to 1m.
	CompileTimeout Duration `yaml:"compileTimeout"`
	// MaxFunctions is the most functions a module may define. Defaults to 100000.
	MaxFunctions int `yaml:"maxFunctions"`
	// MaxFunctionSize is the largest function body. Defaults to 1Mi.
	MaxFunctionSize ByteSize `yaml:"maxFunctionSize"`
	// MaxNesting is how deeply blocks may nest in one function. Defaults to 4096.
	MaxNesting int `yaml:"maxNesting"`
	// MaxLocals is the most locals one function may declare. Defaults to 50000.
	MaxLocals int `yaml:"maxLocals"`
	// MaxTableElements bounds a module's tables together (8 bytes an element in every
	// instance, outside memoryLimit); a module that grows a table must declare a maximum
	// within it. Defaults to 200000.
	MaxTableElements int `yaml:"maxTableElements"`
	// MaxEntries bounds the entries of every other section of a module (types, imports,
	// globals, exports, segments). Defaults to 100000.
	MaxEntries int `yaml:"maxEntries"`
	// MaxCallStack bounds the guest's call stack, counted at each call from the callee's
	// parameters and locals: a call past it traps. wazero's own stack, outside memoryLimit,
	// otherwise grows to 50 MB and more before it overflows. Defaults to 1Mi.
	MaxCallStack ByteSize `yaml:"maxCallStack"`
	// LogLinesPerCall and LogBytesPerCall bound what one call logs (log, stdout and stderr
	// together); going over ends the call. Default to 1000 and 64Ki.
	LogLinesPerCall int      `yaml:"logLinesPerCall"`
	LogBytesPerCall ByteSize `yaml:"logBytesPerCall"`
	// KVKeysPerHandler and KVBytesPerHandler bound the key-value stores of one handler file's
	// plugin types together; kv_set over them fails. Default to 16384 (abi.MaxKVEntries) and 16Mi.
	KVKeysPerHandler  int      `yaml:"kvKeysPerHandler"`
	KVBytesPerHandler ByteSize `yaml:"kvBytesPerHandler"`
	// PublishKeys and PublishBytes bound what one register call publishes. Default to 64
	// (the ABI's most) and 64Ki.
	PublishKeys  int      `yaml:"publishKeys"`
	PublishBytes ByteSize `yaml:"publishBytes"`
	// PluginCallsPerCall bounds the plugin_call calls of one handler call (the one over ends
	// the call); PluginCallResponseSize is the largest response accepted. Default to 16 and 1Mi.
	PluginCallsPerCall     int      `yaml:"pluginCallsPerCall"`
	PluginCallResponseSize ByteSize `yaml:"pluginCallResponseSize"`
	// IdleInstanceTimeout is how long an instance may sit idle in its handler's pool before it
	// is closed, down to one kept warm (an instance keeps the memory its guest grew). Defaults
	// to 1m.
	IdleInstanceTimeout Duration `yaml:"idleInstanceTimeout"`
	// CallCPU is the CPU time one handler call may use; the call over it ends, as one past
	// handlers.callTimeout does. Defaults to 2s.
	CallCPU Duration `yaml:"callCPU"`
	// InstanceMemory bounds the memory handler instances keep together once idle: over it,
	// idle instances are closed, largest first, and their memory is handed back to the
	// system. Defaults to 512Mi.
	InstanceMemory ByteSize `yaml:"instanceMemory"`
	// GuestThreads is how many handler calls may run guest code at once; the others wait for
	// a turn, given first to the plugin type that used the least CPU lately. 0 (the default)
	// is one fewer than the machine's cores, at least 1, so that the daemon keeps a core.
	GuestThreads int `yaml:"guestThreads"`
}

// QuarantineConfig sets aside a handler that keeps trapping or timing out: after After of them
// in a row its calls fail at once for Backoff, then one is let through as a probe; success
// ends the quarantine, failure doubles the back-off up to MaxBackoff.
type QuarantineConfig struct {
	// After is how many traps or timeouts in a row quarantine a handler; 0 disables it.
	// Defaults to 3.
	After int `yaml:"after"`
	// Backoff is the first quarantine's length. Defaults to 10s.
	Backoff Duration `yaml:"backoff"`
	// MaxBackoff caps the doubling. Defaults to 5m.
	MaxBackoff Duration `yaml:"maxBackoff"`
}

// DefaultHandlerLimits are the defaults of handlers.limits.
func DefaultHandlerLimits() HandlerLimits {
	return HandlerLimits{
		MaxModuleSize:          64 << 20,
		CompileTimeout:         Duration(time.Minute),
		MaxFunctions:           100_000,
		MaxFunctionSize:        1 << 20,
		MaxNesting:             4096,
		MaxLocals:              50_000,
		MaxTableElements:       200_000,
		MaxEntries:             100_000,
		MaxCallStack:           1 << 20,
		LogLinesPerCall:        1000,
		LogBytesPerCall:        64 << 10,
		KVKeysPerHandler:       abi.MaxKVEntries,
		KVBytesPerHandler:      16 << 20,
		PublishKeys:            abi.MaxPublishedKeys,
		PublishBytes:           64 << 10,
		PluginCallsPerCall:     16,
		PluginCallResponseSize: 1 << 20,
		IdleInstanceTimeout:    Duration(time.Minute),
		CallCPU:                Duration(2 * time.Second),
		InstanceMemory:         512 << 20,
	}
}

// DefaultQuarantine are the defaults of handlers.quarantine.
func DefaultQuarantine() QuarantineConfig {
	return QuarantineConfig{After: 3, Backoff: Duration(10 * time.Second), MaxBackoff: Duration(5 * time.Minute)}
}

// validateLimits checks handlers.limits and handlers.quarantine.
func (h *HandlersConfig) validateLimits(bad func(key, format string, args ...any)) {
	l := &h.Limits
	positive := map[string]int64{
		"handlers.limits.maxModuleSize":          int64(l.MaxModuleSize),
		"handlers.limits.compileTimeout":         int64(l.CompileTimeout),
		"handlers.limits.maxFunctions":           int64(l.MaxFunctions),
		"handlers.limits.maxFunctionSize":        int64(l.MaxFunctionSize),
		"handlers.limits.maxNesting":             int64(l.MaxNesting),
		"handlers.limits.maxLocals":              int64(l.MaxLocals),
		"handlers.limits.maxTableElements":       int64(l.MaxTableElements),
		"handlers.limits.maxEntries":             int64(l.MaxEntries),
		"handlers.limits.maxCallStack":           int64(l.MaxCallStack),
		"handlers.limits.logLinesPerCall":        int64(l.LogLinesPerCall),
		"handlers.limits.logBytesPerCall":        int64(l.LogBytesPerCall),
		"handlers.limits.kvKeysPerHandler":       int64(l.KVKeysPerHandler),
		"handlers.limits.kvBytesPerHandler":      int64(l.KVBytesPerHandler),
		"handlers.limits.publishKeys":            int64(l.PublishKeys),
		"handlers.limits.publishBytes":           int64(l.PublishBytes),
		"handlers.limits.pluginCallsPerCall":     int64(l.PluginCallsPerCall),
		"handlers.limits.pluginCallResponseSize": int64(l.PluginCallResponseSize),
		"handlers.limits.idleInstanceTimeout":    int64(l.IdleInstanceTimeout),
		"handlers.limits.callCPU":                int64(l.CallCPU),
		"handlers.limits.instanceMemory":         int64(l.InstanceMemory),
		"handlers.quarantine.backoff":            int64(h.Quarantine.Backoff),
		"handlers.quarantine.maxBackoff":         int64(h.Quarantine.MaxBackoff),
	}
	for key, v := range positive {
		if v <= 0 {
			bad(key, "must be positive, got %d", v)
		}
	}
	if l.GuestThreads < 0 {
		bad("handlers.limits.guestThreads", "must not be negative (0 is one fewer than the cores, at least 1), got %d", l.GuestThreads)
	}
	if l.PublishKeys > abi.MaxPublishedKeys {
		bad("handlers.limits.publishKeys", "must be at most %d (the ABI's MaxPublishedKeys), got %d", abi.MaxPublishedKeys, l.PublishKeys)
	}
	if h.Quarantine.After < 0 {
		bad("handlers.quarantine.after", "must not be negative (0 disables quarantine), got %d", h.Quarantine.After)
	}
	if h.Quarantine.MaxBackoff < h.Quarantine.Backoff {
		bad("handlers.quarantine.maxBackoff", "%s is below handlers.quarantine.backoff %s",
			time.Duration(h.Quarantine.MaxBackoff), time.Duration(h.Quarantine.Backoff))
	}
}
