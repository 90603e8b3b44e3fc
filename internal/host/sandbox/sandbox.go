package sandbox

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"golang.org/x/sys/unix"

	"github.com/wasmhost/wasmhost/internal/host/wasmbin"
)

// Guest code runs under three rules, applied where the code the rewrite adds calls the host
// (wasmbin.Instrument) and where a call starts and ends:
//
//   - A deadline: every call ends at its deadline (handlers.callTimeout) whatever its code
//     does; the first yield past it ends the call, and no host function succeeds after it.
//   - A CPU budget: a call that has used handlers.limits.callCPU of CPU time ends, as one past
//     its deadline does. A call's CPU time is counted while it holds a turn (below), from one
//     yield to the next by the thread's own clock (CLOCK_THREAD_CPUTIME_ID), and from the
//     call's start to its first yield and from its last yield to its return by the time that
//     passed: the thread's clock is not in the vDSO, and reading it at each call's start and
//     end cost 0.9 µs, 60 % of a small call, while a call that runs long reaches a yield every
//     50-200 µs. The time a call waits for a turn, or for a plugin it called, is not counted.
//   - A turn on the CPU: at most handlers.limits.guestThreads calls run guest code at once
//     (by default one core fewer than the machine has, at least one), so that the daemon's
//     own work (the admin API, probes, registrations, the garbage collector) always has a
//     core. A call that has run a time slice (guestSlice) gives its turn up at its next yield
//     when another waits; the next turn goes to the waiting call whose plugin type has used
//     the least CPU lately, so that a type whose calls burn CPU waits behind the others.
//     The time a call waits for its turn is counted per type as throttled time.
//   - Background calls never in the way. The calls of a background module (a shadow
//     candidate's: SetBackground) have CPU accounts of their own and get a turn only when no
//     other call waits for one; a turn is only lent to them: a call that comes to wait takes
//     it over at once, and the background call waits for another at its next yield. Until
//     then one more thread than guestThreads runs guest code. A shadow's guest code is
//     anything but regular between two yields: one that grew its memory to 64 MiB and filled
//     it held its turn for 16-130 ms at a time (page faults, each waiting for the kernel's
//     lock of the process's mappings while another instance was unmapped), and moved the
//     serving revision's p99 from 2 ms to 223 ms (issue 27).

// guestSlice is how long a call runs guest code before it gives its turn up to a waiting one.
const guestSlice = time.Millisecond

// backgroundKey is the CPU account of key's background calls: no plugin type or file name
// begins with a NUL.
func backgroundKey(key string) string { return "\x00" + key }

// cpuHalfLife is how fast a plugin type's recent CPU use, which orders the waiting calls,
// is forgotten.
const cpuHalfLife = time.Second

// ErrCPUBudget: a call used its CPU budget (handlers.limits.callCPU). It also matches
// context.DeadlineExceeded: the call ran out of time, counted in CPU.
var ErrCPUBudget = errors.New("host: CPU budget exceeded")

// timeFault is the panic value of a yield that finds its call out of time (past its deadline,
// or over its CPU budget) or canceled: wazero turns it into the error of the guest call.
type timeFault struct {
	cpu   bool          // the CPU budget, not the deadline
	limit time.Duration // the deadline's or the budget's length
	err   error         // context.DeadlineExceeded, context.Canceled or ErrRetired
}

func (f *timeFault) Error() string {
	switch {
	case f.cpu:
		return fmt.Sprintf("used more than %v of CPU (handlers.limits.callCPU)", f.limit)
	case errors.Is(f.err, context.DeadlineExceeded) && f.limit > 0:
		return fmt.Sprintf("ran past its deadline of %v (handlers.callTimeout)", f.limit.Round(time.Millisecond))
	case errors.Is(f.err, context.DeadlineExceeded):
		return "ran past its deadline"
	}
	return f.err.Error()
}

func (f *timeFault) Unwrap() []error {
	if f.cpu {
		return []error{ErrCPUBudget, context.DeadlineExceeded}
	}
	return []error{f.err}
}

// typeCPU is the CPU accounting of one plugin type (or, for calls outside a plugin's, of one
// handler file: instantiation and the describing calls).
type typeCPU struct {
	background bool         // the account of background calls (backgroundKey)
	cpu        atomic.Int64 // nanoseconds of CPU used by its calls' guest code
	throttled  atomic.Int64 // nanoseconds its calls waited for a turn
	// recent is its CPU use with a half-life of cpuHalfLife, as of at; under cpuGate.mu.
	recent float64
	at     time.Time
}

// decayed returns t's recent CPU use as of now; cpuGate.mu is held.
func (t *typeCPU) decayed(now time.Time) float64 {
	if !t.at.IsZero() {
		t.recent *= math.Exp2(-float64(now.Sub(t.at)) / float64(cpuHalfLife))
	}
	t.at = now
	return t.recent
}

// cpuGate hands out the turns to run guest code.
type cpuGate struct {
	mu      sync.Mutex
	free    int
	waiters []*gateWaiter
	types   map[string]*typeCPU
	lent    []*lentTurn // the turns background calls hold, which another call takes over
}

// lentTurn is the turn of a background call; taken, when another call took it over.
type lentTurn struct{ taken bool }

type gateWaiter struct {
	t     *typeCPU
	ready chan struct{} // closed when the turn is handed to it
	lent  *lentTurn     // the turn, lent, when it is a background call's
	seq   uint64
}

var gateSeq atomic.Uint64

func newCPUGate(threads int) *cpuGate {
	return &cpuGate{free: max(threads, 1), types: make(map[string]*typeCPU)}
}

// account returns the accounting of key (a plugin type, or a file).
func (g *cpuGate) account(key string) *typeCPU {
	g.mu.Lock()
	defer g.mu.Unlock()
	t := g.types[key]
	if t == nil {
		t = &typeCPU{background: strings.HasPrefix(key, "\x00")}
		g.types[key] = t
	}
	return t
}

// acquire waits for a turn, until ctx is done. A background call's turn is lent: it is
// returned, and the caller gives it to release.
func (g *cpuGate) acquire(ctx context.Context, t *typeCPU) (*lentTurn, error) {
	g.mu.Lock()
	if g.free > 0 && len(g.waiters) == 0 {
		g.free--
		l := g.lendLocked(t)
		g.mu.Unlock()
		return l, nil
	}
	if n := len(g.lent); n > 0 && !t.background {
		g.lent[n-1].taken = true
		g.lent = g.lent[:n-1]
		g.mu.Unlock()
		return nil, nil
	}
	w := &gateWaiter{t: t, ready: make(chan struct{}), seq: gateSeq.Add(1)}
	g.waiters = append(g.waiters, w)
	g.mu.Unlock()
	start := time.Now()
	defer func() { t.throttled.Add(int64(time.Since(start))) }()
	select {
	case <-w.ready:
		return w.lent, nil
	case <-ctx.Done():
	}
	g.mu.Lock()
	for i, x := range g.waiters {
		if x == w {
			g.waiters = append(g.waiters[:i], g.waiters[i+1:]...)
			g.mu.Unlock()
			return nil, ctx.Err()
		}
	}
	g.mu.Unlock()
	// The turn was handed over meanwhile: pass it on.
	<-w.ready
	g.release(w.lent)
	return nil, ctx.Err()
}

// lendLocked records the turn t's call was given as lent when it is a background call.
func (g *cpuGate) lendLocked(t *typeCPU) *lentTurn {
	if !t.background {
		return nil
	}
	l := &lentTurn{}
	g.lent = append(g.lent, l)
	return l
}

// release gives a turn back (l: the lent turn of a background call, nothing to give when
// another call took it over): to the waiting call whose type used the least CPU lately, a
// background call only when no other waits.
func (g *cpuGate) release(l *lentTurn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if l != nil {
		if l.taken {
			return
		}
		g.lent = slices.DeleteFunc(g.lent, func(x *lentTurn) bool { return x == l })
	}
	if len(g.waiters) == 0 {
		g.free++
		return
	}
	now := time.Now()
	best := 0
	for i, w := range g.waiters[1:] {
		b := g.waiters[best]
		if w.t.background != b.t.background {
			if !w.t.background {
				best = i + 1
			}
			continue
		}
		if r, rb := w.t.decayed(now), b.t.decayed(now); r < rb || (r == rb && w.seq < b.seq) {
			best = i + 1
		}
	}
	w := g.waiters[best]
	g.waiters = append(g.waiters[:best], g.waiters[best+1:]...)
	w.lent = g.lendLocked(w.t)
	close(w.ready)
}

// yieldTo reports whether a call of account t that has held its turn (l, when lent) for held
// gives it up at a yield: at once when another call took it over, after a slice when a call
// waits that would get it (a background call's turn goes to any).
func (g *cpuGate) yieldTo(t *typeCPU, l *lentTurn, held time.Duration) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if l != nil && l.taken {
		return true
	}
	if held < guestSlice {
		return false
	}
	for _, w := range g.waiters {
		if t.background || !w.t.background {
			return true
		}
	}
	return false
}

// charge adds d of CPU to t.
func (g *cpuGate) charge(t *typeCPU, d time.Duration) {
	t.cpu.Add(int64(d))
	g.mu.Lock()
	t.recent = t.decayed(time.Now()) + float64(d)
	g.mu.Unlock()
}

// guestRun is the bookkeeping of one guest call's time: its deadline, its CPU and its turn.
type guestRun struct {
	deadline time.Time
	timeout  time.Duration // the deadline's length, for messages
	cpuLimit time.Duration
	t        *typeCPU
	st       *Stats        // the handler file's counters
	cpu      time.Duration // used so far
	resumed  time.Time     // when guest code last resumed
	cpuAt    time.Duration // the thread's CPU time then, when read (at a yield); -1 otherwise
	turnAt   time.Time     // when the call got its turn
	lent     *lentTurn     // the turn, when it is lent (a background call's)
}

// begin waits for a turn for a call to be made under ctx (whose deadline is the call's) on
// behalf of key (a background call when background), and starts counting its CPU. The caller
// calls end after the call.
func (sb *Sandbox) begin(ctx context.Context, key string, background bool, st *Stats) (*guestRun, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if background {
		key = backgroundKey(key)
	}
	g := &guestRun{cpuLimit: time.Duration(sb.cfg.Limits.CallCPU), t: sb.gate.account(key), st: st}
	if dl, ok := ctx.Deadline(); ok {
		g.deadline, g.timeout = dl, time.Until(dl)
	}
	if err := sb.turn(ctx, g); err != nil {
		return nil, err
	}
	return g, nil
}

// turn waits for a turn on the CPU for g, counting the wait as throttled, and marks the
// resumption of its guest code.
func (sb *Sandbox) turn(ctx context.Context, g *guestRun) error {
	start := time.Now()
	l, err := sb.gate.acquire(ctx, g.t)
	g.lent = l
	if g.st != nil {
		g.st.throttled.Add(int64(time.Since(start)))
	}
	if err != nil {
		return err
	}
	g.turnAt = time.Now()
	g.mark()
	return nil
}

// mark notes when guest code resumes, without the thread's CPU time (a system call): the
// segment up to the next yield is counted by the clock.
func (g *guestRun) mark() {
	g.resumed, g.cpuAt = time.Now(), -1
}

// markCPU is mark with the thread's CPU time, at a yield: the call runs on, and the segment up
// to the next yield is counted in CPU time.
func (g *guestRun) markCPU() {
	g.resumed, g.cpuAt = time.Now(), threadCPU()
}

// threadCPU returns the CPU time of the calling thread.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return -1
	}
	return time.Duration(ts.Nano())
}

// count adds the time the call ran since the last mark: the thread's CPU time where the mark
// read it, else the clock's. (A host function in between may have moved the goroutine to
// another thread: the CPU count is kept within the time elapsed.)
func (sb *Sandbox) count(g *guestRun) {
	d := time.Since(g.resumed)
	if g.cpuAt >= 0 {
		if now := threadCPU(); now >= 0 {
			d = min(max(now-g.cpuAt, 0), d)
		}
	}
	g.cpu += d
	sb.gate.charge(g.t, d)
	if g.st != nil {
		g.st.cpu.Add(int64(d))
	}
}

// end stops counting and gives the turn back.
func (sb *Sandbox) end(g *guestRun) {
	sb.count(g)
	sb.gate.release(g.lent)
}

// offCPU runs f, which may block (a host function waiting on the network), without the call's
// turn: another call may run guest code meanwhile.
func (sb *Sandbox) offCPU(ctx context.Context, f func()) {
	st := stateOf(ctx)
	if st == nil || st.run == nil {
		f()
		return
	}
	g := st.run
	sb.count(g)
	sb.gate.release(g.lent)
	f()
	if err := sb.turn(ctx, g); err != nil {
		panic(g.fault(ctx, err))
	}
	if st.pastDeadline() {
		panic(g.fault(ctx, nil))
	}
}

// fault is the timeFault for err (ctx's error, or nil for a deadline seen on the clock).
func (g *guestRun) fault(ctx context.Context, err error) *timeFault {
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		return &timeFault{limit: g.timeout, err: context.DeadlineExceeded}
	}
	return &timeFault{limit: g.timeout, err: err}
}

// yield is the host function the rewritten code calls when its fuel runs out: the point where
// the Go runtime may preempt the guest, and where the call's time is checked. It returns the
// fuel until the next yield, or panics with a timeFault that ends the call.
func (m *Module) yield(ctx context.Context, _ api.Module, stack []uint64) {
	stack[0] = api.EncodeI32(wasmbin.TickFuel)
	st := stateOf(ctx)
	if st == nil || st.run == nil {
		yieldOutside(ctx)
		return
	}
	g := st.run
	sb := m.sb
	sb.count(g)
	if m.forced.Load() {
		panic(&timeFault{err: fmt.Errorf("%w: the handler was closed during the call", ErrRetired)})
	}
	if err := ctx.Err(); err != nil {
		panic(g.fault(ctx, err))
	}
	now := time.Now()
	if !g.deadline.IsZero() && !now.Before(g.deadline) {
		panic(g.fault(ctx, nil))
	}
	if g.cpuLimit > 0 && g.cpu > g.cpuLimit {
		panic(&timeFault{cpu: true, limit: g.cpuLimit})
	}
	// A call within a slice of its deadline keeps its turn: it ends at one of its next yields,
	// not when a turn comes back to it after the deadline.
	nearEnd := !g.deadline.IsZero() && g.deadline.Sub(now) <= guestSlice
	if !nearEnd && sb.gate.yieldTo(g.t, g.lent, now.Sub(g.turnAt)) {
		sb.gate.release(g.lent)
		runtime.Gosched()
		if err := sb.turn(ctx, g); err != nil {
			panic(g.fault(ctx, err))
		}
		return
	}
	g.markCPU()
}

// yieldOutside is yield for guest code run outside a handler call of the host (Inspect): it
// ends the call once its context is done or past its deadline.
func yieldOutside(ctx context.Context) {
	if err := ctx.Err(); err != nil {
		panic(&timeFault{err: err})
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		panic(&timeFault{err: context.DeadlineExceeded})
	}
}

// instantiateSandbox adds the sandbox's host module (the yield the rewritten code calls) to rt;
// m is nil for a runtime that serves no handler calls (Inspect).
func instantiateSandbox(ctx context.Context, rt wazero.Runtime, m *Module) error {
	fn := func(ctx context.Context, _ api.Module, stack []uint64) {
		stack[0] = api.EncodeI32(wasmbin.TickFuel)
		yieldOutside(ctx)
	}
	if m != nil {
		fn = m.yield
	}
	_, err := rt.NewHostModuleBuilder(wasmbin.SandboxModule).
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(fn), nil, []api.ValueType{api.ValueTypeI32}).
		Export(wasmbin.SandboxYield).
		Instantiate(ctx)
	return err
}

// pastDeadline reports whether the call of st is past its deadline: no host function succeeds
// after it.
func (st *callState) pastDeadline() bool {
	return st != nil && st.run != nil && !st.run.deadline.IsZero() && !time.Now().Before(st.run.deadline)
}
