// Package fakehost runs a handler module under a small in-memory implementation of ABI v1, for
// the tests of package abi and of the guest SDK. It is not the daemon's host (host/ is): it has
// no pooling, deadlines or memory limits, it grants every capability, and it runs guests with
// wazero's interpreter. It checks every guest
// pointer and traps on a bad one, as the specification requires.
package fakehost

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/wasmhost/wasmhost/abi"
)

// Log is one line a guest logged.
type Log struct {
	Level abi.LogLevel
	Msg   string
}

// Module is one instance of a handler module, with its host state.
type Module struct {
	// PluginCall answers plugin_call; nil fails every call with CodeFailed and reason "no plugin".
	PluginCall func(method string, req []byte) ([]byte, error)

	mu        sync.Mutex
	kv        map[string][]byte
	published map[string]string
	logs      []Log
	output    bytes.Buffer // the guest's stdout and stderr

	// State of the call in progress.
	export  string
	request []byte
	result  []byte
	lastErr string

	rt  wazero.Runtime
	mod api.Module
}

// Load compiles and instantiates wasm, runs _initialize if it is exported, and checks the ABI
// version.
func Load(ctx context.Context, wasm []byte) (*Module, error) {
	m := &Module{kv: map[string][]byte{}, published: map[string]string{}}
	// The interpreter: a Go guest compiles in well under a second with it, against over 10 s
	// with the compiler under the race detector.
	m.rt = wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	if err := m.load(ctx, wasm); err != nil {
		m.rt.Close(ctx)
		return nil, err
	}
	return m, nil
}

func (m *Module) load(ctx context.Context, wasm []byte) error {
	wasi_snapshot_preview1.MustInstantiate(ctx, m.rt)
	b := m.rt.NewHostModuleBuilder(abi.ImportModule)
	for name, sig := range abi.ImportSignatures {
		fn, ok := m.hostFuncs()[name]
		if !ok {
			return fmt.Errorf("fakehost: no implementation of %s", name)
		}
		b.NewFunctionBuilder().WithGoModuleFunction(fn, valueTypes(sig.Params), valueTypes(sig.Results)).Export(name)
	}
	if _, err := b.Instantiate(ctx); err != nil {
		return err
	}
	compiled, err := m.rt.CompileModule(ctx, wasm)
	if err != nil {
		return err
	}
	cfg := wazero.NewModuleConfig().WithStdout(&m.output).WithStderr(&m.output).
		WithStartFunctions(abi.ExportInitialize)
	m.mod, err = m.rt.InstantiateModule(ctx, compiled, cfg)
	if err != nil {
		return err
	}
	res, err := m.callRaw(ctx, abi.ExportABIVersion)
	if err != nil {
		return err
	}
	if uint32(res) != abi.Version {
		return fmt.Errorf("fakehost: ABI version %d", uint32(res))
	}
	return nil
}

// Close closes the module and its runtime.
func (m *Module) Close(ctx context.Context) error { return m.rt.Close(ctx) }

// Manifest calls wasmhost_manifest and decodes the result.
func (m *Module) Manifest(ctx context.Context) (abi.Manifest, int32, error) {
	m.begin(abi.ExportManifest, nil)
	status, err := m.callRaw(ctx, abi.ExportManifest)
	if err != nil {
		return abi.Manifest{}, 0, err
	}
	if status != abi.StatusOK {
		return abi.Manifest{}, status, fmt.Errorf("fakehost: manifest: status %d: %s", status, m.result)
	}
	man, err := abi.DecodeManifest(m.result)
	return man, status, err
}

// Call calls one of the handler exports with r and returns its status and result.
func (m *Module) Call(ctx context.Context, export string, r abi.PluginRequest) (int32, string, error) {
	req := abi.AppendPluginRequest(nil, r)
	m.begin(export, req)
	status, err := m.callRaw(ctx, export, uint64(len(req)))
	return status, string(m.result), err
}

func (m *Module) begin(export string, req []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.export, m.request, m.result, m.lastErr = export, req, nil, ""
}

func (m *Module) callRaw(ctx context.Context, export string, params ...uint64) (int32, error) {
	fn := m.mod.ExportedFunction(export)
	if fn == nil {
		return 0, fmt.Errorf("fakehost: no export %s", export)
	}
	res, err := fn.Call(ctx, params...)
	if err != nil {
		return 0, err
	}
	return int32(uint32(res[0])), nil
}

// KV returns a copy of the store.
func (m *Module) KV() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]string{}
	for k, v := range m.kv {
		out[k] = string(v)
	}
	return out
}

// Published returns a copy of the published keys.
func (m *Module) Published() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]string{}
	for k, v := range m.published {
		out[k] = v
	}
	return out
}

// Logs returns the lines logged so far.
func (m *Module) Logs() []Log {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Log(nil), m.logs...)
}

// Output returns what the guest wrote to stdout and stderr.
func (m *Module) Output() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.output.String()
}

func valueTypes(ts []abi.ValueType) []api.ValueType {
	out := make([]api.ValueType, len(ts))
	for i, t := range ts {
		out[i] = api.ValueType(t)
	}
	return out
}

// errTrap is the panic value of a host function that ends the guest call.
var errTrap = errors.New("fakehost: guest pointer out of bounds")

// read returns guest memory [ptr, ptr+n), trapping when it is out of bounds.
func read(mod api.Module, ptr, n uint64) []byte {
	b, ok := mod.Memory().Read(uint32(ptr), uint32(n))
	if !ok {
		panic(errTrap)
	}
	return b
}

func i32(v int32) uint64 { return uint64(uint32(v)) }

func checkKey(key []byte) int32 {
	switch {
	case len(key) == 0:
		return abi.CodeBadRequest
	case len(key) > abi.MaxKeyBytes:
		return abi.CodeTooLarge
	}
	return abi.StatusOK
}

// inHandlerCall reports whether the call in progress is validate, register or deregister.
func (m *Module) inHandlerCall() bool {
	return m.export == abi.ExportValidate || m.export == abi.ExportRegister || m.export == abi.ExportDeregister
}

func (m *Module) hostFuncs() map[string]api.GoModuleFunc {
	return map[string]api.GoModuleFunc{
		abi.ImportRequestRead: func(_ context.Context, mod api.Module, s []uint64) {
			m.mu.Lock()
			defer m.mu.Unlock()
			dst := read(mod, s[0], s[1])
			copy(dst, m.request)
			s[0] = i32(int32(len(m.request)))
		},
		abi.ImportResultSet: func(_ context.Context, mod api.Module, s []uint64) {
			b := read(mod, s[0], s[1])
			m.mu.Lock()
			defer m.mu.Unlock()
			if len(b) > abi.MaxResultBytes {
				s[0] = i32(abi.CodeTooLarge)
				return
			}
			m.result = append([]byte(nil), b...)
			s[0] = i32(abi.StatusOK)
		},
		abi.ImportLog: func(_ context.Context, mod api.Module, s []uint64) {
			b := read(mod, s[1], s[2])
			if len(b) > abi.MaxLogLineBytes {
				b = b[:abi.MaxLogLineBytes]
			}
			m.mu.Lock()
			defer m.mu.Unlock()
			m.logs = append(m.logs, Log{Level: abi.LogLevel(int32(uint32(s[0]))), Msg: string(b)})
		},
		abi.ImportPublish: func(_ context.Context, mod api.Module, s []uint64) {
			key, val := read(mod, s[0], s[1]), read(mod, s[2], s[3])
			m.mu.Lock()
			defer m.mu.Unlock()
			switch {
			case m.export != abi.ExportRegister:
				s[0] = i32(abi.CodeDenied)
			case checkKey(key) != abi.StatusOK:
				s[0] = i32(checkKey(key))
			case len(val) > abi.MaxValueBytes:
				s[0] = i32(abi.CodeTooLarge)
			case len(m.published) >= abi.MaxPublishedKeys && m.published[string(key)] == "":
				s[0] = i32(abi.CodeTooLarge)
			default:
				m.published[string(key)] = string(val)
				s[0] = i32(abi.StatusOK)
			}
		},
		abi.ImportKVGet: func(_ context.Context, mod api.Module, s []uint64) {
			key := read(mod, s[0], s[1])
			dst := read(mod, s[2], s[3])
			m.mu.Lock()
			defer m.mu.Unlock()
			if !m.inHandlerCall() {
				s[0] = i32(abi.CodeDenied)
				return
			}
			if c := checkKey(key); c != abi.StatusOK {
				s[0] = i32(c)
				return
			}
			v, ok := m.kv[string(key)]
			if !ok {
				s[0] = i32(abi.CodeNotFound)
				return
			}
			copy(dst, v)
			s[0] = i32(int32(len(v)))
		},
		abi.ImportKVSet: func(_ context.Context, mod api.Module, s []uint64) {
			key, val := read(mod, s[0], s[1]), read(mod, s[2], s[3])
			m.mu.Lock()
			defer m.mu.Unlock()
			switch _, exists := m.kv[string(key)]; {
			case !m.inHandlerCall():
				s[0] = i32(abi.CodeDenied)
			case checkKey(key) != abi.StatusOK:
				s[0] = i32(checkKey(key))
			case len(val) > abi.MaxValueBytes, !exists && len(m.kv) >= abi.MaxKVEntries:
				s[0] = i32(abi.CodeTooLarge)
			default:
				m.kv[string(key)] = append([]byte(nil), val...)
				s[0] = i32(abi.StatusOK)
			}
		},
		abi.ImportKVDelete: func(_ context.Context, mod api.Module, s []uint64) {
			key := read(mod, s[0], s[1])
			m.mu.Lock()
			defer m.mu.Unlock()
			switch {
			case !m.inHandlerCall():
				s[0] = i32(abi.CodeDenied)
			case checkKey(key) != abi.StatusOK:
				s[0] = i32(checkKey(key))
			default:
				delete(m.kv, string(key))
				s[0] = i32(abi.StatusOK)
			}
		},
		abi.ImportKVCompareAndSet: func(_ context.Context, mod api.Module, s []uint64) {
			key := read(mod, s[0], s[1])
			operand := func(ptr, n uint64) ([]byte, int32) {
				switch l := int32(uint32(n)); {
				case l == abi.KVAbsent:
					return nil, abi.StatusOK
				case l < 0:
					return nil, abi.CodeBadRequest
				case l > abi.MaxValueBytes:
					return nil, abi.CodeTooLarge
				}
				return append([]byte{}, read(mod, ptr, n)...), abi.StatusOK
			}
			old, oc := operand(s[2], s[3])
			val, vc := operand(s[4], s[5])
			m.mu.Lock()
			defer m.mu.Unlock()
			cur, exists := m.kv[string(key)]
			switch {
			case !m.inHandlerCall():
				s[0] = i32(abi.CodeDenied)
			case checkKey(key) != abi.StatusOK:
				s[0] = i32(checkKey(key))
			case oc != abi.StatusOK:
				s[0] = i32(oc)
			case vc != abi.StatusOK:
				s[0] = i32(vc)
			case exists != (old != nil) || !bytes.Equal(cur, old):
				s[0] = i32(abi.CodeConflict)
			case val == nil:
				delete(m.kv, string(key))
				s[0] = i32(abi.StatusOK)
			case !exists && len(m.kv) >= abi.MaxKVEntries:
				s[0] = i32(abi.CodeTooLarge)
			default:
				m.kv[string(key)] = val
				s[0] = i32(abi.StatusOK)
			}
		},
		abi.ImportPluginCall: func(_ context.Context, mod api.Module, s []uint64) {
			method, req := read(mod, s[0], s[1]), read(mod, s[2], s[3])
			dst := read(mod, s[4], s[5])
			m.mu.Lock()
			fn, ok := m.PluginCall, m.inHandlerCall()
			m.mu.Unlock()
			switch {
			case !ok:
				s[0] = i32(abi.CodeDenied)
				return
			case len(method) == 0:
				s[0] = i32(abi.CodeBadRequest)
				return
			}
			var resp []byte
			err := errors.New("no plugin")
			if fn != nil {
				resp, err = fn(string(method), append([]byte(nil), req...))
			}
			if err != nil {
				m.mu.Lock()
				m.lastErr = err.Error()
				m.mu.Unlock()
				s[0] = i32(abi.CodeFailed)
				return
			}
			copy(dst, resp)
			s[0] = i32(int32(len(resp)))
		},
		abi.ImportErrorRead: func(_ context.Context, mod api.Module, s []uint64) {
			dst := read(mod, s[0], s[1])
			m.mu.Lock()
			defer m.mu.Unlock()
			copy(dst, m.lastErr)
			s[0] = i32(int32(len(m.lastErr)))
		},
	}
}
