package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
	"unicode/utf8"

	"github.com/tetratelabs/wazero/api"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/session"
)

// callState is what the host functions know about the guest call they run in. It travels in
// the call's context; one instance runs one call at a time, so it needs no lock.
type callState struct {
	m      *Module
	inst   *instance
	export string // the running export, or "_initialize"

	pluginType string // the type whose handler runs; "" outside plugin calls
	plugin     string // the plugin's name
	endpoint   string // the plugin's endpoint, for plugin_call
	socket     string // the plugin's registration socket, for plugin_call's policy

	req []byte // the encoded abi.PluginRequest

	result     []byte // set by result_set
	resultOver int    // size of the last refused (oversized) result; 0 once one fits

	published map[string]string // non-nil only during ExportRegister

	pluginCallErr string // reason of the last host function that returned CodeFailed

	// Budgets (budget.go, Config.Limits).
	over           *budgetFault // the budget the call went over; it ends the call
	publishedBytes int          // of the keys and values in published
	pluginCalls    int          // plugin_call calls made

	// What the call cost, for its span (trace.go).
	hostCalls int           // host functions the guest called
	status    int32         // what the export returned
	cpu       time.Duration // CPU time the guest used
	mem       int64         // the instance's linear memory after the call, in bytes

	run *guestRun // the call's time: deadline, CPU, turn (sandbox.go); nil outside a call

	rec      *session.Call // the call's record, when the host records its type (record.go)
	recKeys  map[string]bool
	recBytes int64 // what rec holds, as session.Exchange.Size and StoreEntrySize count
	recStart time.Time
}

type stateKey struct{}

func withState(ctx context.Context, st *callState) context.Context {
	return context.WithValue(ctx, stateKey{}, st)
}

func stateOf(ctx context.Context) *callState {
	st, _ := ctx.Value(stateKey{}).(*callState)
	return st
}

// guestFault is the panic value of a host function handed a pointer and length outside the
// guest's memory. wazero turns the panic into an error of that guest call; the host then
// reports ErrTrap and throws the instance away.
type guestFault struct {
	fn   string // host function
	arg  string // which argument
	ptr  uint32
	n    uint32
	size uint32 // memory size in bytes
}

func (e *guestFault) Error() string {
	return fmt.Sprintf("%s.%s: %s [%d, %d+%d) is outside the guest memory of %d bytes",
		abi.ImportModule, e.fn, e.arg, e.ptr, e.ptr, e.n, e.size)
}

// guestBytes returns the guest memory [ptr, ptr+n) (a view, not a copy), or panics with a
// guestFault.
func guestBytes(mod api.Module, fn, arg string, ptr, n uint32) []byte {
	mem := mod.Memory()
	if mem == nil {
		panic(&guestFault{fn: fn, arg: arg, ptr: ptr, n: n})
	}
	b, ok := mem.Read(ptr, n)
	if !ok {
		panic(&guestFault{fn: fn, arg: arg, ptr: ptr, n: n, size: mem.Size()})
	}
	return b
}

// hostFuncs implements every host function of abi.ImportSignatures, by name.
var hostFuncs = map[string]func(m *Module, ctx context.Context, mod api.Module, stack []uint64){
	abi.ImportRequestRead:     (*Module).hostRequestRead,
	abi.ImportResultSet:       (*Module).hostResultSet,
	abi.ImportLog:             (*Module).hostLog,
	abi.ImportPublish:         (*Module).hostPublish,
	abi.ImportKVGet:           (*Module).hostKVGet,
	abi.ImportKVSet:           (*Module).hostKVSet,
	abi.ImportKVDelete:        (*Module).hostKVDelete,
	abi.ImportKVCompareAndSet: (*Module).hostKVCompareAndSet,
	abi.ImportPluginCall:      (*Module).hostPluginCall,
	abi.ImportErrorRead:       (*Module).hostErrorRead,
}

// valueTypes converts an ABI signature's types to wazero's (they share the binary encoding).
func valueTypes(ts []abi.ValueType) []api.ValueType {
	out := make([]api.ValueType, len(ts))
	for i, t := range ts {
		out[i] = api.ValueType(t)
	}
	return out
}

func ret(stack []uint64, code int32) { stack[0] = api.EncodeI32(code) }

func arg(stack []uint64, i int) uint32 { return api.DecodeU32(stack[i]) }

func (m *Module) hostRequestRead(ctx context.Context, mod api.Module, stack []uint64) {
	ptr, n := arg(stack, 0), arg(stack, 1)
	buf := guestBytes(mod, abi.ImportRequestRead, "buffer", ptr, n)
	st := stateOf(ctx)
	if st == nil || st.pluginType == "" {
		ret(stack, 0)
		return
	}
	copy(buf, st.req)
	ret(stack, int32(len(st.req)))
}

func (m *Module) hostResultSet(ctx context.Context, mod api.Module, stack []uint64) {
	ptr, n := arg(stack, 0), arg(stack, 1)
	b := guestBytes(mod, abi.ImportResultSet, "result", ptr, n)
	st := stateOf(ctx)
	if st == nil || st.export == abi.ExportInitialize {
		ret(stack, abi.CodeDenied)
		return
	}
	if n > abi.MaxResultBytes {
		st.resultOver = int(n)
		ret(stack, abi.CodeTooLarge)
		return
	}
	st.result = append(st.result[:0], b...)
	st.resultOver = 0
	ret(stack, abi.StatusOK)
}

func (m *Module) hostLog(ctx context.Context, mod api.Module, stack []uint64) {
	level, ptr, n := int32(arg(stack, 0)), arg(stack, 1), arg(stack, 2)
	b := guestBytes(mod, abi.ImportLog, "message", ptr, n)
	st := stateOf(ctx)
	if st == nil {
		return
	}
	var slevel slog.Level
	switch {
	case level <= int32(abi.LogDebug):
		slevel = slog.LevelDebug
	case level == int32(abi.LogInfo):
		slevel = slog.LevelInfo
	case level == int32(abi.LogWarn):
		slevel = slog.LevelWarn
	default:
		slevel = slog.LevelError
	}
	cut := false
	if len(b) > abi.MaxLogLineBytes {
		b, cut = b[:abi.MaxLogLineBytes], true
	}
	if f := st.inst.emit(ctx, st, slevel, "log", b, cut); f != nil {
		panic(f)
	}
}

func (m *Module) hostPublish(ctx context.Context, mod api.Module, stack []uint64) {
	key := guestBytes(mod, abi.ImportPublish, "key", arg(stack, 0), arg(stack, 1))
	val := guestBytes(mod, abi.ImportPublish, "value", arg(stack, 2), arg(stack, 3))
	st := stateOf(ctx)
	switch {
	case st == nil || st.published == nil:
		ret(stack, abi.CodeDenied)
	case len(key) == 0:
		ret(stack, abi.CodeBadRequest)
	case len(key) > abi.MaxKeyBytes || len(val) > abi.MaxValueBytes:
		ret(stack, abi.CodeTooLarge)
	default:
		lim := &m.sb.cfg.Limits
		old, ok := st.published[string(key)]
		size := st.publishedBytes + len(val) - len(old)
		if !ok {
			size += len(key)
		}
		switch {
		case !ok && len(st.published) >= lim.PublishKeys:
			st.pluginCallErr = fmt.Sprintf("%d keys published, the most in one call (handlers.limits.publishKeys)", len(st.published))
			ret(stack, abi.CodeTooLarge)
			return
		case size > int(lim.PublishBytes):
			st.pluginCallErr = fmt.Sprintf("%d bytes published would go over %d (handlers.limits.publishBytes)", size, lim.PublishBytes)
			ret(stack, abi.CodeTooLarge)
			return
		}
		st.published[string(key)] = string(val)
		st.publishedBytes = size
		ret(stack, abi.StatusOK)
	}
}

// kvFor returns the store of the running call's plugin type, or nil outside plugin calls.
func (m *Module) kvFor(st *callState) *kvStore {
	if st == nil || st.pluginType == "" {
		return nil
	}
	return m.sb.kvStore(st.pluginType)
}

// kvKeyCode checks a kv call's store and key: the code to return, or StatusOK to go on.
func kvKeyCode(kv *kvStore, key []byte) int32 {
	switch {
	case kv == nil:
		return abi.CodeDenied
	case len(key) == 0:
		return abi.CodeBadRequest
	case len(key) > abi.MaxKeyBytes:
		return abi.CodeTooLarge
	}
	return abi.StatusOK
}

func (m *Module) hostKVGet(ctx context.Context, mod api.Module, stack []uint64) {
	key := guestBytes(mod, abi.ImportKVGet, "key", arg(stack, 0), arg(stack, 1))
	buf := guestBytes(mod, abi.ImportKVGet, "buffer", arg(stack, 2), arg(stack, 3))
	st := stateOf(ctx)
	kv := m.kvFor(st)
	if code := kvKeyCode(kv, key); code != abi.StatusOK {
		ret(stack, code)
		return
	}
	st.noteBefore(kv, key)
	kv.mu.Lock()
	v, ok := kv.m[string(key)]
	if ok {
		copy(buf, v)
	}
	kv.mu.Unlock()
	if !ok {
		if st.recording() {
			st.note(session.Exchange{Fn: session.KVGet, Key: string(key), Code: abi.CodeNotFound})
		}
		ret(stack, abi.CodeNotFound)
		return
	}
	if st.recording() {
		st.note(session.Exchange{Fn: session.KVGet, Key: string(key), Value: v, Code: int32(len(v))})
	}
	ret(stack, int32(len(v)))
}

// denied ends a host function that would change something (a kv write, plugin_call) in a call
// of a read-only module: it returns abi.CodeDenied with a reason for error_read.
func (m *Module) denied(ctx context.Context, stack []uint64) bool {
	if !m.readOnly {
		return false
	}
	if st := stateOf(ctx); st != nil {
		st.pluginCallErr = "a shadow run may read the key-value store, not change it, and may not call the plugin"
	}
	ret(stack, abi.CodeDenied)
	return true
}

func (m *Module) hostKVSet(ctx context.Context, mod api.Module, stack []uint64) {
	if m.denied(ctx, stack) {
		return
	}
	key := guestBytes(mod, abi.ImportKVSet, "key", arg(stack, 0), arg(stack, 1))
	val := guestBytes(mod, abi.ImportKVSet, "value", arg(stack, 2), arg(stack, 3))
	kv := m.kvFor(stateOf(ctx))
	if code := kvKeyCode(kv, key); code != abi.StatusOK {
		ret(stack, code)
		return
	}
	if len(val) > abi.MaxValueBytes {
		ret(stack, abi.CodeTooLarge)
		return
	}
	stateOf(ctx).noteBefore(kv, key)
	code, why := kv.set(m, string(key), val)
	if why != "" {
		stateOf(ctx).pluginCallErr = why
	}
	if stateOf(ctx).recording() {
		stateOf(ctx).note(session.Exchange{Fn: session.KVSet, Key: string(key), Value: val, Code: code, Error: why})
	}
	ret(stack, code)
}

func (m *Module) hostKVDelete(ctx context.Context, mod api.Module, stack []uint64) {
	if m.denied(ctx, stack) {
		return
	}
	key := guestBytes(mod, abi.ImportKVDelete, "key", arg(stack, 0), arg(stack, 1))
	kv := m.kvFor(stateOf(ctx))
	if code := kvKeyCode(kv, key); code != abi.StatusOK {
		ret(stack, code)
		return
	}
	stateOf(ctx).noteBefore(kv, key)
	kv.delete(string(key))
	if stateOf(ctx).recording() {
		stateOf(ctx).note(session.Exchange{Fn: session.KVDelete, Key: string(key)})
	}
	ret(stack, abi.StatusOK)
}

// maxMethodBytes bounds the method name a guest hands plugin_call: it is sent to the plugin
// and named in the call's error, its log line and its session.
const maxMethodBytes = 1024

func (m *Module) hostPluginCall(ctx context.Context, mod api.Module, stack []uint64) {
	if m.denied(ctx, stack) {
		return
	}
	method := guestBytes(mod, abi.ImportPluginCall, "method", arg(stack, 0), arg(stack, 1))
	req := guestBytes(mod, abi.ImportPluginCall, "request", arg(stack, 2), arg(stack, 3))
	resp := guestBytes(mod, abi.ImportPluginCall, "response buffer", arg(stack, 4), arg(stack, 5))
	st := stateOf(ctx)
	caller := m.sb.cfg.PluginCaller
	switch {
	case st == nil || st.pluginType == "" || caller == nil ||
		!m.sb.cfg.granted(st.pluginType, abi.CapabilityPluginCall):
		ret(stack, abi.CodeDenied)
		return
	case len(method) == 0 || !utf8.Valid(method):
		ret(stack, abi.CodeBadRequest)
		return
	case len(method) > maxMethodBytes:
		st.pluginCallErr = fmt.Sprintf("method name of %d bytes, over %d (a gRPC method name, /package.Service/Method)", len(method), maxMethodBytes)
		ret(stack, abi.CodeBadRequest)
		return
	case len(req) > abi.MaxRequestBytes:
		ret(stack, abi.CodeTooLarge)
		return
	case st.endpoint == "":
		st.pluginCallErr = "the plugin has no endpoint"
		ret(stack, abi.CodeFailed)
		return
	}
	endpoint := st.endpoint
	if policy := m.sb.cfg.PluginCallPolicy; policy != nil {
		ep, err := policy(st.pluginType, st.socket, st.endpoint)
		if err != nil {
			st.pluginCallErr = err.Error()
			if st.recording() {
				st.note(session.Exchange{Fn: session.PluginCall, Method: string(method), Request: req, Code: abi.CodeDenied, Error: err.Error()})
			}
			m.sb.log.LogAttrs(ctx, slog.LevelWarn, "plugin_call refused",
				slog.String("plugin_type", st.pluginType), slog.String("plugin", st.plugin),
				slog.String("handler", m.file), slog.String("method", string(method)), slog.Any("error", err))
			ret(stack, abi.CodeDenied)
			return
		}
		endpoint = ep
	}
	maxResp := int(m.sb.cfg.Limits.PluginCallResponseSize)
	if st.pluginCalls++; st.pluginCalls > m.sb.cfg.Limits.PluginCallsPerCall {
		lim := m.sb.cfg.Limits.PluginCallsPerCall
		panic(&budgetFault{what: fmt.Sprintf("made more than %d plugin_call calls", lim), key: "pluginCallsPerCall", limit: lim})
	}
	// The guest's memory may move while the call runs (it cannot: the instance is blocked
	// here), but the caller must not retain req, so pass a copy.
	var out []byte
	var err error
	m.sb.offCPU(ctx, func() {
		out, err = caller.Call(ctx, endpoint, string(method), append([]byte(nil), req...), maxResp)
	})
	if errors.Is(err, registration.ErrResponseTooLarge) {
		// Refused by the caller as it arrived, before it was read whole; worded as below.
		st.pluginCallErr = fmt.Sprintf("response over the limit of %d bytes (handlers.limits.pluginCallResponseSize)", maxResp)
		var sized interface{ ResponseSize() int }
		if errors.As(err, &sized) && sized.ResponseSize() > 0 {
			st.pluginCallErr = fmt.Sprintf("response of %d bytes over the limit of %d (handlers.limits.pluginCallResponseSize)", sized.ResponseSize(), maxResp)
		}
		st.note(session.Exchange{Fn: session.PluginCall, Method: string(method), Request: req, Code: abi.CodeTooLarge, Error: st.pluginCallErr})
		ret(stack, abi.CodeTooLarge)
		return
	}
	if err != nil {
		st.pluginCallErr = err.Error()
		if st.recording() {
			st.note(session.Exchange{Fn: session.PluginCall, Method: string(method), Request: req, Code: abi.CodeFailed, Error: err.Error()})
		}
		m.sb.log.LogAttrs(ctx, slog.LevelDebug, "plugin_call failed",
			slog.String("plugin_type", st.pluginType), slog.String("plugin", st.plugin),
			slog.String("handler", m.file), slog.String("method", string(method)), slog.Any("error", err))
		ret(stack, abi.CodeFailed)
		return
	}
	if len(out) > maxResp {
		st.pluginCallErr = fmt.Sprintf("response of %d bytes over the limit of %d (handlers.limits.pluginCallResponseSize)", len(out), maxResp)
		if st.recording() {
			st.note(session.Exchange{Fn: session.PluginCall, Method: string(method), Request: req, Code: abi.CodeTooLarge, Error: st.pluginCallErr})
		}
		ret(stack, abi.CodeTooLarge)
		return
	}
	if st.recording() {
		st.note(session.Exchange{Fn: session.PluginCall, Method: string(method), Request: req, Response: out, Code: int32(len(out))})
	}
	copy(resp, out)
	ret(stack, int32(len(out)))
}

func (m *Module) hostErrorRead(ctx context.Context, mod api.Module, stack []uint64) {
	buf := guestBytes(mod, abi.ImportErrorRead, "buffer", arg(stack, 0), arg(stack, 1))
	st := stateOf(ctx)
	if st == nil {
		ret(stack, 0)
		return
	}
	copy(buf, st.pluginCallErr)
	ret(stack, int32(len(st.pluginCallErr)))
}

// guestOutput captures an instance's stdout or stderr into the log, line by line; long lines
// are cut and the bytes per call are capped.
type guestOutput struct {
	inst   *instance
	stream string
	level  slog.Level
	line   []byte
	cut    bool
}

func (o *guestOutput) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if room := abi.MaxLogLineBytes - len(o.line); len(chunk) > room {
			o.line = append(o.line, chunk[:room]...)
			o.cut = true
		} else {
			o.line = append(o.line, chunk...)
		}
		if i < 0 {
			break
		}
		if f := o.flush(); f != nil {
			// Written in a call (WASI fd_write): the call ends, as with the log function.
			panic(f)
		}
		p = p[i+1:]
	}
	return n, nil
}

func (o *guestOutput) flush() *budgetFault {
	if len(o.line) == 0 && !o.cut {
		return nil
	}
	st := o.inst.st
	ctx := context.Background()
	f := o.inst.emit(ctx, st, o.level, o.stream, o.line, o.cut)
	o.line, o.cut = o.line[:0], false
	return f
}

// emit logs one guest line, within the per-call budgets of the instance; over them the line
// is dropped and the fault returned (the caller ends the call with it, when in one).
func (in *instance) emit(ctx context.Context, st *callState, level slog.Level, stream string, line []byte, cut bool) *budgetFault {
	m := in.m
	if f := in.chargeOutput(st, len(line)); f != nil {
		return f
	}
	attrs := make([]slog.Attr, 0, 7)
	if st != nil && st.pluginType != "" {
		attrs = append(attrs, slog.String("plugin_type", st.pluginType), slog.String("plugin", st.plugin))
	}
	attrs = append(attrs, slog.String("handler", m.file), slog.String("stream", stream))
	if st != nil {
		attrs = append(attrs, slog.String("export", st.export))
	}
	if cut {
		attrs = append(attrs, slog.Bool("cut", true))
	}
	m.sb.log.LogAttrs(ctx, level, printable(string(line)), attrs...)
	return nil
}
