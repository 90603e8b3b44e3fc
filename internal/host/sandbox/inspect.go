package sandbox

// What tools (wasmhost handler inspect/test, the conformance kit in conformance) read of a
// host and of a module without serving it.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/host/wasmbin"
)

// Store returns a copy of the key-value store of pluginType as its handlers see it (nil when
// nothing was ever stored for that type). It is for tools and tests; the daemon does not use it.
func (sb *Sandbox) Store(pluginType string) map[string][]byte {
	sb.mu.Lock()
	kv := sb.kv[pluginType]
	sb.mu.Unlock()
	if kv == nil {
		return nil
	}
	kv.mu.Lock()
	defer kv.mu.Unlock()
	out := make(map[string][]byte, len(kv.m))
	for k, v := range kv.m {
		out[k] = slices.Clone(v)
	}
	return out
}

// SetStore sets key to value in the key-value store of pluginType as m's handler would with
// kv_set (charged to m, within the same limits): for tests and tools that start a handler from
// a given store, or change it while a call runs (a PluginCaller may). The daemon does not use it.
func (m *Module) SetStore(pluginType, key string, value []byte) error {
	if code, why := m.sb.kvStore(pluginType).set(m, key, value); code != abi.StatusOK {
		return fmt.Errorf("host: setting %s in the store of %s: %s", key, pluginType, why)
	}
	return nil
}

// Report is what Inspect learns about a module.
type Report struct {
	Size   int64  // of the module's bytes
	SHA256 string // of the module's bytes, hex

	Exports []Export // every export, sorted by name
	Imports []Import // every import, in the module's order

	// Capabilities are the capabilities (abi.Capability*) the module's imports need, sorted.
	Capabilities []string

	// ABIVersion and Manifest are what the module's exports answered in a sandbox with stub
	// host functions. DescribeError says why they are missing, when they are.
	ABIVersion    uint32
	Manifest      abi.Manifest
	DescribeError string
}

// Export is one export of a module.
type Export struct {
	Name string
	Kind string // function, memory, table or global
	// Signature is a function's WebAssembly type, "(i32) -> (i32)"; for a memory, its limits
	// in 64 KiB pages, "min 17 pages, no max".
	Signature string
}

// Import is one import of a module.
type Import struct {
	Module, Name string
	Kind         string // function, table, memory, global or tag
	Signature    string // a function's WebAssembly type; "" for other kinds
	// Capability is the capability a host function needs (abi.CapabilityImports), or "".
	Capability string
}

// Inspect reads what bin (a module named name in messages) exports and imports, with
// signatures, and runs its abi_version and manifest exports in a throwaway sandbox (the host's
// memory limit and call timeout, WASI as the host gives it, and host functions that set the
// result and otherwise answer abi.CodeDenied). Unlike Load (and the host's LoadFile) it neither checks grants nor
// permissions, and a module it can describe may still be refused: load it to know. The error
// (ErrBadModule) is for bytes that are not a WebAssembly module at all.
func (sb *Sandbox) Inspect(ctx context.Context, name string, bin []byte) (*Report, error) {
	if !sb.BeginWork() {
		return nil, ErrClosed
	}
	defer sb.wg.Done()
	sum := sha256.Sum256(bin)
	r := &Report{Size: int64(len(bin)), SHA256: hex.EncodeToString(sum[:])}
	info, err := wasmbin.Scan(bin)
	if err != nil {
		return nil, badModule(name, nil, "%v", err)
	}
	// A compile cannot be stopped: what would make it slow is refused before, as at load.
	if _, bad := wasmbin.Check(bin, sb.cfg.structure()); bad != "" {
		return nil, refuse(name, RefusedStructure, nil, "not compiled: %s", bad)
	}
	// Its calls run as at load: with the call stack bounded (callstack.go).
	guarded, err := sb.instrument(name, bin)
	if err != nil {
		return nil, err
	}
	// Described, not kept: compiled without the cache on disk, unless a module of these bytes
	// left its entry there (cachedirs.go).
	rtCfg, release := sb.describeRuntimeConfig(r.SHA256)
	if info.MemMin > uint64(sb.limitPages) {
		// Describe what it is all the same; it is not instantiated (Load refuses it).
		rtCfg = rtCfg.WithMemoryLimitPages(uint32(min(info.MemMin, 65536)))
	}
	rt := wazero.NewRuntimeWithConfig(ctx, rtCfg)
	cm, abandoned, err := sb.compile(rt, release, name, guarded)
	if err != nil {
		if !abandoned {
			_ = rt.Close(context.Background())
			release()
		}
		return nil, err
	}
	defer func() {
		_ = rt.Close(context.Background())
		release()
	}()

	for n, def := range cm.ExportedFunctions() {
		r.Exports = append(r.Exports, Export{Name: n, Kind: "function", Signature: sigString(def.ParamTypes(), def.ResultTypes())})
	}
	for n, mem := range cm.ExportedMemories() {
		r.Exports = append(r.Exports, Export{Name: n, Kind: "memory", Signature: memLimits(mem)})
	}
	sort.Slice(r.Exports, func(i, j int) bool { return r.Exports[i].Name < r.Exports[j].Name })

	funcs := map[[2]string]api.FunctionDefinition{}
	for _, def := range cm.ImportedFunctions() {
		mod, n, _ := def.Import()
		funcs[[2]string{mod, n}] = def
	}
	imports := info.Imports
	if imports == nil { // the scan could not read them: the functions are what is known
		for _, def := range cm.ImportedFunctions() {
			mod, n, _ := def.Import()
			if mod == wasmbin.SandboxModule {
				continue // the host's rewrite imports it, not the module
			}
			imports = append(imports, wasmbin.Import{Module: mod, Name: n})
		}
	}
	caps := map[string]bool{}
	for _, imp := range imports {
		out := Import{Module: imp.Module, Name: imp.Name, Kind: imp.KindName()}
		if def, ok := funcs[[2]string{imp.Module, imp.Name}]; ok && imp.Kind == 0 {
			out.Signature = sigString(def.ParamTypes(), def.ResultTypes())
		}
		if imp.Module == abi.ImportModule && imp.Kind == 0 {
			if c := capabilityOf(imp.Name); c != "" {
				out.Capability = c
				caps[c] = true
			}
		}
		r.Imports = append(r.Imports, out)
	}
	r.Capabilities = slices.Sorted(maps.Keys(caps))

	if msg := commandExport(cm.ExportedFunctions()); msg != "" {
		// Its exports cannot be called (a Go command traps in them): say why, and how to build it.
		r.DescribeError = "not instantiated: " + msg
	} else if info.MemMin > uint64(sb.limitPages) {
		r.DescribeError = fmt.Sprintf("not instantiated: its memory minimum of %d pages is over the limit of %d pages", info.MemMin, sb.limitPages)
	} else if err := sb.describe(ctx, rt, cm, r); err != nil {
		r.DescribeError = err.Error()
	}
	return r, nil
}

func memLimits(mem api.MemoryDefinition) string {
	s := fmt.Sprintf("min %d pages", mem.Min())
	if max, ok := mem.Max(); ok {
		return s + fmt.Sprintf(", max %d pages", max)
	}
	return s + ", no max"
}

// describeState is the result_set of a stub host.
type describeState struct{ result []byte }

type describeKey struct{}

// describe instantiates cm in rt with stub host functions and reads its ABI version and
// manifest into r.
func (sb *Sandbox) describe(ctx context.Context, rt wazero.Runtime, cm wazero.CompiledModule, r *Report) error {
	hostNames := map[string]bool{}
	wasi := false
	for _, def := range cm.ImportedFunctions() {
		mod, n, _ := def.Import()
		switch mod {
		case abi.ImportModule:
			hostNames[n] = true
		case wasi_snapshot_preview1.ModuleName:
			wasi = true
		}
	}
	if wasi {
		if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
			return fmt.Errorf("instantiating WASI: %w", err)
		}
	}
	if err := instantiateSandbox(ctx, rt, nil); err != nil {
		return fmt.Errorf("instantiating the sandbox's functions: %w", err)
	}
	if len(hostNames) > 0 {
		b := rt.NewHostModuleBuilder(abi.ImportModule)
		for _, n := range slices.Sorted(maps.Keys(hostNames)) {
			sig, ok := abi.ImportSignatures[n]
			if !ok {
				continue // instantiation reports the unknown import
			}
			fn := stubFunc(n)
			b.NewFunctionBuilder().WithGoModuleFunction(fn, valueTypes(sig.Params), valueTypes(sig.Results)).Export(n)
		}
		if _, err := b.Instantiate(ctx); err != nil {
			return fmt.Errorf("instantiating host functions: %w", err)
		}
	}
	var stderr strings.Builder
	cfg := wazero.NewModuleConfig().WithName("").WithStderr(&limitedWriter{w: &stderr, n: 4 << 10})
	if _, ok := cm.ExportedFunctions()[abi.ExportInitialize]; ok {
		cfg = cfg.WithStartFunctions(abi.ExportInitialize)
	}
	// As in the host, result_set is denied while _initialize runs.
	initCtx, cancel := context.WithTimeout(ctx, sb.cfg.CallTimeout)
	defer cancel()
	mod, err := rt.InstantiateModule(initCtx, cm, cfg)
	if err != nil {
		if s := strings.TrimSpace(stderr.String()); s != "" {
			err = fmt.Errorf("%w (stderr: %s)", err, s)
		}
		return fmt.Errorf("instantiating: %w", err)
	}
	st := &describeState{}
	call := func(name string) (int32, error) {
		fn := mod.ExportedFunction(name)
		if fn == nil {
			return 0, fmt.Errorf("missing export %s", name)
		}
		if d := fn.Definition(); len(d.ParamTypes()) != 0 || len(d.ResultTypes()) != 1 || d.ResultTypes()[0] != api.ValueTypeI32 {
			return 0, fmt.Errorf("export %s has signature %s want () -> (i32)", name, sigString(d.ParamTypes(), d.ResultTypes()))
		}
		st.result = nil
		ctx, cancel := context.WithTimeout(context.WithValue(ctx, describeKey{}, st), sb.cfg.CallTimeout)
		defer cancel()
		res, err := fn.Call(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return 0, fmt.Errorf("%s timed out after %v", name, sb.cfg.CallTimeout.Round(time.Millisecond))
			}
			return 0, fmt.Errorf("%s failed: %w", name, err)
		}
		return api.DecodeI32(res[0]), nil
	}
	v, err := call(abi.ExportABIVersion)
	if err != nil {
		return err
	}
	r.ABIVersion = uint32(v)
	status, err := call(abi.ExportManifest)
	if err != nil {
		return err
	}
	if status != abi.StatusOK {
		return fmt.Errorf("%s returned status %d (%s), want %d", abi.ExportManifest, status, reason(st.result), abi.StatusOK)
	}
	mf, err := abi.DecodeManifest(st.result)
	if err != nil {
		return fmt.Errorf("manifest malformed: %w", err)
	}
	r.Manifest = mf
	return nil
}

// stubFunc is host function name for describe: result_set keeps the result, log and the
// readers answer as outside a handler call, the rest are denied.
func stubFunc(name string) api.GoModuleFunc {
	return func(ctx context.Context, mod api.Module, stack []uint64) {
		switch name {
		case abi.ImportLog:
			return
		case abi.ImportResultSet:
			st, _ := ctx.Value(describeKey{}).(*describeState)
			b := guestBytes(mod, name, "result", arg(stack, 0), arg(stack, 1))
			switch {
			case st == nil:
				ret(stack, abi.CodeDenied)
			case len(b) > abi.MaxResultBytes:
				ret(stack, abi.CodeTooLarge)
			default:
				st.result = slices.Clone(b)
				ret(stack, abi.StatusOK)
			}
		case abi.ImportRequestRead, abi.ImportErrorRead:
			ret(stack, 0)
		default:
			ret(stack, abi.CodeDenied)
		}
	}
}

// limitedWriter keeps the first n bytes written to it.
type limitedWriter struct {
	w interface{ Write([]byte) (int, error) }
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if k := min(len(p), l.n); k > 0 {
		_, _ = l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}
