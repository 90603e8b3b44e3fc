// Package limits is the one table of what a handler file may cost the daemon: the keys of
// handlers.limits in the config file, their defaults and their checks, and those of
// handlers.quarantine, which sets aside a handler that keeps failing. The config file reads it
// (internal/config: `config defaults`, `config check`) and the host applies it (internal/host),
// so that a limit is written once. It also holds the units the table is written in, ByteSize
// and Duration, which the rest of the configuration uses too.
//
// Two bounds that were keys once are constants of the host now, each beside the code it bounds
// (docs/configuration.md, "Constants"): wasmbin.MaxNestingWork and the host's
// maxAbandonedCompiles.
package limits

import (
	"reflect"
	"time"

	"github.com/wasmhost/wasmhost/abi"
)

// Handler bounds what a handler file may cost the daemon: to load it (read, checked,
// compiled) and in each of its calls (what its host functions may log, store, publish and
// fetch). A load over a limit refuses the file; a call over one ends with an error naming the
// key. Each field is the key of its yaml tag under handlers.limits, or, tagged yaml:"-", a
// constant that was the key of its was tag (a file that sets one loads with a warning);
// docs/configuration.md says why each default is what it is. For the host, a zero field takes its default
// (OrDefaults).
type Handler struct {
	// MaxModuleSize is the largest handler file read. Defaults to 64Mi.
	MaxModuleSize ByteSize `yaml:"maxModuleSize"`
	// CompileTimeout bounds compiling a module. wazero cannot stop a compile: one that runs
	// over is abandoned (the file is refused at once, the compile finishes in the background
	// and is thrown away). Defaults to 1m: a Go handler of 2 MB compiles in 1.4 s, over 20 s
	// under the race detector on a busy machine.
	CompileTimeout Duration `yaml:"compileTimeout"`
	// MaxFunctions, MaxFunctionSize, MaxNesting and MaxLocals bound the code of a module,
	// checked in one pass before it is compiled: the functions it defines, the bytes of one
	// function body, how deeply blocks nest in one function, and the locals of one function.
	// Default to 100000, 1Mi, 4096 and 50000.
	MaxFunctions    int      `yaml:"-" was:"maxFunctions"` // a constant (docs/configuration.md, "Constants")
	MaxFunctionSize ByteSize `yaml:"maxFunctionSize"`
	MaxNesting      int      `yaml:"maxNesting"`
	MaxLocals       int      `yaml:"-" was:"maxLocals"` // a constant (docs/configuration.md, "Constants")
	// MaxTableElements bounds a module's tables together (8 bytes an element in every
	// instance, outside handlers.memoryLimit); a module that grows a table must declare a
	// maximum within it. Defaults to 200000.
	MaxTableElements int `yaml:"maxTableElements"`
	// MaxEntries bounds the entries of every other section of a module (types, imports,
	// globals, exports, segments): wazero's decoder allocates about 100 bytes for each (25 MB
	// of globals took 540 MB to compile). Defaults to 100000.
	MaxEntries int `yaml:"-" was:"maxEntries"` // a constant (docs/configuration.md, "Constants")
	// MaxCallStack bounds the guest's call stack, counted at each call from the callee's
	// parameters and locals: a call past it traps. wazero's own stack, outside memoryLimit,
	// otherwise grows to 50 MB and more before it overflows. Defaults to 1Mi.
	MaxCallStack ByteSize `yaml:"maxCallStack"`
	// LogLinesPerCall and LogBytesPerCall bound what one call (or one instantiation) logs
	// (log, stdout and stderr together); going over ends the call. Default to 1000 and 64Ki.
	LogLinesPerCall int      `yaml:"-" was:"logLinesPerCall"` // a constant (docs/configuration.md, "Constants")
	LogBytesPerCall ByteSize `yaml:"-" was:"logBytesPerCall"` // a constant (docs/configuration.md, "Constants")
	// KVKeysPerHandler and KVBytesPerHandler bound the key-value stores of one handler file's
	// plugin types together (keys, and bytes of keys and values); a kv_set over them fails
	// with abi.CodeTooLarge. The stores are freed when the handler is retired. Default to
	// 16384 (abi.MaxKVEntries) and 16Mi.
	KVKeysPerHandler  int      `yaml:"-" was:"kvKeysPerHandler"` // a constant (docs/configuration.md, "Constants")
	KVBytesPerHandler ByteSize `yaml:"kvBytesPerHandler"`
	// PublishKeys and PublishBytes bound what one register call publishes. Default to 64
	// (abi.MaxPublishedKeys, the most) and 64Ki.
	PublishKeys  int      `yaml:"-" was:"publishKeys"`  // a constant (docs/configuration.md, "Constants")
	PublishBytes ByteSize `yaml:"-" was:"publishBytes"` // a constant (docs/configuration.md, "Constants")
	// PluginCallsPerCall bounds the plugin_call calls of one handler call (the one over ends
	// the call); PluginCallResponseSize is the largest response accepted. Default to 16 and 1Mi.
	PluginCallsPerCall     int      `yaml:"-" was:"pluginCallsPerCall"` // a constant (docs/configuration.md, "Constants")
	PluginCallResponseSize ByteSize `yaml:"pluginCallResponseSize"`
	// IdleInstanceTimeout is how long an instance may sit idle in its handler's pool before it
	// is closed, down to one kept warm (an instance keeps the memory its guest grew). Defaults
	// to 1m.
	IdleInstanceTimeout Duration `yaml:"-" was:"idleInstanceTimeout"` // a constant (docs/configuration.md, "Constants")
	// CallCPU is the CPU time one handler call (or one instantiation) may use, counted at the
	// yields of its code; the call over it ends, as one past handlers.callTimeout does.
	// Defaults to 2s.
	CallCPU Duration `yaml:"callCPU"`
	// InstanceMemory bounds the memory handler instances keep together once idle: over it,
	// idle instances are closed, largest first, and their memory is handed back to the
	// system. Defaults to 512Mi.
	InstanceMemory ByteSize `yaml:"instanceMemory"`
	// GuestThreads is how many handler calls may run guest code at once; the others wait for
	// a turn, given first to the plugin type that used the least CPU lately. 0 (the default)
	// is one fewer than the machine's cores, at least 1, so that the daemon keeps a core: the
	// host works it out where it runs.
	GuestThreads int `yaml:"guestThreads"`
}

// Defaults are the defaults of handlers.limits: the one table, which `wasmhost config
// defaults` prints and the host applies to the fields left zero.
func Defaults() Handler {
	return Handler{
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

// OrDefaults returns l with every zero field set to its default (Defaults). GuestThreads stays
// 0 if it was: its default depends on the machine.
func (l Handler) OrDefaults() Handler {
	v, d := reflect.ValueOf(&l).Elem(), reflect.ValueOf(Defaults())
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			v.Field(i).Set(d.Field(i))
		}
	}
	return l
}

// Check reports every limit of l that is out of range to bad, with its key under
// handlers.limits ("maxNesting") and what is wrong. Every limit must be positive but
// GuestThreads, which may be 0 (its default), and PublishKeys is at most the ABI's most.
func (l Handler) Check(bad func(key, format string, args ...any)) {
	v := reflect.ValueOf(l)
	for i := range v.NumField() {
		f := v.Type().Field(i)
		key, n := f.Tag.Get("yaml"), v.Field(i).Int()
		if key == "-" {
			// A constant (docs/configuration.md, "Constants"): no file sets it, a Go caller
			// (a test) may; named by the key it was.
			key = f.Tag.Get("was")
		}
		switch {
		case key == "guestThreads":
			if n < 0 {
				bad(key, "must not be negative (0 is one fewer than the cores, at least 1), got %d", n)
			}
		case n <= 0:
			bad(key, "must be positive, got %d", n)
		}
	}
	if l.PublishKeys > abi.MaxPublishedKeys {
		bad("publishKeys", "must be at most %d (the ABI's MaxPublishedKeys), got %d", abi.MaxPublishedKeys, l.PublishKeys)
	}
}
