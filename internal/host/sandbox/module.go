package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/host/wasmbin"
	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/safetext"
)

// The exports a handler module must have, by index: FnValidate, FnRegister and FnDeregister
// are the exports a handler call runs (Module.Serve).
const (
	fnABIVersion = iota
	fnManifest
	FnValidate
	FnRegister
	FnDeregister
	numExports
)

var exportNames = [numExports]string{
	abi.ExportABIVersion, abi.ExportManifest, abi.ExportValidate, abi.ExportRegister, abi.ExportDeregister,
}

// Module is one compiled and validated handler module and its pool of instances: the sandbox
// of a handler. It knows nothing of the policies of revisions and failures; the policy layer
// (package policy, serve.go) serves it. Modules that the host's Run loads are served through stable per-type handlers in
// the registry; a Module returned by the host's LoadFile implements registration.Handler for the plugin
// types its manifest declares, and belongs to the caller, who closes it.
type Module struct {
	sb         *Sandbox
	file       string
	sum        string
	size       int64
	abiVersion uint32
	manifest   abi.Manifest
	caps       []string
	loadedAt   time.Time
	stats      *Stats

	rt           wazero.Runtime
	cm           wazero.CompiledModule
	releaseCache func() // after rt is closed (cachedirs.go)
	start        []string

	slots chan struct{}  // one token per live instance
	idle  chan *instance // instances not in a call

	mu       sync.Mutex
	inflight int  // calls and refills using the module
	retired  bool // no new calls; closed when inflight drops to zero
	closing  bool // the runtime is being closed
	done     chan struct{}
	forced   atomic.Bool  // closed with calls in progress: their next yield ends them
	mem      atomic.Int64 // bytes of its live instances' memory (memory.go)
	makeTime atomic.Int64 // nanoseconds the last new instance took to make (acquire)
	waitHook func()       // tests: called when acquire starts waiting for a busy instance

	// readOnly: the module's calls may read the key-value store but change nothing: kv writes
	// and plugin_call return abi.CodeDenied, and its calls are not recorded (a shadow
	// candidate's: SetReadOnly).
	readOnly bool
	// background: the module's calls run guest code only when no other call waits for a
	// turn (a shadow candidate's: SetBackground, sandbox.go).
	background bool
	// own is the module as a handler of its own (ValidatePlugin, RegisterPlugin,
	// DeRegisterPlugin of a module the host's LoadFile returned): the policy layer's (SetOwn);
	// nil for the modules served through the handlers of their types.
	own Server
}

// LoadedAt returns when the module was loaded.
func (m *Module) LoadedAt() time.Time { return m.loadedAt }

// Instances returns how many instances of the module are alive.
func (m *Module) Instances() int { return len(m.slots) }

// Stats returns the counters of the module's handler file (Load's).
func (m *Module) Stats() *Stats { return m.stats }

// SetReadOnly makes the module's calls read-only (a shadow candidate's): kv writes and
// plugin_call return abi.CodeDenied, and its calls are not recorded. It is set before the
// module serves any call.
func (m *Module) SetReadOnly() { m.readOnly = true }

// SetBackground makes the module's calls background work (a shadow candidate's): they run
// guest code only when no other call waits for a turn, and give the turn up at their next
// yield when one comes to wait (sandbox.go). It is set before the module serves any call.
func (m *Module) SetBackground() { m.background = true }

// File returns the path the module was loaded from.
func (m *Module) File() string { return m.file }

// SHA256 returns the hex SHA-256 of the module's bytes.
func (m *Module) SHA256() string { return m.sum }

// Size returns the size of the module's bytes.
func (m *Module) Size() int64 { return m.size }

// ABIVersion returns the ABI version the module declared.
func (m *Module) ABIVersion() uint32 { return m.abiVersion }

// Manifest returns the module's manifest.
func (m *Module) Manifest() abi.Manifest {
	mf := m.manifest
	mf.PluginTypes = slices.Clone(mf.PluginTypes)
	return mf
}

// PluginTypes returns the plugin types the module handles.
func (m *Module) PluginTypes() []string { return slices.Clone(m.manifest.PluginTypes) }

// Capabilities returns the capabilities the module uses (all of them granted).
func (m *Module) Capabilities() []string { return slices.Clone(m.caps) }

// Close stops new calls, waits for the calls in progress to return (until ctx is done), and
// closes the module's runtime. It is idempotent.
func (m *Module) Close(ctx context.Context) error {
	m.Retire()
	select {
	case <-m.done:
		return nil
	case <-ctx.Done():
	}
	m.forceClose()
	<-m.done
	return nil
}

// Enter counts a call in, unless the module is retired.
func (m *Module) Enter() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.retired {
		return false
	}
	m.inflight++
	return true
}

// Leave counts a call out; the last one out of a retired module closes it.
func (m *Module) Leave() {
	m.mu.Lock()
	m.inflight--
	closeNow := m.retired && m.inflight == 0 && !m.closing
	if closeNow {
		m.closing = true
	}
	m.mu.Unlock()
	if closeNow {
		m.sb.GoAsync(m.closeRuntime)
	}
}

// Retire stops new calls; the module is closed when the calls in progress return.
func (m *Module) Retire() {
	m.mu.Lock()
	if m.retired {
		m.mu.Unlock()
		return
	}
	m.retired = true
	closeNow := m.inflight == 0 && !m.closing
	if closeNow {
		m.closing = true
	}
	m.mu.Unlock()
	if closeNow {
		m.sb.GoAsync(m.closeRuntime)
	}
}

// forceClose closes the runtime now; calls in progress fail.
func (m *Module) forceClose() {
	m.forced.Store(true)
	m.mu.Lock()
	m.retired = true
	closeNow := !m.closing
	m.closing = true
	m.mu.Unlock()
	if closeNow {
		m.closeRuntime()
	}
}

func (m *Module) isClosing() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closing
}

func (m *Module) closeRuntime() {
	if err := m.rt.Close(context.Background()); err != nil {
		m.sb.log.Warn("closing handler runtime", "handler", m.file, "error", err)
	}
	m.releaseCache()
	m.sb.forget(m)
	m.mem.Store(0)
	close(m.done)
	m.sb.log.Debug("handler module closed", "handler", m.file, "sha256", m.sum)
}

// instance is one instantiation of a module; it runs one call at a time.
type instance struct {
	m      *Module
	mod    api.Module
	fns    [numExports]api.Function
	stack  [1]uint64
	stdout guestOutput
	stderr guestOutput
	st     *callState // the call in progress
	// Output lines and bytes logged in this call (log, stdout and stderr), against
	// Limits.LogLinesPerCall and LogBytesPerCall.
	outLines, outBytes int
	// idleSince is when the instance last went back to the pool (idle.go).
	idleSince time.Time
	// mem is the size of its memory as last read, counted in the module's and host's totals.
	mem int64
	// lm is its linear memory (memory.go), set when wazero makes it.
	lm *linearMemory
}

// guestGOGC is the GOGC every instance finds in its environment: the Go runtime of a Go handler
// reads it at start, and other languages ignore it. A pooled instance keeps all the linear
// memory its heap ever grew to (WebAssembly memory does not shrink), and at Go's default of 100
// a Go heap takes on 4 MB of garbage before its first collection: an instance that served a
// few thousand calls holds 88 pages, at 25 it holds 64, for no call cost the benchmarks see
// (docs/benchmarks-history.md, "The Go SDK's costs"); lower values hold no less. A handler that wants
// another value calls debug.SetGCPercent in its init. The environment, not the SDK: the only
// way for the SDK to set it without importing runtime/debug (390 KB more module, 8 more pages
// an instance) is to link to the runtime's unexported function by name, which a Go release may
// break in every handler's build.
const guestGOGC = "25"

func (m *Module) newInstance(ctx context.Context) (*instance, error) {
	t0 := time.Now()
	in := &instance{m: m}
	in.stdout = guestOutput{inst: in, stream: "stdout", level: slog.LevelInfo}
	in.stderr = guestOutput{inst: in, stream: "stderr", level: slog.LevelWarn}
	cfg := wazero.NewModuleConfig().
		WithName("").
		WithStdout(&in.stdout).
		WithStderr(&in.stderr).
		WithEnv("GOGC", guestGOGC).
		WithStartFunctions() // _initialize is called below, so that its traps are told apart
	st := &callState{m: m, inst: in, export: abi.ExportInitialize}
	in.st, in.outLines, in.outBytes = st, 0, 0
	ctx, cancel := context.WithTimeout(ctx, m.sb.cfg.CallTimeout)
	defer cancel()
	run, err := m.sb.begin(ctx, m.file, m.background, m.stats)
	if err != nil {
		return nil, fmt.Errorf("instantiating: waiting for a turn on the CPU: %w", err)
	}
	st.run = run
	sctx := experimental.WithMemoryAllocator(withState(ctx, st), in.allocator())
	mod, err := m.rt.InstantiateModule(sctx, m.cm, cfg)
	for _, name := range m.start {
		if err != nil {
			break
		}
		if _, err = mod.ExportedFunction(name).Call(sctx); err != nil {
			in.mod = mod
			if lim := int64(m.sb.cfg.Limits.MaxCallStack); in.callStackOver(lim) {
				err = &callStackFault{limit: lim, err: err}
			}
			in.mod = nil
			_ = mod.Close(context.Background())
			err = fmt.Errorf("%s: %w", name, err)
		}
	}
	m.sb.end(run)
	in.flush()
	in.st = nil
	if err == nil && st.over != nil {
		_ = mod.Close(context.Background())
		err = st.over
	}
	if err != nil && in.lm != nil {
		in.lm.Free() // wazero does not when the instantiation itself failed
	}
	in.lm.leave() // the instantiation's
	var tf *timeFault
	if err != nil {
		if ctx.Err() != nil || (errors.As(err, &tf) && errors.Is(tf, context.DeadlineExceeded)) {
			return nil, fmt.Errorf("instantiating timed out after %v: %w", m.sb.cfg.CallTimeout, context.DeadlineExceeded)
		}
		return nil, fmt.Errorf("instantiating: %w", err)
	}
	in.mod = mod
	for i, name := range exportNames {
		in.fns[i] = mod.ExportedFunction(name)
	}
	in.noteMemory()
	m.makeTime.Store(int64(time.Since(t0)))
	return in, nil
}

func (in *instance) flush() {
	in.stdout.flush()
	in.stderr.flush()
}

// call runs export fn with arg in the instance and returns its i32 result.
func (in *instance) call(ctx context.Context, st *callState, fn int, arg uint64) (int32, error) {
	st.inst = in
	in.st, in.outLines, in.outBytes = st, 0, 0
	stack := in.stack[:]
	stack[0] = arg
	key := st.pluginType
	if key == "" {
		key = in.m.file
	}
	run, err := in.m.sb.begin(ctx, key, in.m.background, in.m.stats)
	if err != nil {
		in.st = nil
		return 0, err
	}
	st.run = run
	in.lm.enter()
	err = in.fns[fn].CallWithStack(withState(ctx, st), stack)
	in.lm.leave()
	in.m.sb.end(run)
	st.cpu, st.mem = run.cpu, in.memSize()
	in.flush()
	in.st = nil
	if err == nil && st.over != nil { // the last line, flushed after the call, was over
		err = st.over
	}
	return api.DecodeI32(stack[0]), err
}

// acquire returns an idle instance, a new one when the pool has room, or waits for one.
//
// When every instance is in a call but the pool has room, it first waits for one to come back
// for as long as making a new one took last time: a call takes microseconds and a new
// instance milliseconds and megabytes (a Go handler's: 5-30 ms and 3.4 MB, growing to 4 MB
// and more), so a burst of short calls is served by the instances there are, no later than a
// new one would serve it, and the pool grows for calls that keep their instance longer.
func (m *Module) acquire(ctx context.Context) (*instance, error) {
	select {
	case in := <-m.idle:
		return in, nil
	default:
	}
	if n := len(m.slots); n > 0 && n < cap(m.slots) {
		if m.waitHook != nil {
			m.waitHook()
		}
		t := time.NewTimer(time.Duration(m.makeTime.Load()))
		select {
		case in := <-m.idle:
			t.Stop()
			return in, nil
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
	select {
	case in := <-m.idle:
		return in, nil
	case m.slots <- struct{}{}:
		in, err := m.newInstance(ctx)
		if err != nil {
			<-m.slots
			return nil, err
		}
		return in, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (m *Module) release(in *instance) {
	in.noteMemory()
	grown := in.mem > 0 // read before the instance goes back: another call may take it
	in.idleSince = time.Now()
	m.idle <- in
	if grown && m.sb.memoryUsed() > int64(m.sb.cfg.Limits.InstanceMemory) {
		m.sb.trimMemory()
	}
}

// discard throws an instance away and replaces it, off the caller's path.
func (m *Module) discard(in *instance) {
	m.sb.GoAsync(func() {
		if in.mod != nil {
			_ = in.mod.Close(context.Background())
			in.closed()
		}
		<-m.slots
		m.refill()
	})
}

// refill adds an instance to the pool if it has room, so the next call finds one ready.
func (m *Module) refill() {
	if !m.Enter() {
		return
	}
	defer m.Leave()
	select {
	case m.slots <- struct{}{}:
	default:
		return
	}
	in, err := m.newInstance(m.sb.ctx)
	if err != nil {
		<-m.slots
		m.sb.log.Warn("replacing a handler instance failed", "handler", m.file, "error", err)
		return
	}
	in.idleSince = time.Now()
	m.idle <- in
}

// Policy is what the policy layer over the sandbox (package policy, serve.go) says around one
// handler call: the one interface between the two. The sandbox asks it, once the call is begun and counted,
// whether the call may run, and tells it how the call ended, before the call's record goes to
// the Recorder.
type Policy interface {
	// Admit lets a call of the module at file run (nil), or fails it at once with the error;
	// mark is handed back with its outcome (the quarantine's probe).
	Admit(file string) (mark bool, err error)
	// Refused: the call Admit failed ended with err, counted as a failure of the file.
	Refused(err error)
	// Outcome: the call of export fn for plugin p that Admit let through (with its mark) ran
	// and ended with err.
	Outcome(fn int, p registration.PluginInfo, mark bool, err error)
}

// Serve is a handler call in the sandbox: module m runs export fn (FnValidate, FnRegister,
// FnDeregister) for plugin p of pluginType, and pol, the policy layer, has its say; the caller
// has entered m (Enter). The steps, in order: the call begins (begin: its request, counted, its
// record started), pol admits it or fails it at once, it runs (call), pol hears the outcome, and
// the record is handed to the Recorder (endRecord).
func (m *Module) Serve(ctx context.Context, fn int, pluginType string, p registration.PluginInfo, pol Policy) (published map[string]string, err error) {
	st, err := m.begin(fn, pluginType, p)
	if err != nil {
		return nil, err
	}
	ctx, span := m.startSpan(ctx, fn, st)
	defer func() {
		m.endSpan(span, st, err)
		m.endRecord(st, p, published, err)
	}()
	mark, err := pol.Admit(m.file)
	if err != nil {
		m.stats.failures.Add(1)
		pol.Refused(err)
		return nil, err
	}
	published, err = m.call(ctx, st, fn, p)
	pol.Outcome(fn, p, mark, err)
	if err != nil {
		return nil, err
	}
	return published, nil
}

// begin is the first step of a handler call in the sandbox (serve): the state of a call of
// export fn for plugin p of pluginType, its request encoded (ErrInvalidInfo if it is over
// abi.MaxRequestBytes), its record started when the host records the type, and the call
// counted in the file's calls.
func (m *Module) begin(fn int, pluginType string, p registration.PluginInfo) (*callState, error) {
	req := abi.AppendPluginRequest(nil, abi.PluginRequest{
		Socket: p.Socket, Type: p.Type, Name: p.Name, Endpoint: p.Endpoint, Versions: p.Versions,
	})
	if len(req) > abi.MaxRequestBytes {
		return nil, fmt.Errorf("%w: plugin %q: request of %d bytes over the handler limit of %d",
			registration.ErrInvalidInfo, p.Name, len(req), abi.MaxRequestBytes)
	}
	st := &callState{
		m: m, export: exportNames[fn], pluginType: pluginType,
		plugin: p.Name, endpoint: p.Endpoint, socket: p.Socket, req: req,
	}
	if fn == FnRegister {
		st.published = make(map[string]string)
	}
	m.startRecord(st)
	m.stats.calls.Add(1)
	return st, nil
}

// call is the sandbox's side of a handler call: module m runs st's export for plugin p (run),
// and its answer becomes the decision: nil (accepted, with what a registration published),
// registration.ErrRejected with the handler's reason, ErrHandlerFailed, or the error of the
// run (a trap, a timeout, a budget).
func (m *Module) call(ctx context.Context, st *callState, fn int, p registration.PluginInfo) (map[string]string, error) {
	status, err := m.run(ctx, st, fn, uint64(len(st.req)))
	if err != nil {
		return nil, err
	}
	st.status = status
	switch status {
	case abi.StatusRejected:
		m.stats.rejected.Add(1)
		return nil, fmt.Errorf("%w: %s", registration.ErrRejected, reason(st.result))
	case abi.StatusError: // run refused any other status
		err := fmt.Errorf("%w: %s %s for plugin %q: %s", ErrHandlerFailed, m.file, st.export, p.Name, reason(st.result))
		m.stats.failed(err)
		return nil, err
	}
	return st.published, nil
}

// checkAnswer says what is wrong with a guest's answer to a plugin call, or "".
func checkAnswer(status int32, resultOver int) string {
	switch {
	case resultOver > 0:
		return fmt.Sprintf("result of %d bytes over the limit of %d bytes", resultOver, abi.MaxResultBytes)
	case status != abi.StatusOK && status != abi.StatusRejected && status != abi.StatusError:
		return fmt.Sprintf("unknown status %d", status)
	}
	return ""
}

// reason is the text of a guest's result, as said to the plugin or logged.
func reason(b []byte) string {
	if len(b) == 0 {
		return "(no reason given)"
	}
	return printable(string(b))
}

// run calls export fn in a pooled instance within CallTimeout and returns its status. A
// failed call (trap, timeout) or a garbage answer (unknown status, oversized result) is an
// error, and the instance is thrown away.
func (m *Module) run(ctx context.Context, st *callState, fn int, arg uint64) (int32, error) {
	limit := m.sb.cfg.CallTimeout
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < limit {
		limit = time.Until(dl)
	}
	callCtx, cancel := context.WithTimeout(ctx, m.sb.cfg.CallTimeout)
	defer cancel()
	in, err := m.acquire(callCtx)
	if err != nil {
		return 0, m.callError(ctx, callCtx, st, limit, err)
	}
	// The code the host added to the guest's (wasmbin.Instrument) ends the call at its deadline.
	status, err := in.call(callCtx, st, fn, arg)
	if err != nil {
		if lim := int64(m.sb.cfg.Limits.MaxCallStack); in.callStackOver(lim) {
			err = &callStackFault{limit: lim, err: err}
		}
		m.discard(in)
		return 0, m.callError(ctx, callCtx, st, limit, err)
	}
	if bad := checkAnswer(status, st.resultOver); bad != "" {
		m.discard(in)
		err := fmt.Errorf("%w from %s %s: %s", ErrBadResult, m.file, st.export, bad)
		m.stats.failed(err)
		return 0, err
	}
	m.release(in)
	return status, nil
}

// callError turns the error of a failed guest call into the host's errors and counts it.
func (m *Module) callError(parent, callCtx context.Context, st *callState, limit time.Duration, err error) error {
	what := fmt.Sprintf("%s %s", m.file, st.export)
	if st.plugin != "" {
		what += fmt.Sprintf(" for plugin %q", st.plugin)
	}
	var fault *guestFault
	var over *budgetFault
	var stack *callStackFault
	var exit *sys.ExitError
	var tf *timeFault
	switch {
	case errors.Is(parent.Err(), context.Canceled):
		return fmt.Errorf("host: call to %s canceled: %w", what, context.Canceled)
	case errors.As(err, &tf) && tf.cpu:
		m.stats.timeouts.Add(1)
		m.stats.failures.Add(1)
		err := fmt.Errorf("host: handler %s %w", what, tf)
		m.stats.setLast(err)
		return err
	case errors.As(err, &tf) && errors.Is(tf.err, ErrRetired):
		return fmt.Errorf("%w: handler %s was closed during the call", ErrRetired, what)
	case callCtx.Err() != nil || (errors.As(err, &tf) && errors.Is(tf.err, context.DeadlineExceeded)):
		m.stats.timeouts.Add(1)
		m.stats.failures.Add(1)
		err := fmt.Errorf("host: handler %s timed out after %v: %w", what, limit.Round(time.Millisecond), context.DeadlineExceeded)
		m.stats.setLast(err)
		return err
	case m.isClosing():
		return fmt.Errorf("%w: handler %s was closed during the call", ErrRetired, what)
	case errors.As(err, &over):
		err = fmt.Errorf("%w: %s %w", ErrBudget, what, over)
	case errors.As(err, &stack):
		err = fmt.Errorf("%w in %s: %v", ErrTrap, what, stack)
	case errors.As(err, &fault):
		err = fmt.Errorf("%w in %s: bad pointer: %v", ErrTrap, what, fault)
	case errors.As(err, &exit):
		err = fmt.Errorf("%w in %s: guest exited with code %d", ErrTrap, what, exit.ExitCode())
	default:
		err = fmt.Errorf("%w in %s: %v", ErrTrap, what, err)
	}
	err = boundError(err)
	m.stats.traps.Add(1)
	m.stats.failures.Add(1)
	m.stats.setLast(err)
	return err
}

// maxErrorText bounds the text of a failed call's error: wazero's message for a trap holds a
// stack trace of up to 30 frames, each named from the module's name section, a name as long
// as the module makes it. The error is the handler's and the socket's last error and a log
// line, so its text is cut (safetext.Cut) to this many bytes where it is made.
const maxErrorText = 4 << 10

// boundedError is an error whose text was cut to maxErrorText; errors.Is and As see the
// original.
type boundedError struct {
	msg string
	err error
}

func (e *boundedError) Error() string { return e.msg }
func (e *boundedError) Unwrap() error { return e.err }

// boundError returns err, its text cut to maxErrorText bytes when it is longer.
func boundError(err error) error {
	if msg := err.Error(); len(msg) > maxErrorText {
		return &boundedError{msg: safetext.Cut(msg, maxErrorText), err: err}
	}
	return err
}

// Stats are the counters of one handler file, kept across the versions of its module: the
// caller of Load gives them (the host keeps one per handler file).
type Stats struct {
	calls, rejected, failures, traps, timeouts atomic.Uint64
	cpu, throttled                             atomic.Int64 // nanoseconds: of guest code, and waiting for a turn (sandbox.go)
	last                                       atomic.Pointer[LastError]
	kv                                         kvQuota // the file's key-value stores
}

// LastError is the last error of a handler file: a failed call, or a refusal of the file.
type LastError struct {
	Msg     string
	At      time.Time
	Refusal string // the reason (Refused*) when it is a refusal of the file
}

// Counts are what a handler file's Stats have counted.
type Counts struct {
	Calls, Rejected, Failures, Traps, Timeouts uint64
	CPU, Throttled                             time.Duration // of guest code, and waiting for a turn
	Last                                       *LastError    // nil when none (or cleared)
	KVKeys                                     int           // what the key-value stores of its types hold
	KVBytes                                    int64
}

// Counts returns what s has counted.
func (s *Stats) Counts() Counts {
	c := Counts{
		Calls: s.calls.Load(), Rejected: s.rejected.Load(), Failures: s.failures.Load(),
		Traps: s.traps.Load(), Timeouts: s.timeouts.Load(),
		CPU: time.Duration(s.cpu.Load()), Throttled: time.Duration(s.throttled.Load()),
		Last: s.last.Load(),
	}
	c.KVKeys, c.KVBytes = kvUsage(&s.kv)
	return c
}

// SetLast makes e the file's last error (nil: none).
func (s *Stats) SetLast(e *LastError) { s.last.Store(e) }

// ClearLast forgets the file's last error if it is still e.
func (s *Stats) ClearLast(e *LastError) { s.last.CompareAndSwap(e, nil) }

func (s *Stats) setLast(err error) {
	s.last.Store(&LastError{Msg: err.Error(), At: time.Now()})
}

func (s *Stats) failed(err error) {
	s.failures.Add(1)
	s.setLast(err)
}

// moduleError is a load failure: ErrBadModule, and sometimes a more precise sentinel. Every
// refusal of a handler file is one, with the reason counted in the metrics.
type moduleError struct {
	file   string
	msg    string
	reason string // Refused*
	also   error
	plain  error // when set, the error itself (not ErrBadModule): an unreadable or insecure file
}

func (e *moduleError) Error() string {
	if e.plain != nil {
		return e.plain.Error()
	}
	return ErrBadModule.Error() + " " + e.file + ": " + e.msg
}

func (e *moduleError) Unwrap() []error {
	switch {
	case e.plain != nil:
		return []error{e.plain}
	case e.also != nil:
		return []error{ErrBadModule, e.also}
	}
	return []error{ErrBadModule}
}

// The reasons the sandbox refuses a handler file, for the wasmhost_handler_refusals_total
// metric (the host adds its own: a conflict, a binding, the directory).
const (
	RefusedNotRegular     = "not_regular"     // a FIFO, device, socket or directory named *.wasm
	RefusedUnreadable     = "unreadable"      // it could not be opened or read
	RefusedInsecure       = "insecure"        // others than the daemon's user may change it
	RefusedTooLarge       = "too_large"       // over handlers.limits.maxModuleSize
	RefusedInvalid        = "invalid"         // not WebAssembly, or not valid
	RefusedStructure      = "structure"       // code over a structural limit (functions, nesting, ...)
	RefusedCompileTimeout = "compile_timeout" // the compile ran over handlers.limits.compileTimeout
	RefusedCompileBusy    = "compile_busy"    // too many abandoned compiles still running; retried
	RefusedMemory         = "memory"          // declares more memory than handlers.memoryLimit
	RefusedABI            = "abi"             // exports, imports, ABI version or manifest
	RefusedNotGranted     = "not_granted"     // imports a capability not granted
	RefusedTrap           = "trap"            // trapped while it was instantiated or described
	RefusedTimeout        = "timeout"         // ran over the call timeout while being loaded
)

// RefusalReason returns the reason (a Refused* constant) of a load error, or "" for nil.
func RefusalReason(err error) string {
	var me *moduleError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &me) && me.reason != "":
		return me.reason
	case errors.Is(err, ErrInsecure):
		return RefusedInsecure
	case errors.Is(err, ErrNotGranted):
		return RefusedNotGranted
	case errors.Is(err, ErrTrap):
		return RefusedTrap
	case errors.Is(err, ErrBadModule):
		return RefusedABI
	}
	return RefusedUnreadable
}

func badModule(file string, also error, format string, args ...any) error {
	return &moduleError{file: file, msg: safetext.Cut(fmt.Sprintf(format, args...), maxErrorText), also: also}
}

// refuse is badModule with a reason.
// Refuse is the refusal of a handler file for a reason of the host's own (RefusalReason
// returns it): an error that matches ErrBadModule, names file and says why.
func Refuse(file, reason, why string) error { return refuse(file, reason, nil, "%s", why) }

func refuse(file, reason string, also error, format string, args ...any) error {
	return &moduleError{file: file, reason: reason, msg: safetext.Cut(fmt.Sprintf(format, args...), maxErrorText), also: also}
}

// Signature writes a function's WebAssembly type as the sandbox's messages and `wasmhost handler
// inspect` show it: "(i32, i32) -> (i32)".
func Signature(params, results []api.ValueType) string {
	names := func(ts []api.ValueType) string {
		s := make([]string, len(ts))
		for i, t := range ts {
			s[i] = api.ValueTypeName(t)
		}
		return "(" + strings.Join(s, ", ") + ")"
	}
	return names(params) + " -> " + names(results)
}

// Load compiles bin, checks its exports and imports, instantiates it once and asks for its
// ABI version and manifest. Every failure names file and what is wrong. Its calls and
// failures are counted in st, the counters of its handler file.
func (sb *Sandbox) Load(ctx context.Context, file string, bin []byte, st *Stats) (_ *Module, err error) {
	t0 := time.Now()
	sum := sha256.Sum256(bin)
	info, err := wasmbin.Scan(bin)
	if err != nil {
		return nil, refuse(file, RefusedInvalid, nil, "module not valid WebAssembly: %v", err)
	}
	if info.MemMin > uint64(sb.limitPages) {
		return nil, refuse(file, RefusedMemory, nil, "memory minimum %d pages (%d KiB) over the limit %d pages (%d KiB)",
			info.MemMin, info.MemMin*64, sb.limitPages, sb.limitPages*64)
	}
	for _, imp := range info.Imports {
		if imp.Kind != 0 {
			return nil, badModule(file, nil, "imports %s %s.%s: a handler may import only host functions",
				imp.KindName(), imp.Module, imp.Name)
		}
	}

	if _, bad := wasmbin.Check(bin, sb.cfg.structure()); bad != "" {
		return nil, refuse(file, RefusedStructure, nil, "refused before compiling: %s", bad)
	}
	guarded, err := sb.instrument(file, bin)
	if err != nil {
		return nil, err
	}

	rtCfg, release, err := sb.moduleRuntimeConfig(hex.EncodeToString(sum[:]))
	if err != nil {
		return nil, err
	}
	rt := wazero.NewRuntimeWithConfig(ctx, rtCfg)
	abandoned := false
	defer func() {
		if err != nil && !abandoned {
			_ = rt.Close(context.Background())
			release() // a module refused is not kept in the cache
		}
	}()
	cm, abandoned, err := sb.compile(rt, release, file, guarded)
	if err != nil {
		return nil, err
	}
	compiled := time.Since(t0)

	exports := cm.ExportedFunctions()
	if msg := commandExport(exports); msg != "" {
		return nil, badModule(file, nil, "%s", msg)
	}
	for _, name := range abi.RequiredExports {
		if _, ok := exports[name]; !ok {
			return nil, badModule(file, nil, "missing export %s", name)
		}
	}
	for name, sig := range abi.ExportSignatures {
		def, ok := exports[name]
		if !ok {
			continue
		}
		want := Signature(valueTypes(sig.Params), valueTypes(sig.Results))
		if got := Signature(def.ParamTypes(), def.ResultTypes()); got != want {
			return nil, badModule(file, nil, "export %s has signature %s want %s", name, got, want)
		}
	}
	if _, ok := cm.ExportedMemories()[abi.ExportMemory]; !ok {
		return nil, badModule(file, nil, "missing export %s (the module's memory)", abi.ExportMemory)
	}
	for _, mem := range cm.ImportedMemories() {
		mod, name, _ := mem.Import()
		return nil, badModule(file, nil, "imports memory %s.%s: a handler may import only host functions", mod, name)
	}

	var (
		wasiImports []api.FunctionDefinition
		hostImports = map[string]bool{}
		caps        []string
	)
	for _, def := range cm.ImportedFunctions() {
		mod, name, _ := def.Import()
		switch mod {
		case abi.ImportModule:
			sig, ok := abi.ImportSignatures[name]
			if !ok || hostFuncs[name] == nil {
				return nil, badModule(file, nil, "imports unknown host function %s.%s", mod, name)
			}
			want := Signature(valueTypes(sig.Params), valueTypes(sig.Results))
			if got := Signature(def.ParamTypes(), def.ResultTypes()); got != want {
				return nil, badModule(file, nil, "imports %s.%s with signature %s want %s", mod, name, got, want)
			}
			if c := CapabilityOf(name); c != "" {
				if !sb.grantedAnywhere(c) {
					return nil, badModule(file, ErrNotGranted, "imports %s.%s which is not granted for any plugin type (capability %q)", mod, name, c)
				}
				if !slices.Contains(caps, c) {
					caps = append(caps, c)
				}
			}
			hostImports[name] = true
		case wasi_snapshot_preview1.ModuleName:
			wasiImports = append(wasiImports, def)
		case wasmbin.SandboxModule: // added by the host (wasmbin.Instrument): a module's own is refused before
		default:
			return nil, badModule(file, nil, "imports unknown host function %s.%s", mod, name)
		}
	}
	sort.Strings(caps)
	if len(wasiImports) > 0 {
		// WASI with no mounts, no environment, no arguments and wazero's fake clocks and
		// random source: enough for a Go or TinyGo guest, and nothing of the node.
		if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
			return nil, fmt.Errorf("host: instantiating WASI for %s: %w", file, err)
		}
		defs := rt.Module(wasi_snapshot_preview1.ModuleName).ExportedFunctionDefinitions()
		for _, def := range wasiImports {
			mod, name, _ := def.Import()
			have, ok := defs[name]
			if !ok {
				return nil, badModule(file, nil, "imports unknown host function %s.%s", mod, name)
			}
			want := Signature(have.ParamTypes(), have.ResultTypes())
			if got := Signature(def.ParamTypes(), def.ResultTypes()); got != want {
				return nil, badModule(file, nil, "imports %s.%s with signature %s want %s", mod, name, got, want)
			}
		}
	}

	m := &Module{
		sb: sb, file: file, sum: hex.EncodeToString(sum[:]), size: int64(len(bin)),
		caps: caps, stats: st, rt: rt, cm: cm, releaseCache: release,
		slots: make(chan struct{}, sb.cfg.PoolSize),
		idle:  make(chan *instance, sb.cfg.PoolSize),
		done:  make(chan struct{}),
	}
	if _, ok := exports[abi.ExportInitialize]; ok {
		m.start = []string{abi.ExportInitialize}
	}
	if err := instantiateSandbox(ctx, rt, m); err != nil {
		return nil, fmt.Errorf("host: instantiating the sandbox's functions for %s: %w", file, err)
	}
	if len(hostImports) > 0 {
		b := rt.NewHostModuleBuilder(abi.ImportModule)
		names := make([]string, 0, len(hostImports))
		for name := range hostImports {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			fn, sig := hostFuncs[name], abi.ImportSignatures[name]
			b.NewFunctionBuilder().
				WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
					st := stateOf(ctx)
					if st != nil {
						st.hostCalls++
					}
					if st.pastDeadline() {
						panic(st.run.fault(ctx, nil))
					}
					fn(m, ctx, mod, stack)
				}), valueTypes(sig.Params), valueTypes(sig.Results)).
				Export(name)
		}
		if _, err := b.Instantiate(ctx); err != nil {
			return nil, fmt.Errorf("host: instantiating host functions for %s: %w", file, err)
		}
	}

	m.slots <- struct{}{}
	in, err := m.newInstance(ctx)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, refuse(file, RefusedTimeout, context.DeadlineExceeded, "%v", err)
		}
		return nil, badModule(file, ErrTrap, "%v", err)
	}
	// A first call of each export that describes the module, in the one instance.
	describe := func(fn int) (int32, []byte, error) {
		st := &callState{m: m, export: exportNames[fn]}
		callCtx, cancel := context.WithTimeout(ctx, sb.cfg.CallTimeout)
		defer cancel()
		status, err := in.call(callCtx, st, fn, 0)
		switch {
		case err != nil && callCtx.Err() != nil:
			return 0, nil, refuse(file, RefusedTimeout, nil, "%s timed out after %v", exportNames[fn], sb.cfg.CallTimeout)
		case err != nil:
			return 0, nil, badModule(file, ErrTrap, "%s failed: %v", exportNames[fn], err)
		case st.resultOver > 0:
			return 0, nil, badModule(file, nil, "%s set a result of %d bytes, over the limit of %d bytes",
				exportNames[fn], st.resultOver, abi.MaxResultBytes)
		}
		return status, st.result, nil
	}
	version, _, err := describe(fnABIVersion)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(abi.SupportedVersions, uint32(version)) {
		return nil, badModule(file, nil, "ABI version %d not supported (supported: %s)", uint32(version), versionList())
	}
	m.abiVersion = uint32(version)
	status, raw, err := describe(fnManifest)
	if err != nil {
		return nil, err
	}
	if status != abi.StatusOK {
		return nil, badModule(file, nil, "%s returned status %d (%s), want %d", abi.ExportManifest, status, reason(raw), abi.StatusOK)
	}
	mf, err := abi.DecodeManifest(raw)
	if err != nil {
		return nil, badModule(file, nil, "manifest malformed: %v", err)
	}
	if err := checkManifest(mf); err != nil {
		return nil, badModule(file, nil, "%v", err)
	}
	mf.Name, mf.Version = printable(mf.Name), printable(mf.Version) // shown in logs and tables
	m.manifest = mf
	for _, c := range caps {
		for _, t := range mf.PluginTypes {
			if !sb.cfg.granted(t, c) {
				return nil, badModule(file, ErrNotGranted, "imports %s.%s which is not granted for plugin type %s",
					abi.ImportModule, strings.Join(abi.CapabilityImports[c], ", "), t)
			}
		}
	}
	in.idleSince = time.Now()
	m.idle <- in
	m.loadedAt = time.Now()
	if err := sb.track(m); err != nil {
		return nil, err
	}
	sb.log.Info("handler module loaded", "handler", file, "plugin_types", mf.PluginTypes,
		"name", mf.Name, "version", mf.Version, "size", m.size, "sha256", m.sum,
		"abi_version", m.abiVersion, "capabilities", caps,
		"compile", compiled.Round(time.Microsecond), "total", time.Since(t0).Round(time.Microsecond))
	return m, nil
}

func checkManifest(mf abi.Manifest) error {
	if len(mf.PluginTypes) == 0 {
		return errors.New("manifest declares no plugin type")
	}
	for i, t := range mf.PluginTypes {
		if t == "" {
			return errors.New("manifest declares an empty plugin type")
		}
		if len(t) > abi.MaxKeyBytes || strings.ContainsFunc(t, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return fmt.Errorf("manifest declares a malformed plugin type %q", t)
		}
		if slices.Contains(mf.PluginTypes[:i], t) {
			return fmt.Errorf("manifest declares plugin type %q twice", t)
		}
	}
	return nil
}

func versionList() string {
	s := make([]string, len(abi.SupportedVersions))
	for i, v := range abi.SupportedVersions {
		s[i] = fmt.Sprint(v)
	}
	return strings.Join(s, ", ")
}
