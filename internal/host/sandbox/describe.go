package sandbox

// What tools (wasmhost handler inspect/test, the conformance kit in conformance, a pulled
// module's admission) learn of a sandbox and of a module without serving it: the key-value
// stores, and a module described (Describe: compiled as a load compiles it, its description
// exports run with stub host functions). Package inspect makes its report from a Description.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
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

// Description is what Describe learns of a module: the module's definitions as the compiler
// read them, and what its description exports answered. Package inspect reads it into the
// report of `wasmhost handler inspect`.
type Description struct {
	Size   int64  // of the module's bytes
	SHA256 string // of the module's bytes, hex

	// Scan is what wasmbin.Scan read of the bytes (imports in the module's order, its memory
	// minimum). Its Imports are nil when the scan could not read them: then the imported
	// functions are what is known.
	Scan wasmbin.Info
	// The definitions of the compiled module (the host's own import of its call-stack
	// rewrite, wasmbin.SandboxModule, among the imported functions).
	ExportedFunctions map[string]api.FunctionDefinition
	ExportedMemories  map[string]api.MemoryDefinition
	ImportedFunctions []api.FunctionDefinition

	// ABIVersion and Manifest are what the module's exports answered in a sandbox with stub
	// host functions. DescribeError says why they are missing, when they are.
	ABIVersion    uint32
	Manifest      abi.Manifest
	DescribeError string
}

// Describe compiles bin (a module named name in messages) as Load would (scanned, its structure
// checked, its call stack bounded, under the compile deadline, from the cache entry a load of
// the same bytes left, if any, and leaving none), reads its definitions, and runs its
// abi_version and manifest exports in a throwaway runtime (the sandbox's memory limit and call
// timeout, WASI as the sandbox gives it, and host functions that set the result and otherwise
// answer abi.CodeDenied). Unlike Load (and the host's LoadFile) it neither checks grants nor
// permissions, and a module it can describe may still be refused: load it to know. The error
// (ErrBadModule) is for bytes that are not a WebAssembly module at all.
func (sb *Sandbox) Describe(ctx context.Context, name string, bin []byte) (*Description, error) {
	if !sb.BeginWork() {
		return nil, ErrClosed
	}
	defer sb.wg.Done()
	sum := sha256.Sum256(bin)
	r := &Description{Size: int64(len(bin)), SHA256: hex.EncodeToString(sum[:])}
	info, err := wasmbin.Scan(bin)
	if err != nil {
		return nil, badModule(name, nil, "%v", err)
	}
	r.Scan = info
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

	r.ExportedFunctions, r.ExportedMemories = cm.ExportedFunctions(), cm.ExportedMemories()
	r.ImportedFunctions = cm.ImportedFunctions()
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

// describeState is the result_set of a stub host.
type describeState struct{ result []byte }

type describeKey struct{}

// describe instantiates cm in rt with stub host functions and reads its ABI version and
// manifest into r.
func (sb *Sandbox) describe(ctx context.Context, rt wazero.Runtime, cm wazero.CompiledModule, r *Description) error {
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
			return 0, fmt.Errorf("export %s has signature %s want () -> (i32)", name, Signature(d.ParamTypes(), d.ResultTypes()))
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
