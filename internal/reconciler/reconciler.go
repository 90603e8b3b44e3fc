// Package reconciler makes the actual state (the plugins wasmhost registered) follow the desired
// state (the plugin sockets that exist). It is level-triggered and woken by edges: a change of
// the desired state, a change of the handler set, the end of an operation or a due retry wakes it,
// and what it then does depends only on the two states, never on which event woke it. A slow
// periodic pass over every path repairs anything an edge missed.
//
// For every socket path it keeps at most one operation in flight, so the operations of one socket
// keep their order (a replaced socket is deregistered, then registered again); operations of
// different sockets run concurrently up to a bound. A failed operation is retried with
// per-socket exponential backoff; a plugin whose type has no handler is not retried but waits
// until a handler for its type appears.
//
// This package is part of the daemon, not a stable API.
package reconciler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/wasmhost/wasmhost/internal/state"
	"github.com/wasmhost/wasmhost/internal/tracing"
	"github.com/wasmhost/wasmhost/internal/typeslots"
)

// Desired is what the reconciler needs of the desired state; *state.Desired implements it.
type Desired interface {
	Get(path string) (state.Socket, bool)
	List() []state.Socket
	// Dead reports whether the plugin at path stopped answering while its socket file stays
	// (MarkDead): its registration is then undone, and what answers there later registered.
	Dead(path string) bool
	// Changed wakes the reconciler, which then calls TakeDirty.
	Changed() <-chan struct{}
	TakeDirty() []string
}

// Actual is what the reconciler needs of the actual state; *state.Actual implements it.
// The reconciler only reads it: Operations write it.
type Actual interface {
	Get(socket string) (state.Plugin, bool)
	List() []state.Plugin
}

// Handlers is what the reconciler needs of the handler set; *registration.Registry implements
// it.
type Handlers interface {
	// Has reports whether a handler serves pluginType.
	Has(pluginType string) bool
	// Changed wakes the reconciler after a handler was set or removed.
	Changed() <-chan struct{}
}

// Operations registers and deregisters plugins; the registration package's Registrar is the
// real one, reconcilertest.Operations a fake. Both calls must return soon after ctx is done.
type Operations interface {
	// Register dials the socket, asks GetInfo, validates with the type's handler, records the
	// plugin in the actual state, registers and notifies. On success the plugin is in Actual.
	// Errors wrap registration sentinels (ErrNoHandler, ErrRejected, ErrUnreachable,
	// ErrInvalidInfo, ErrNotifyFailed, or context.DeadlineExceeded).
	//
	// Optionally, an error in the chain may have the methods PluginType() string and
	// PluginName() string (found with errors.As). The reconciler then shows them in the
	// socket's status, and a socket that failed with ErrNoHandler is retried only when a
	// handler for that type appears, rather than on any change of the handler set (unless an
	// error in the chain has WaitsForAnyHandlerChange() bool returning true).
	Register(ctx context.Context, s state.Socket) error
	// Deregister removes p from the actual state and calls its handler's DeRegisterPlugin.
	Deregister(ctx context.Context, p state.Plugin) error
}

// ErrAlreadyStarted is returned by a second call of Run.
var ErrAlreadyStarted = errors.New("reconciler: Run called more than once")

// errNotRecorded stands for a Register that returned nil without leaving the plugin in the
// actual state. It is treated as a failure, so that a broken Operations cannot make the
// reconciler spin.
var errNotRecorded = errors.New("reconciler: register reported success but the plugin is not in the actual state")

// Config tunes a Reconciler. The zero value is ready to use.
type Config struct {
	// MaxInFlight bounds the operations in flight across all sockets, stalled ones included
	// (see StalledAfter). Defaults to MaxConcurrent.
	MaxInFlight int
	// MaxConcurrent bounds the operations in flight that are not stalled. Defaults to 64.
	MaxConcurrent int
	// StalledAfter: an operation in flight for longer than this, and than four times the
	// recent duration of successful registrations, no longer counts against MaxConcurrent,
	// only against MaxInFlight. (The second part keeps a loaded machine, where every operation
	// is slow, from starting more at once and being slower still.) Such an operation waits for a plugin that does
	// not accept its connection or answer GetInfo (which costs a goroutine and a descriptor,
	// no CPU), or for a slow handler, whose calls TypeSlots bounds per type and across types.
	// So sockets that never answer cannot keep a plugin that does from its first attempt for
	// longer than this, while a burst of plugins that answer still runs MaxConcurrent at a
	// time. Defaults to 20 ms; a negative value: no operation is ever stalled.
	StalledAfter time.Duration
	// InitialBackoff is the wait before the first retry of a failed socket; every further
	// failure doubles it. Defaults to 500 ms, as in the kubelet.
	InitialBackoff time.Duration
	// MaxBackoff caps the wait between retries. Defaults to 2m2s, as in the kubelet.
	MaxBackoff time.Duration
	// Resync is the period of the full pass that checks every path, the safety net behind
	// the edges. Defaults to 1 minute; a negative value turns the pass off.
	Resync time.Duration
	// Logger receives failures (warn), waits for a handler (info) and skips (debug).
	// Defaults to nil, which discards.
	Logger *slog.Logger
	// RecheckRejected is how long a plugin its handler rejected waits before it is asked
	// again when nothing that could change the answer has changed (its handler, its socket,
	// a plugin of the same type and name). Defaults to 5 minutes.
	RecheckRejected time.Duration
	// Jitter spreads the error backoff: each delay is shortened by a random fraction of at
	// most Jitter (0.1: up to 10 %), so that sockets that failed together do not retry
	// together. Defaults to 0: none.
	Jitter float64
	// MaxPerType bounds the operations in flight per plugin type, so that one slow type
	// cannot take every slot: an operation over it returns typeslots.ErrBusy right after GetInfo
	// and its socket waits behind its type. Defaults to a quarter of MaxConcurrent (at
	// least 1). Ignored when TypeSlots is given.
	MaxPerType int
	// TypeSlots is where those per-type slots are kept; the registrar takes one after
	// GetInfo. Defaults to typeslots.New(MaxPerType, 0).
	TypeSlots *typeslots.Slots
	// MaxRetrying bounds the operations in flight for sockets that failed before (a separate
	// budget, so that sockets that keep failing, or never answer, cannot delay the first
	// attempt of a new one). Defaults to a quarter of MaxConcurrent (at least 1).
	MaxRetrying int
	// Status is where the reconciler records each socket's status (the daemon's state store,
	// which readers follow). Defaults to a store of the reconciler's own.
	Status StatusStore
	// Tracer, if set, starts one trace per operation: its root span, which Operations
	// annotate and add their steps under (internal/tracing). Defaults to nil: none.
	Tracer trace.Tracer
}

// StatusStore is what the reconciler needs of where it records statuses; *state.Store
// implements it.
type StatusStore interface {
	SetStatus(state.Status)
	// DeleteStatus forgets a socket path that is gone (readers see it deleted).
	DeleteStatus(path string, since time.Time)
	StatusOf(path string) (state.Status, bool)
	Statuses() []state.Status
}

// The defaults of Config: the one place they are written (config.Default takes them).
const (
	DefaultMaxConcurrent   = 64
	DefaultInitialBackoff  = 500 * time.Millisecond        // the kubelet's
	DefaultMaxBackoff      = 2*time.Minute + 2*time.Second // the kubelet's
	DefaultResync          = time.Minute
	DefaultRecheckRejected = 5 * time.Minute
	// DefaultMaxPerType is what MaxPerType is when MaxConcurrent is DefaultMaxConcurrent.
	DefaultMaxPerType = DefaultMaxConcurrent / 4
)

func (c Config) withDefaults() Config {
	if c.MaxConcurrent <= 0 {
		c.MaxConcurrent = DefaultMaxConcurrent
	}
	if c.MaxInFlight < c.MaxConcurrent {
		c.MaxInFlight = c.MaxConcurrent
	}
	if c.StalledAfter == 0 {
		c.StalledAfter = 20 * time.Millisecond
	}
	if c.InitialBackoff <= 0 {
		c.InitialBackoff = DefaultInitialBackoff
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.MaxBackoff < c.InitialBackoff {
		c.MaxBackoff = c.InitialBackoff
	}
	if c.Resync == 0 {
		c.Resync = DefaultResync
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Status == nil {
		c.Status = state.New()
	}
	if c.RecheckRejected <= 0 {
		c.RecheckRejected = DefaultRecheckRejected
	}
	c.Jitter = min(max(c.Jitter, 0), 1)
	if c.MaxPerType <= 0 {
		c.MaxPerType = max(c.MaxConcurrent/4, 1)
	}
	if c.TypeSlots == nil {
		c.TypeSlots = typeslots.New(c.MaxPerType, 0)
	}
	if c.MaxRetrying <= 0 {
		c.MaxRetrying = max(c.MaxConcurrent/4, 1)
	}
	return c
}

// State is the state of one socket path as operators see it; SocketStatus is what the
// reconciler decides about one socket path. Both are the state store's.
type (
	State        = state.PluginState
	SocketStatus = state.Status
)

// The states of a socket path.
const (
	StateRegistered        = state.StateRegistered
	StatePending           = state.StatePending
	StateFailing           = state.StateFailing
	StateWaitingForHandler = state.StateWaitingForHandler
	StateRejected          = state.StateRejected
	StateStandby           = state.StateStandby
	StateGone              = state.StateGone
)

// Counters are totals since the reconciler was made.
type Counters struct {
	RegistrationsOK       uint64 // Register calls that succeeded
	RegistrationsFailed   uint64 // Register calls that failed, ErrNoHandler included
	Deregistrations       uint64 // Deregister calls that succeeded
	DeregistrationsFailed uint64 // Deregister calls that returned an error
	Retries               uint64 // Register calls after a failed one for the same socket
}

// Reconciler drives the operations that make the actual state follow the desired state. Make it
// with New and start it with Run; Status, Counters and Config are safe to call at any time.
type Reconciler struct {
	desired  Desired
	actual   Actual
	handlers Handlers
	ops      Operations
	cfg      Config
	log      *slog.Logger
	started  atomic.Bool

	status StatusStore

	regOK, regFailed, dereg, deregFailed, retries atomic.Uint64
}

// New returns a reconciler over the given states and operations. None of them may be nil.
func New(desired Desired, actual Actual, handlers Handlers, ops Operations, cfg Config) *Reconciler {
	if desired == nil || actual == nil || handlers == nil || ops == nil {
		panic("reconciler: New needs a desired state, an actual state, handlers and operations")
	}
	cfg = cfg.withDefaults()
	return &Reconciler{
		desired:  desired,
		actual:   actual,
		handlers: handlers,
		ops:      ops,
		cfg:      cfg,
		log:      cfg.Logger,
		status:   cfg.Status,
	}
}

// Config returns the configuration in effect, defaults filled in.
func (r *Reconciler) Config() Config { return r.cfg }

// Status returns the status of every socket path the reconciler knows, sorted by path, as
// recorded in Config.Status.
func (r *Reconciler) Status() []SocketStatus { return r.status.Statuses() }

// SocketStatus returns the status of one socket path.
func (r *Reconciler) SocketStatus(path string) (SocketStatus, bool) { return r.status.StatusOf(path) }

// Counters returns the totals so far.
func (r *Reconciler) Counters() Counters {
	return Counters{
		RegistrationsOK:       r.regOK.Load(),
		RegistrationsFailed:   r.regFailed.Load(),
		Deregistrations:       r.dereg.Load(),
		DeregistrationsFailed: r.deregFailed.Load(),
		Retries:               r.retries.Load(),
	}
}

// Run reconciles until ctx is done. It starts with a full pass, so sockets that exist before Run
// are registered. When ctx is done it cancels the operations in flight, waits for them and for
// every other goroutine it started, and returns nil. Run may be called once.
func (r *Reconciler) Run(ctx context.Context) error {
	if !r.started.CompareAndSwap(false, true) {
		return ErrAlreadyStarted
	}
	opCtx, cancelOps := context.WithCancel(ctx)
	defer cancelOps()

	l := &loop{
		r:        r,
		ctx:      opCtx,
		socks:    make(map[string]*sock),
		byType:   make(pathIndex[string]),
		waiting:  make(map[string]struct{}),
		deferred: make(map[string][]string),
		rejected: make(pathIndex[pluginKey]),
		byGroup:  make(pathIndex[pluginKey]),
		done:     make(chan result, r.cfg.MaxInFlight),
		waits:    make(chan flight, r.cfg.MaxInFlight),
	}
	l.run(ctx)

	// Shutdown: the loop has stopped reading results; the buffer of done holds one per
	// operation in flight, so none of them blocks.
	cancelOps()
	l.ops.Wait()
	return nil
}

// opKind is what an operation does.
type opKind int

const (
	opNone opKind = iota
	opRegister
	opDeregister
)

// result is the outcome of one operation, sent by its goroutine to the loop.
type result struct {
	path   string
	kind   opKind
	retry  bool         // counted in loop.retrying
	socket state.Socket // the socket registered (opRegister)
	plugin state.Plugin // the plugin deregistered (opDeregister)
	gen    uint64       // the handler generation when the operation started
	err    error
}

// sock is the loop's record of one socket path. It exists while the path is desired, has an
// actual plugin, or has an operation queued or in flight.
type sock struct {
	path  string
	id    state.Identity // identity of the desired socket, when hasID
	hasID bool

	busy    bool      // an operation is in flight
	queued  bool      // an operation waits for a free slot
	opSeq   uint64    // of the operation in flight (loop.flights)
	opStart time.Time // when it started
	stalled bool      // the operation in flight is stalled (counted in loop.stalled)
	waits   bool      // the operation in flight said it waits outside the daemon (typeslots.Waiting)

	attempts  int
	lastErr   string
	nextRetry time.Time // zero: not backing off

	waiting  bool   // waits for a handler
	waitType string // the type it waits for; empty when unknown (any handler change retries)

	deferType string // waits for a free operation slot of this plugin type (typeslots.ErrBusy)

	rejected    bool      // the handler's last answer was no; nextRetry is the slow re-check
	rejectedKey pluginKey // the key of loop.rejected that lists this path, when rejected

	pluginType, pluginName string
	pluginVersions         []string
	indexedType            string    // the key of byType that lists this path, if any
	indexedGroup           pluginKey // the key of byGroup that lists this path, if any

	status SocketStatus // last published; State is empty before the first
}

func (s *sock) clearFailure() {
	s.attempts = 0
	s.lastErr = ""
	s.nextRetry = time.Time{}
}

// backingOff reports whether s must not be tried before s.nextRetry.
func (s *sock) backingOff(now time.Time) bool {
	return !s.nextRetry.IsZero() && now.Before(s.nextRetry)
}

// loop is the state of one Run. Only the loop goroutine touches it.
type loop struct {
	r   *Reconciler
	ctx context.Context // cancelled when Run ends; operations run under it

	socks   map[string]*sock
	byType  pathIndex[string]   // plugin type -> paths with an actual plugin of it
	waiting map[string]struct{} // paths waiting for a handler

	queue    []string // paths waiting for a free slot, in order
	inflight int
	// flights lists the operations in flight in the order they started, until they stall
	// or end; stalled counts those in flight for longer than Config.StalledAfter.
	flights    []flight
	stalled    int
	opSeq      uint64
	stallTimer *time.Timer
	stallAt    time.Time     // when the stall timer is set for; zero when stopped
	okAvg      time.Duration // moving average of the successful registrations' durations
	// retryQueue holds the sockets that failed before and wait for a slot of their own
	// budget (Config.MaxRetrying); retrying counts those in flight.
	retryQueue []string
	retrying   int
	// deferred lists, per plugin type, the sockets waiting for a slot of their type.
	deferred map[string][]string
	// byGroup lists, by plugin type and name, the paths with an actual plugin of it: the
	// instances of one plugin, re-evaluated together when one of them changes.
	byGroup pathIndex[pluginKey]
	// rejected lists, by plugin type and name, the sockets their handler rejected.
	rejected pathIndex[pluginKey]
	done     chan result
	// waits receives the operations that said they wait outside the daemon
	// (typeslots.Waiting): they stall at once.
	waits chan flight
	ops   sync.WaitGroup

	handlerGen uint64 // counts Handlers.Changed wake-ups

	retries retryHeap
	timer   *time.Timer
	armed   time.Time // due time the timer is set for; zero when stopped
}

func (l *loop) run(ctx context.Context) {
	r := l.r
	l.timer = time.NewTimer(time.Hour)
	l.timer.Stop()
	defer l.timer.Stop()
	l.stallTimer = time.NewTimer(time.Hour)
	l.stallTimer.Stop()
	defer l.stallTimer.Stop()
	var resync <-chan time.Time
	if r.cfg.Resync > 0 {
		t := time.NewTicker(r.cfg.Resync)
		defer t.Stop()
		resync = t.C
	}

	// Changes before now are all covered by the full pass.
	r.desired.TakeDirty()
	select {
	case <-r.handlers.Changed():
	default:
	}
	l.fullPass()
	for {
		l.armTimer()
		l.armStallTimer()
		select {
		case <-ctx.Done():
			return
		case <-r.desired.Changed():
			for _, p := range r.desired.TakeDirty() {
				l.eval(p)
			}
		case <-r.handlers.Changed():
			l.handlersChanged()
		case res := <-l.done:
			l.complete(res)
		case f := <-l.waits:
			l.opWaits(f)
		case <-l.timer.C:
			l.armed = time.Time{}
			l.dueRetries()
		case <-l.stallTimer.C:
			l.stallAt = time.Time{} // armStallTimer marks them and fills the slots
		case <-r.cfg.TypeSlots.Released():
			// The types released first; then, as a release also frees a slot across types,
			// every other type with sockets held back, for as long as Free says there is room.
			released := r.cfg.TypeSlots.TakeReleased()
			for _, typ := range released {
				l.startDeferred(typ)
			}
			for _, typ := range slices.Sorted(maps.Keys(l.deferred)) {
				if !slices.Contains(released, typ) {
					l.startDeferred(typ)
				}
			}
		case <-resync:
			l.fullPass()
		}
	}
}

// fullPass evaluates every path that is desired, has an actual plugin, or is known to the loop.
func (l *loop) fullPass() {
	seen := make(map[string]struct{}, len(l.socks))
	visit := func(p string) {
		if _, ok := seen[p]; !ok {
			seen[p] = struct{}{}
			l.eval(p)
		}
	}
	for _, s := range l.r.desired.List() {
		visit(s.Path)
	}
	for _, p := range l.r.actual.List() {
		visit(p.Socket)
	}
	for _, p := range slices.Collect(maps.Keys(l.socks)) {
		visit(p)
	}
}

// handlersChanged re-evaluates the plugins whose type lost its handler and retries the sockets
// waiting for a handler that may now exist. Its work is proportional to the number of plugin
// types and the affected paths.
func (l *loop) handlersChanged() {
	l.handlerGen++
	// A new handler (or a new revision of one) may answer a rejected plugin otherwise.
	l.recheckRejected(pluginKey{}, true)
	var paths []string
	for typ, set := range l.byType {
		if ok := l.r.handlers.Has(typ); !ok {
			for p := range set {
				paths = append(paths, p)
			}
		}
	}
	for p := range l.waiting {
		s := l.socks[p]
		if s.waitType != "" {
			if ok := l.r.handlers.Has(s.waitType); !ok {
				continue
			}
		}
		l.setWaiting(s, false, "")
		paths = append(paths, p)
	}
	for _, p := range paths {
		l.eval(p)
	}
}

// dueRetries evaluates the sockets whose backoff ended.
func (l *loop) dueRetries() {
	now := time.Now()
	for len(l.retries) > 0 && !l.retries[0].due.After(now) {
		e := l.retries.pop()
		if s, ok := l.socks[e.path]; ok && s.nextRetry.Equal(e.due) {
			l.eval(e.path)
		}
	}
}

// armTimer sets the one backoff timer for the earliest due retry.
func (l *loop) armTimer() {
	for len(l.retries) > 0 {
		e := l.retries[0]
		if s, ok := l.socks[e.path]; ok && s.nextRetry.Equal(e.due) {
			break
		}
		l.retries.pop() // stale: the socket succeeded, was replaced, or is gone
	}
	if len(l.retries) == 0 {
		if !l.armed.IsZero() {
			l.timer.Stop()
			l.armed = time.Time{}
		}
		return
	}
	due := l.retries[0].due
	if due.Equal(l.armed) {
		return
	}
	l.timer.Reset(time.Until(due))
	l.armed = due
}

// eval looks at one path and starts what it needs, if anything. It is the one place where the
// desired and actual states are compared.
func (l *loop) eval(path string) { l.evalPath(path, true) }

// evalPath is eval; logSkip says whether to log at debug that the path is skipped because it
// backs off (not wanted right after the failure that started the backoff, already logged).
func (l *loop) evalPath(path string, logSkip bool) {
	r := l.r
	d, dOK := r.desired.Get(path)
	a, aOK := r.actual.Get(path)
	s := l.socks[path]
	if s == nil {
		if !dOK && !aOK {
			return
		}
		s = &sock{path: path}
		l.socks[path] = s
	}

	// A socket replaced at the same path is a new socket: it is tried at once.
	switch {
	case dOK && (!s.hasID || s.id != d.ID):
		if s.hasID {
			l.forgetFailure(s)
		}
		s.id, s.hasID = d.ID, true
	case !dOK && s.hasID:
		l.forgetFailure(s)
		s.hasID = false
	}
	if aOK {
		l.index(s, a.Type)
		l.indexGroup(s, pluginKey{a.Type, a.Name})
		s.pluginType, s.pluginName, s.pluginVersions = a.Type, a.Name, a.Versions
	} else {
		l.index(s, "")
		l.indexGroup(s, pluginKey{})
	}

	if s.busy || s.queued || (s.deferType != "" && dOK && !aOK && s.hasID) {
		l.publish(s, StatePending)
		return
	}
	s.deferType = ""
	if !dOK && !aOK {
		l.forget(s)
		return
	}

	now := time.Now()
	kind := opNone
	st8 := StatePending
	if aOK {
		hasHandler := r.handlers.Has(a.Type)
		if dOK && a.ID == d.ID && hasHandler && !r.desired.Dead(path) {
			st8 = StateRegistered
			if a.Standby {
				st8 = StateStandby
			}
			l.forgetFailure(s)
		} else if s.backingOff(now) {
			st8 = StateFailing
			if logSkip {
				r.log.Debug("skipping deregistration, backing off", "socket", path,
					"plugin_type", a.Type, "plugin", a.Name, "next_retry", s.nextRetry)
			}
		} else {
			kind = opDeregister
		}
	} else {
		if s.waiting && s.waitType != "" {
			if ok := r.handlers.Has(s.waitType); ok {
				l.setWaiting(s, false, "")
			}
		}
		switch {
		case s.waiting:
			st8 = StateWaitingForHandler
		case s.backingOff(now) && s.rejected:
			st8 = StateRejected
		case s.backingOff(now):
			st8 = StateFailing
			if logSkip {
				r.log.Debug("skipping registration, backing off", "socket", path,
					"attempt", s.attempts, "next_retry", s.nextRetry)
			}
		default:
			kind = opRegister
		}
	}

	if kind != opNone {
		retry := kind == opRegister && s.attempts > 0
		switch {
		case retry && l.retrying >= r.cfg.MaxRetrying:
			s.queued = true
			l.retryQueue = append(l.retryQueue, path)
		case l.hasRoom():
			l.start(s, kind, d, a)
		case retry:
			s.queued = true
			l.retryQueue = append(l.retryQueue, path)
		default:
			s.queued = true
			l.queue = append(l.queue, path)
		}
	}
	l.publish(s, st8)
}

// start launches the operation kind for s in a goroutine of its own.
func (l *loop) start(s *sock, kind opKind, d state.Socket, a state.Plugin) {
	s.busy = true
	l.inflight++
	l.opSeq++
	s.opSeq, s.stalled, s.opStart = l.opSeq, false, time.Now()
	if l.r.cfg.StalledAfter > 0 {
		l.flights = append(l.flights, flight{path: s.path, seq: s.opSeq, at: s.opStart})
	}
	res := result{path: s.path, kind: kind, gen: l.handlerGen}
	ops := l.r.ops
	ctx := l.ctx
	if kind == opRegister {
		if s.attempts > 0 {
			l.r.retries.Add(1)
			res.retry = true
			l.retrying++
		}
		res.socket = d
		// A registration that waits on the kubelet (a forwarded plugin) says so: it stalls at
		// once. The send never blocks: a signal that finds the buffer full is dropped, and the
		// operation stalls on its time instead.
		waits, f := l.waits, flight{path: s.path, seq: s.opSeq}
		ctx = typeslots.WithWaiting(ctx, sync.OnceFunc(func() {
			select {
			case waits <- f:
			default:
			}
		}))
		attempt, tracer := s.attempts+1, l.r.cfg.Tracer
		l.ops.Go(func() {
			ctx, span := startPass(ctx, tracer, res.socket, attempt)
			res.err = ops.Register(ctx, res.socket)
			tracing.End(span, res.err, "")
			l.done <- res
		})
		return
	}
	res.plugin = a
	tracer := l.r.cfg.Tracer
	l.ops.Go(func() {
		ctx, span := tracing.StartRoot(ctx, tracer, tracing.SpanDeregister)
		res.err = ops.Deregister(ctx, res.plugin)
		tracing.End(span, res.err, "")
		l.done <- res
	})
}

// startPass starts the trace of a registration pass over the socket d, its attempt-th. A
// first pass starts when the socket was seen, with a child span for the wait until the pass
// began (behind other operations, or for the handlers at start): the trace then lasts as long
// as the plugin waited, as the registration latency metric counts it. A retry starts now.
func startPass(ctx context.Context, t trace.Tracer, d state.Socket, attempt int) (context.Context, trace.Span) {
	if t == nil {
		return tracing.StartRoot(ctx, nil, "")
	}
	now := time.Now()
	start := now
	if attempt == 1 && !d.Seen.IsZero() && d.Seen.Before(now) {
		start = d.Seen
	}
	ctx, span := tracing.StartRoot(ctx, t, tracing.SpanRegister, trace.WithTimestamp(start),
		trace.WithAttributes(attribute.String(tracing.AttrSocket, d.Path), attribute.Int(tracing.AttrAttempt, attempt)))
	if span.IsRecording() && start.Before(now) {
		_, q := t.Start(ctx, tracing.SpanQueued, trace.WithTimestamp(start))
		q.End(trace.WithTimestamp(now))
	}
	return ctx, span
}

// complete records the outcome of an operation, re-evaluates its path and fills the freed slot.
func (l *loop) complete(res result) {
	r := l.r
	l.inflight--
	if res.retry {
		l.retrying--
	}
	s := l.socks[res.path] // a busy path is never forgotten
	s.busy = false
	if s.stalled {
		l.stalled--
	}
	if res.kind == opRegister && res.err == nil && !s.waits {
		// (One that waited on the kubelet says nothing of how long handlers take.)
		d := time.Since(s.opStart)
		if l.okAvg == 0 {
			l.okAvg = d
		} else {
			l.okAvg += (d - l.okAvg) / 8
		}
	}
	s.opSeq, s.stalled, s.waits = 0, false, false
	switch res.kind {
	case opRegister:
		err := res.err
		if err == nil {
			if p, ok := r.actual.Get(res.path); !ok || p.ID != res.socket.ID {
				err = fmt.Errorf("%w: socket %s", errNotRecorded, res.path)
			}
		}
		l.registered(s, res, err)
	case opDeregister:
		l.deregistered(s, res)
	}
	l.evalPath(res.path, false)
	l.fillSlots()
}

// fillSlots starts queued operations while there are free slots: first attempts first, then
// the sockets that failed before, within their own budget.
func (l *loop) fillSlots() {
	r := l.r
	for l.hasRoom() && len(l.queue) > 0 {
		p := popFront(&l.queue)
		if qs, ok := l.socks[p]; ok && qs.queued {
			qs.queued = false
			l.eval(p)
		}
	}
	for l.hasRoom() && l.retrying < r.cfg.MaxRetrying && len(l.retryQueue) > 0 {
		p := popFront(&l.retryQueue)
		if qs, ok := l.socks[p]; ok && qs.queued {
			qs.queued = false
			l.eval(p)
		}
	}
}

// flight is an operation in flight, as listed in loop.flights.
type flight struct {
	path string
	seq  uint64 // sock.opSeq while it is in flight
	at   time.Time
}

// hasRoom reports whether another operation may start: within MaxInFlight, and within
// MaxConcurrent counting only the operations that are not stalled.
func (l *loop) hasRoom() bool {
	return l.inflight < l.r.cfg.MaxInFlight && l.inflight-l.stalled < l.r.cfg.MaxConcurrent
}

// markStalled marks the operations in flight since StalledAfter before now as stalled, and
// drops the ended ones from the front of loop.flights. It returns how many it marked.
func (l *loop) markStalled(now time.Time) (marked int) {
	cut := now.Add(-l.stallAge())
	for len(l.flights) > 0 {
		f := l.flights[0]
		s, ok := l.socks[f.path]
		live := ok && s.busy && s.opSeq == f.seq
		if live && f.at.After(cut) {
			return marked
		}
		if live && !s.stalled {
			s.stalled = true
			l.stalled++
			marked++
		}
		l.flights[0] = flight{}
		l.flights = l.flights[1:]
		if len(l.flights) == 0 {
			l.flights = nil
		}
	}
	return marked
}

// stallAge is how long an operation runs before it is stalled: StalledAfter, or four times
// the recent successful registrations' duration when that is longer.
func (l *loop) stallAge() time.Duration { return max(l.r.cfg.StalledAfter, 4*l.okAvg) }

// opWaits stalls the operation f at once: it said it waits outside the daemon.
func (l *loop) opWaits(f flight) {
	s, ok := l.socks[f.path]
	if !ok || !s.busy || s.opSeq != f.seq {
		return // ended meanwhile
	}
	s.waits = true
	if !s.stalled && l.r.cfg.StalledAfter >= 0 { // a negative StalledAfter: never stalled
		s.stalled = true
		l.stalled++
		l.fillSlots()
	}
}

// armStallTimer sets the stall timer for the first operation in flight that may stall.
func (l *loop) armStallTimer() {
	if l.markStalled(time.Now()) > 0 { // also drops ended operations from the front
		l.fillSlots()
	}
	if len(l.flights) == 0 {
		if !l.stallAt.IsZero() {
			l.stallTimer.Stop()
			l.stallAt = time.Time{}
		}
		return
	}
	due := l.flights[0].at.Add(l.stallAge())
	if due.Equal(l.stallAt) {
		return
	}
	l.stallTimer.Stop()
	l.stallTimer.Reset(time.Until(due))
	l.stallAt = due
}

func popFront(q *[]string) string {
	p := (*q)[0]
	(*q)[0] = ""
	*q = (*q)[1:]
	if len(*q) == 0 {
		*q = nil // let the backing array go
	}
	return p
}

// deferToType queues s behind the other operations of its plugin type, or tries it again at
// once if a slot of the type was released meanwhile.
func (l *loop) deferToType(s *sock, typ string) {
	if l.r.cfg.TypeSlots.Free(typ) > 0 {
		return // the evalPath that follows starts it again
	}
	s.deferType = typ
	l.deferred[typ] = append(l.deferred[typ], s.path)
}

// startDeferred starts as many sockets waiting for a slot of typ as there are free slots.
func (l *loop) startDeferred(typ string) {
	for free := l.r.cfg.TypeSlots.Free(typ); free > 0 && len(l.deferred[typ]) > 0; {
		q := l.deferred[typ]
		p := popFront(&q)
		if len(q) == 0 {
			delete(l.deferred, typ)
		} else {
			l.deferred[typ] = q
		}
		s, ok := l.socks[p]
		if !ok || s.deferType != typ {
			continue // gone, or started some other way
		}
		s.deferType = ""
		l.eval(p)
		free--
	}
}

func (l *loop) registered(s *sock, res result, err error) {
	r := l.r
	current := s.hasID && s.id == res.socket.ID // the socket was not replaced meanwhile
	if err == nil {
		r.regOK.Add(1)
		if current {
			l.forgetFailure(s)
		}
		if a, ok := r.actual.Get(s.path); ok {
			s.pluginType, s.pluginName, s.pluginVersions = a.Type, a.Name, a.Versions
			defer l.evalGroup(pluginKey{a.Type, a.Name}, s.path) // the instance it replaced is a standby now
		}
		r.log.Debug("registration recorded", "socket", s.path, "plugin_type", s.pluginType, "plugin", s.pluginName)
		return
	}
	if errors.Is(err, typeslots.ErrBusy) {
		// Not a failure: the socket waits behind its type.
		if current {
			typ, _ := pluginOf(err)
			l.deferToType(s, typ)
		}
		return
	}
	r.regFailed.Add(1)
	if !current {
		// The failure was of a socket that is no more; the new one is tried at once.
		return
	}
	s.attempts++
	s.lastErr = err.Error()
	if r.desired.Dead(s.path) {
		s.lastErr = "plugin gone (its server stopped; its socket file stays): " + s.lastErr
	}
	if typ, name := pluginOf(err); typ != "" || name != "" {
		s.pluginType, s.pluginName = typ, name
		s.pluginVersions = versionsOf(err)
	}
	if rejectedByHandler(err) {
		s.nextRetry = time.Now().Add(r.cfg.RecheckRejected)
		l.retries.push(retry{due: s.nextRetry, path: s.path})
		l.setRejected(s, true)
		if l.handlerGen != res.gen {
			s.nextRetry = time.Time{} // its handler changed meanwhile: ask again at once
		}
		r.log.Info("plugin refused by its handler; asked again when its handler or socket changes, when a plugin of the same name goes away, or at the re-check",
			"socket", s.path, "plugin_type", s.pluginType, "plugin", s.pluginName,
			"reason", err, "attempt", s.attempts, "recheck_at", s.nextRetry)
		return
	}
	if waitsForHandler(err) {
		if l.handlerGen != res.gen {
			// A handler was set while the operation ran: try again at once rather than wait
			// for a change that already happened.
			return
		}
		typ, _ := pluginOf(err)
		if waitsForAnyHandlerChange(err) {
			typ = "" // shown in its status, but any change of the handler set retries it
		}
		l.setWaiting(s, true, typ)
		r.log.Info("plugin waits for a handler", "socket", s.path, "plugin_type", typ,
			"error", err, "attempt", s.attempts)
		return
	}
	l.backOff(s, err, "plugin registration failed")
}

func (l *loop) deregistered(s *sock, res result) {
	r := l.r
	p := res.plugin
	if res.err != nil {
		r.deregFailed.Add(1)
		if cur, ok := r.actual.Get(p.Socket); ok && cur.ID == p.ID {
			s.attempts++
			s.lastErr = res.err.Error()
			l.backOff(s, res.err, "plugin deregistration failed")
			return
		}
		// The plugin left the actual state; only its handler complained.
		r.log.Warn("plugin deregistered with an error", "socket", p.Socket,
			"plugin_type", p.Type, "plugin", p.Name, "error", res.err)
	} else {
		r.dereg.Add(1)
		r.log.Debug("plugin deregistered", "socket", p.Socket, "plugin_type", p.Type, "plugin", p.Name)
	}
	// A plugin of the same type and name that was refused (a duplicate waiting on a conflict)
	// may be accepted now; another instance of it may have taken over.
	defer l.recheckRejected(pluginKey{p.Type, p.Name}, false)
	defer l.evalGroup(pluginKey{p.Type, p.Name}, p.Socket)
	if d, ok := r.desired.Get(p.Socket); ok && d.ID == p.ID && r.desired.Dead(p.Socket) {
		s.lastErr = "plugin gone: its server stopped answering and its socket file stays; registered again when something answers at " + p.Socket
		r.log.Info("plugin deregistered: its server stopped answering (the socket file stays)",
			"socket", p.Socket, "plugin_type", p.Type, "plugin", p.Name)
	}
	// A plugin deregistered because its type lost its handler waits for a new one.
	if d, ok := r.desired.Get(p.Socket); ok && d.ID == p.ID {
		if ok := r.handlers.Has(p.Type); !ok {
			s.lastErr = "registration: no handler registered for plugin type " + p.Type + " (handler removed)"
			s.nextRetry = time.Time{}
			l.setWaiting(s, true, p.Type)
			r.log.Info("plugin deregistered, its type has no handler any more; waiting for one",
				"socket", p.Socket, "plugin_type", p.Type, "plugin", p.Name)
		}
	}
}

// backOff schedules the next attempt for s after its s.attempts-th failure.
func (l *loop) backOff(s *sock, err error, msg string) {
	r := l.r
	delay := r.cfg.InitialBackoff
	for i := 1; i < s.attempts && delay < r.cfg.MaxBackoff; i++ {
		delay *= 2
	}
	delay = min(delay, r.cfg.MaxBackoff)
	if r.cfg.Jitter > 0 {
		delay -= time.Duration(rand.Float64() * r.cfg.Jitter * float64(delay))
	}
	s.nextRetry = time.Now().Add(delay)
	l.retries.push(retry{due: s.nextRetry, path: s.path})
	r.log.Warn(msg, "socket", s.path, "plugin_type", s.pluginType, "plugin", s.pluginName,
		"error", err, "attempt", s.attempts, "retry_in", delay, "next_retry", s.nextRetry)
}

func (l *loop) forgetFailure(s *sock) {
	s.clearFailure()
	l.setWaiting(s, false, "")
	l.setRejected(s, false)
}

// pluginKey names a plugin by type and name.
type pluginKey struct{ typ, name string }

// setRejected files s as rejected under its plugin type and name, or takes it out.
func (l *loop) setRejected(s *sock, rejected bool) {
	if s.rejected {
		l.rejected.remove(s.rejectedKey, s.path)
	}
	s.rejected = rejected
	if rejected {
		s.rejectedKey = pluginKey{s.pluginType, s.pluginName}
		l.rejected.add(s.rejectedKey, s.path)
	}
}

// pathIndex files socket paths under keys (a plugin type, a plugin's type and name).
type pathIndex[K comparable] map[K]map[string]struct{}

func (ix pathIndex[K]) add(k K, path string) {
	set := ix[k]
	if set == nil {
		set = make(map[string]struct{})
		ix[k] = set
	}
	set[path] = struct{}{}
}

func (ix pathIndex[K]) remove(k K, path string) {
	if set := ix[k]; set != nil {
		delete(set, path)
		if len(set) == 0 {
			delete(ix, k)
		}
	}
}

// move refiles path from key *cur to key to (the zero key: filed nowhere), and sets *cur.
func (ix pathIndex[K]) move(cur *K, to K, path string) {
	var zero K
	if *cur == to {
		return
	}
	if *cur != zero {
		ix.remove(*cur, path)
	}
	*cur = to
	if to != zero {
		ix.add(to, path)
	}
}

// recheckRejected asks again at once about the rejected sockets of key (any key when all).
func (l *loop) recheckRejected(key pluginKey, all bool) {
	var paths []string
	for k, set := range l.rejected {
		if all || k == key {
			for p := range set {
				paths = append(paths, p)
			}
		}
	}
	for _, p := range paths {
		s := l.socks[p]
		s.nextRetry = time.Time{}
		l.eval(p)
	}
}

func (l *loop) setWaiting(s *sock, waiting bool, typ string) {
	s.waiting, s.waitType = waiting, typ
	if waiting {
		l.waiting[s.path] = struct{}{}
	} else {
		delete(l.waiting, s.path)
	}
}

// indexGroup files s under its plugin's type and name in byGroup; the zero key takes it out.
func (l *loop) indexGroup(s *sock, k pluginKey) { l.byGroup.move(&s.indexedGroup, k, s.path) }

// evalGroup re-evaluates the other instances of the plugin k (one of them registered, or went:
// another may have become the active one or a standby).
func (l *loop) evalGroup(k pluginKey, except string) {
	for _, p := range slices.Collect(maps.Keys(l.byGroup[k])) {
		if p != except {
			l.eval(p)
		}
	}
}

// index files s under plugin type typ in byType; an empty typ takes it out.
func (l *loop) index(s *sock, typ string) { l.byType.move(&s.indexedType, typ, s.path) }

// forget drops s, whose socket and plugin are both gone, and reports it gone once.
func (l *loop) forget(s *sock) {
	l.index(s, "")
	l.indexGroup(s, pluginKey{})
	l.setWaiting(s, false, "")
	l.setRejected(s, false)
	delete(l.socks, s.path)
	if s.status.State == "" {
		return
	}
	l.r.status.DeleteStatus(s.path, time.Now())
}

// publish records the status of s in the store if it changed.
func (l *loop) publish(s *sock, st8 State) {
	st := SocketStatus{
		Path:           s.path,
		State:          st8,
		PluginType:     s.pluginType,
		PluginName:     s.pluginName,
		PluginVersions: s.pluginVersions,
		LastError:      s.lastErr,
		Attempts:       s.attempts,
		Since:          s.status.Since,
	}
	if st8 == StateFailing || st8 == StateRejected {
		st.NextRetry = s.nextRetry
	}
	if st8 != s.status.State {
		st.Since = time.Now()
	}
	if st.Equal(s.status) {
		return
	}
	s.status = st
	l.r.status.SetStatus(st)
}

// rejectedByHandler reports whether err says that the handler decided to refuse the plugin (an
// error in its chain has a method Rejected() bool that returns true, as
// registration.ErrRejected does).
func rejectedByHandler(err error) bool {
	var r interface{ Rejected() bool }
	return errors.As(err, &r) && r.Rejected()
}

// waitsForHandler reports whether err says that no handler serves the plugin's type (an
// error in its chain has a method WaitsForHandler() bool that returns true, as
// registration.ErrNoHandler does): the socket then waits for a handler, it does not back off.
func waitsForHandler(err error) bool {
	var w interface{ WaitsForHandler() bool }
	return errors.As(err, &w) && w.WaitsForHandler()
}

// waitsForAnyHandlerChange reports whether err, which waits for a handler, asks to be retried
// at any change of the handler set rather than only when its type gets a handler (an error in
// its chain has a method WaitsForAnyHandlerChange() bool that returns true): a plugin that
// waits because handlers may still arrive, and is to be told no once none will.
func waitsForAnyHandlerChange(err error) bool {
	var w interface{ WaitsForAnyHandlerChange() bool }
	return errors.As(err, &w) && w.WaitsForAnyHandlerChange()
}

// pluginOf returns the plugin type and name an error tells, if any error in its chain has
// PluginType() string or PluginName() string methods.
func pluginOf(err error) (typ, name string) {
	var t interface{ PluginType() string }
	if errors.As(err, &t) {
		typ = t.PluginType()
	}
	var n interface{ PluginName() string }
	if errors.As(err, &n) {
		name = n.PluginName()
	}
	return typ, name
}

// versionsOf returns the plugin's versions from an error in err's chain with a
// PluginVersions() []string method, or nil.
func versionsOf(err error) []string {
	var v interface{ PluginVersions() []string }
	if errors.As(err, &v) {
		return v.PluginVersions()
	}
	return nil
}
