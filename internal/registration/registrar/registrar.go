// Package registrar performs the two operations the reconciler runs on a plugin socket:
// Register (dial it, ask GetInfo, run the handler for its type, tell the plugin the outcome)
// and Deregister (forget a plugin that is gone). It speaks the kubelet's plugin-registration
// protocol, k8s.io/kubelet/pkg/apis/pluginregistration/v1, over one short-lived connection
// per registration, with a minimal gRPC client of its own (see client.go for why).
//
// It lives apart from package registration because it records plugins in the actual state
// (package state), which itself depends on registration's Handler type.
//
// This package is part of the daemon, not a stable API.
package registrar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	regapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/state"
	"github.com/wasmhost/wasmhost/internal/tracing"
	"github.com/wasmhost/wasmhost/internal/typeslots"
)

// Config configures a Registrar. Handlers and Actual are required.
type Config struct {
	// Handlers gives the handler for each plugin type. Required.
	Handlers *registration.Registry
	// HandlersPending, if set, reports whether handlers may still arrive for types that have
	// none yet (those pulled from registries, until handlers.pull.firstWait at start): while
	// it does, a plugin of a type without a handler is not told no, which some plugins take as
	// final (the CSI node-driver-registrar exits). Its registration fails with ErrNoHandler in
	// a PluginError whose Pending is set, so that the next change of the handler set (a
	// handler of any type, or Touch once nothing is pending) tries it again.
	HandlersPending func() bool
	// Actual is the actual state: Register adds the plugins it registers, Deregister removes
	// them. Required.
	Actual *state.Actual
	// Logger receives one line per outcome, with the keys plugin_type, plugin and socket.
	// Defaults to discarding everything (nil).
	Logger *slog.Logger
	// DialTimeout bounds connecting to a socket, retries included. A connect to a unix socket
	// either succeeds or fails at once, so this only matters for a plugin whose listen
	// backlog is full. Defaults to 10s, as in the kubelet.
	DialTimeout time.Duration
	// ListenGrace is how long after a socket was first seen (state.Socket.Seen) a
	// refused connect is retried, every 1 ms doubling to 20 ms: the socket file exists from
	// the plugin's bind(), before its listen(). After that, refused means nobody is listening
	// and Register fails at once. Defaults to 1s.
	ListenGrace time.Duration
	// GetInfoTimeout bounds the GetInfo call (the first on the connection). Defaults to 5s:
	// the kubelet's 1s fails healthy plugins on a loaded node (a plugin still starting up,
	// a thousand sockets appearing at once; kubernetes#127457), and each failure costs a
	// backoff that starts at 500 ms and doubles. A hung plugin only holds its own socket's
	// operation, so a longer deadline costs nothing to the others.
	GetInfoTimeout time.Duration
	// NotifyTimeout bounds each NotifyRegistrationStatus call, true or false. Some plugins
	// never answer it (the kubelet's example plugin). Defaults to 5s, as in the kubelet.
	NotifyTimeout time.Duration
	// HandlerTimeout bounds each handler call (ValidatePlugin, RegisterPlugin,
	// DeRegisterPlugin). Defaults to 5s.
	HandlerTimeout time.Duration
	// Now tells the time, for RegisteredAt and for ListenGrace. Defaults to time.Now.
	Now func() time.Time
	// Liveness, if set, watches every plugin registered, so that one whose server goes while
	// its socket file stays is noticed (package liveness). Deregister forgets it. Defaults to
	// nil: a plugin is known gone only when its socket file goes.
	Liveness Liveness
	// TypeSlots, if set, bounds the registrations in their handler phase per plugin type: a
	// plugin whose type has no free slot is not called further after GetInfo (no handler
	// call, no notification; its connection is closed) and Register returns an error
	// wrapping typeslots.ErrBusy, on which the reconciler queues it behind its type.
	// Defaults to nil: no bound.
	TypeSlots *typeslots.Slots
	// Observer is told how every handler call and every registration went, for metrics.
	// Defaults to nil: nobody is told.
	Observer Observer
	// Forward, if set, presents the plugins of the types it forwards to the kubelet once
	// their handler admitted them, and the plugin is told it is registered only once the
	// kubelet accepted it too (forward.go). Defaults to nil: no plugin is forwarded.
	Forward Forwarder
	// Tracer, if set, traces the steps of each pass under the span its caller started
	// (trace.go). Defaults to nil: nothing is traced.
	Tracer trace.Tracer
	// ErrorType names the class of a failure, for the spans' error.type (the daemon gives the
	// metrics' result labels). Defaults to ErrorType: the registration sentinel it wraps.
	ErrorType func(error) string
}

// typeSlotWait is how long a registration waits for a slot of its plugin type before it gives
// up with typeslots.ErrBusy. Long enough for a quick type's slot to come free in a burst (its
// handler calls take about a millisecond), short next to a slow type's calls (up to the
// handler timeout): without it, a burst of 4,000 plugins of one type went round the queue
// again and took three times as long.
const typeSlotWait = 50 * time.Millisecond

// Liveness is what the registrar needs of a liveness monitor; *liveness.Monitor implements it.
type Liveness interface {
	// Adopt watches the plugin at path over c, the connection it registered over, now
	// idle; the monitor owns c from then on.
	Adopt(path string, id state.Identity, c net.Conn) error
	Forget(path string)
}

// Observer receives the outcome of handler calls and registrations. Its methods are called on
// the registering goroutine and must return promptly.
type Observer interface {
	// HandlerCall reports one call of a handler: call is "validate", "register" or
	// "deregister"; err is nil on success.
	HandlerCall(pluginType, call string, err error, d time.Duration)
	// Registration reports a registration attempt of a plugin that answered GetInfo; d runs
	// from when the socket was first seen, so it is the latency a plugin experiences.
	Registration(pluginType string, err error, d time.Duration)
}

// Names of handler calls, as given to Observer.HandlerCall.
const (
	CallValidate   = "validate"
	CallRegister   = "register"
	CallDeregister = "deregister"
)

// handlerSpanNames are the names of the handler calls' spans, made once (not per call, which
// would cost an allocation with tracing off).
var handlerSpanNames = map[string]string{
	CallValidate:   tracing.SpanHandler + "." + CallValidate,
	CallRegister:   tracing.SpanHandler + "." + CallRegister,
	CallDeregister: tracing.SpanHandler + "." + CallDeregister,
}

// Registrar registers and deregisters plugins. It holds no per-plugin state and is safe for
// concurrent use; the caller runs at most one operation at a time per socket path.
type Registrar struct {
	cfg Config
	log *slog.Logger

	groupMu sync.Mutex
	groups  map[state.GroupKey]*groupLock
}

// groupLock serializes the handler calls about the instances of one plugin (its sockets with
// the same type and name), which the reconciler may run at once.
type groupLock struct {
	mu   sync.Mutex
	refs int
}

// lockGroup locks the group of plugin typ/name and returns its unlock.
func (r *Registrar) lockGroup(typ, name string) (unlock func()) {
	k := state.GroupKey{Type: typ, Name: name}
	r.groupMu.Lock()
	g := r.groups[k]
	if g == nil {
		g = &groupLock{}
		r.groups[k] = g
	}
	g.refs++
	r.groupMu.Unlock()
	g.mu.Lock()
	return func() {
		g.mu.Unlock()
		r.groupMu.Lock()
		if g.refs--; g.refs == 0 {
			delete(r.groups, k)
		}
		r.groupMu.Unlock()
	}
}

// activeOf returns the instance of the plugin typ/name that its handler serves, other than
// at socket except.
func (r *Registrar) activeOf(typ, name, except string) (state.Plugin, bool) {
	for _, p := range r.cfg.Actual.Group(typ, name) {
		if p.Socket != except && !p.Standby {
			return p, true
		}
	}
	return state.Plugin{}, false
}

// The defaults of Config's bounds: the one place they are written (config.Default takes them).
const (
	DefaultDialTimeout    = 10 * time.Second
	DefaultGetInfoTimeout = 5 * time.Second
	DefaultNotifyTimeout  = 5 * time.Second
)

// New returns a Registrar for cfg, with defaults filled in.
func New(cfg Config) (*Registrar, error) {
	if cfg.Handlers == nil || cfg.Actual == nil {
		return nil, errors.New("registrar: Config.Handlers and Config.Actual are required")
	}
	setDefault(&cfg.DialTimeout, DefaultDialTimeout)
	setDefault(&cfg.ListenGrace, time.Second)
	setDefault(&cfg.GetInfoTimeout, DefaultGetInfoTimeout)
	setDefault(&cfg.NotifyTimeout, DefaultNotifyTimeout)
	setDefault(&cfg.HandlerTimeout, 5*time.Second)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Registrar{cfg: cfg, log: log, groups: make(map[state.GroupKey]*groupLock)}, nil
}

func setDefault(d *time.Duration, v time.Duration) {
	if *d <= 0 {
		*d = v
	}
}

// Register registers the plugin serving at s.Path. On success the plugin is in the actual
// state and was told so (NotifyRegistrationStatus(true)).
//
// The steps are the kubelet's: dial; GetInfo, whose answer is checked with
// registration.ValidateInfo; find the handler for the plugin's type; ValidatePlugin; add to
// the actual state (before RegisterPlugin, so that a removal arriving meanwhile becomes a
// deregistration); RegisterPlugin; NotifyRegistrationStatus(true). When a step after GetInfo
// refuses the plugin, it is told why with NotifyRegistrationStatus(false); whether that call
// succeeds does not change the outcome. When the final notification fails, the registration
// is rolled back (removed from the actual state, DeRegisterPlugin called).
//
// Every step has its own deadline (see Config); no goroutine outlives the call. Failures are
// logged here at debug level only: the caller (the reconciler) logs each failed attempt
// once, with its retry. The error
// wraps one of registration's sentinels: ErrUnreachable (dial or GetInfo failed),
// ErrProtocol (the plugin's answer to GetInfo broke HTTP/2 or gRPC), ErrInvalidInfo, ErrNoHandler (the caller should wait for a handler, not back off),
// ErrRejected (with the handler's error also wrapped) or ErrNotifyFailed. Once GetInfo has
// answered, the error is a *PluginError naming the plugin. Register logs a success at info
// level and a failure at debug level; the caller logs the failure once, with what it will do.
func (r *Registrar) Register(ctx context.Context, s state.Socket) error {
	err := r.register(ctx, s)
	r.endPass(ctx, s.Path, err)
	if o := r.cfg.Observer; o != nil {
		var pe *PluginError
		switch {
		case err == nil:
			if p, ok := r.cfg.Actual.Get(s.Path); ok {
				o.Registration(p.Type, nil, r.cfg.Now().Sub(s.Seen))
			}
		case errors.As(err, &pe):
			o.Registration(pe.Type, err, r.cfg.Now().Sub(s.Seen))
		}
	}
	return err
}

func (r *Registrar) register(ctx context.Context, s state.Socket) error {
	start := time.Now()
	log := r.log.With("socket", s.Path)

	dctx, span := tracing.Start(ctx, r.cfg.Tracer, tracing.SpanDial, trace.SpanKindClient)
	if span.IsRecording() {
		span.SetAttributes(attribute.String(tracing.ServerAddress, s.Path))
	}
	conn, err := r.dial(dctx, s)
	tracing.End(span, err, r.errorType(err))
	if err != nil {
		log.Debug("plugin unreachable", "error", err)
		return err
	}
	client := newWireConn(conn)
	client.socket = s.Path
	defer client.close()

	info, err := r.getInfo(ctx, client, s.Path)
	if err != nil {
		if errors.Is(err, registration.ErrInvalidInfo) {
			log.Debug("plugin refused: invalid GetInfo answer", "error", err)
			r.notifyFalse(ctx, log, client, err)
		} else if errors.Is(err, registration.ErrProtocol) {
			log.Warn("plugin broke the gRPC protocol", "error", err)
		} else {
			log.Debug("plugin unreachable", "error", err)
		}
		return err
	}
	log = log.With("plugin_type", info.Type, "plugin", info.Name)

	h, ok := r.cfg.Handlers.Get(info.Type)
	if !ok && r.cfg.HandlersPending != nil && r.cfg.HandlersPending() {
		err := fmt.Errorf("%w: %s at socket %s, while the handlers from registries are still being pulled", registration.ErrNoHandler, info.Type, s.Path)
		log.Debug("plugin waits: no handler for its type yet, and the handlers from registries are still being pulled")
		return &PluginError{Type: info.Type, Name: info.Name, Versions: info.Versions, Err: err, Pending: true}
	}
	if !ok {
		err := fmt.Errorf("%w: %s at socket %s", registration.ErrNoHandler, info.Type, s.Path)
		log.Debug("plugin waits for a handler for its type", "error", err)
		r.notifyFalse(ctx, log, client, err)
		return &PluginError{Type: info.Type, Name: info.Name, Versions: info.Versions, Err: err}
	}
	return r.registerWith(ctx, log, client, s, info, h, start)
}

// registerWith registers the plugin at s, which answered GetInfo with info, with h, the
// handler of its type, and tells it the outcome. The handler phase holds a slot of the
// plugin's type and the lock of its group; both are let go before the wait for the kubelet's
// verdict of a forwarded plugin (forward.go).
func (r *Registrar) registerWith(ctx context.Context, log *slog.Logger, client *wireConn, s state.Socket, info registration.PluginInfo, h registration.Handler, start time.Time) error {
	release := func() {}
	if r.cfg.TypeSlots != nil {
		rel, ok := r.cfg.TypeSlots.Acquire(ctx, info.Type, typeSlotWait)
		if !ok {
			log.Debug("every slot of the plugin's type is taken; it waits for one")
			return &PluginError{Type: info.Type, Name: info.Name, Versions: info.Versions,
				Err: fmt.Errorf("%w: %s", typeslots.ErrBusy, info.Type)}
		}
		release = rel
	}
	// Several instances of one plugin (a rolling update): the newest one registered is the
	// one the handler serves; the one it replaces stays registered as a standby.
	unlock := r.lockGroup(info.Type, info.Name)
	held := true
	letGo := func() {
		if held {
			held = false
			unlock()
			release()
		}
	}
	defer letGo()
	prev, hasPrev := r.activeOf(info.Type, info.Name, s.Path)
	if err := r.admit(ctx, log, client, s, info, h, prev, hasPrev); err != nil {
		return err
	}
	if fw := r.cfg.Forward; fw != nil && fw.Forwards(info.Type) {
		letGo()
		if err := r.forward(ctx, log, client, s, info); err != nil {
			return err
		}
		r.registered(log, client, s, info, prev.Socket, start)
		return nil
	}
	if err := r.notifyRegistered(ctx, log, client, s, info, h, prev, hasPrev); err != nil {
		return err
	}
	r.registered(log, client, s, info, prev.Socket, start)
	return nil
}

// admit asks h to validate and register the plugin at s, recording it in the actual state
// (before RegisterPlugin) and making prev, the instance of the plugin its handler served, a
// standby. A refusal is told to the plugin and returned, undone.
func (r *Registrar) admit(ctx context.Context, log *slog.Logger, client *wireConn, s state.Socket, info registration.PluginInfo, h registration.Handler, prev state.Plugin, hasPrev bool) error {
	if herr := r.callHandler(ctx, info.Type, CallValidate, func(ctx context.Context) error { return h.ValidatePlugin(ctx, info) }); herr != nil {
		err := refused(info, "ValidatePlugin", herr)
		log.Debug("plugin refused by its handler", "error", err)
		r.notifyFalse(ctx, log, client, err)
		return &PluginError{Type: info.Type, Name: info.Name, Versions: info.Versions, Err: err}
	}

	r.cfg.Actual.Add(state.Plugin{
		Socket:       s.Path,
		ID:           s.ID,
		Type:         info.Type,
		Name:         info.Name,
		Endpoint:     info.Endpoint,
		Versions:     info.Versions,
		Handler:      h,
		RegisteredAt: r.cfg.Now(),
	})
	setStandby := func(standby bool) {
		if hasPrev {
			r.cfg.Actual.Update(prev.Socket, func(p *state.Plugin) { p.Standby = standby })
		}
	}
	setStandby(true)
	var published map[string]string
	herr := r.callHandler(ctx, info.Type, CallRegister, func(ctx context.Context) error {
		var err error
		published, err = h.RegisterPlugin(ctx, info)
		return err
	})
	if herr != nil {
		r.cfg.Actual.Remove(s.Path)
		setStandby(false)
		err := refused(info, "RegisterPlugin", herr)
		log.Debug("plugin refused by its handler", "error", err)
		r.notifyFalse(ctx, log, client, err)
		return &PluginError{Type: info.Type, Name: info.Name, Versions: info.Versions, Err: err}
	}
	if published != nil {
		published = maps.Clone(published)
		r.cfg.Actual.Update(s.Path, func(p *state.Plugin) { p.Published = published })
	}
	return nil
}

// notifyRegistered tells the plugin at s it is registered. When it does not take it, the
// registration is rolled back: removed from the actual state, its handler's DeRegisterPlugin
// called, and prev, the instance it replaced, serving again.
func (r *Registrar) notifyRegistered(ctx context.Context, log *slog.Logger, client *wireConn, s state.Socket, info registration.PluginInfo, h registration.Handler, prev state.Plugin, hasPrev bool) error {
	if nerr := r.notify(ctx, client, true, ""); nerr != nil {
		r.cfg.Actual.Remove(s.Path)
		defer func() {
			if hasPrev {
				// The instance it replaced serves again: the handler is told of it anew.
				r.takeOver(ctx, prev, log)
			}
		}()
		err := fmt.Errorf("%w: plugin %s (type %s) at socket %s: NotifyRegistrationStatus(true): %w", registration.ErrNotifyFailed, info.Name, info.Type, s.Path, nerr)
		if derr := r.callHandler(ctx, info.Type, CallDeregister, func(ctx context.Context) error { return h.DeRegisterPlugin(ctx, info) }); derr != nil {
			log.Warn("plugin did not take its registration; rolling back, DeRegisterPlugin failed", "error", err, "deregister_error", derr)
		} else {
			log.Warn("plugin did not take its registration; rolled back", "error", err)
		}
		return &PluginError{Type: info.Type, Name: info.Name, Versions: info.Versions, Err: err}
	}
	return nil
}

// registered logs a registration, and has the plugin watched for liveness from now on.
// replaced is the instance it replaces, now a standby, if any.
func (r *Registrar) registered(log *slog.Logger, client *wireConn, s state.Socket, info registration.PluginInfo, replaced string, start time.Time) {
	if replaced != "" {
		// The message is the same as for any registration (operators search for it); the
		// instance it replaces, now a standby, is named.
		log.Info("plugin registered", "endpoint", info.Endpoint, "versions", info.Versions,
			"replaces_as_standby", replaced, "elapsed", time.Since(start))
	} else {
		log.Info("plugin registered", "endpoint", info.Endpoint, "versions", info.Versions, "elapsed", time.Since(start))
	}
	if lv := r.cfg.Liveness; lv != nil {
		// Watched from now on, on the connection it registered over (kept open, idle): if its
		// server goes while its socket stays, the kernel closes it and the monitor notices.
		if c := client.detach(); c != nil {
			if err := lv.Adopt(s.Path, s.ID, c); err != nil {
				log.Debug("plugin not watched for liveness", "error", err)
			}
		}
	}
}

// refused is the error of a handler call that refused the plugin. Where the handler gave a
// reason (its error already matches registration.ErrRejected), the reason comes first, since it
// is what the plugin and the operator need to read, and the sentinel is not said twice; any
// other failure (a trap, a timeout, a budget, quarantine) is the handler's, not the plugin's:
// it is wrapped with ErrHandlerFailed and the call that failed.
func refused(info registration.PluginInfo, call string, herr error) error {
	if errors.Is(herr, registration.ErrRejected) {
		return fmt.Errorf("%w (%s of plugin %s, type %s, at socket %s)", herr, call, info.Name, info.Type, info.Socket)
	}
	return fmt.Errorf("%w: %s of plugin %s (type %s) at socket %s: %w", registration.ErrHandlerFailed, call, info.Name, info.Type, info.Socket, herr)
}

// PluginError is the error of a Register that got as far as a valid GetInfo answer: it says
// which plugin failed, for callers that show it (found with errors.As). It wraps the error
// with the sentinel.
type PluginError struct {
	Type     string   // the plugin's type, as it answered GetInfo
	Name     string   // the plugin's name
	Versions []string // the versions it said it supports
	Err      error
	// Pending: no handler serves its type yet, but handlers may still arrive
	// (Config.HandlersPending): any change of the handler set retries it.
	Pending bool
}

// WaitsForAnyHandlerChange reports whether the plugin waits for any change of the handler set,
// not only for a handler of its type (Pending).
func (e *PluginError) WaitsForAnyHandlerChange() bool { return e.Pending }

func (e *PluginError) Error() string { return e.Err.Error() }
func (e *PluginError) Unwrap() error { return e.Err }

// PluginType returns the type of the plugin that failed.
func (e *PluginError) PluginType() string { return e.Type }

// PluginName returns the name of the plugin that failed.
func (e *PluginError) PluginName() string { return e.Name }

// PluginVersions returns the versions the plugin that failed said it supports.
func (e *PluginError) PluginVersions() []string { return e.Versions }

// Deregister forgets p: it removes p from the actual state, then calls p.Handler's
// DeRegisterPlugin (within HandlerTimeout). There is no call to the plugin, which is usually
// gone. A handler error is logged and returned; the plugin stays removed.
func (r *Registrar) Deregister(ctx context.Context, p state.Plugin) error {
	log := r.log.With("socket", p.Socket, "plugin_type", p.Type, "plugin", p.Name)
	if lv := r.cfg.Liveness; lv != nil {
		lv.Forget(p.Socket)
	}
	if fw := r.cfg.Forward; fw != nil {
		// Gone from the kubelet too: it deregisters the plugin when the socket goes.
		fw.Remove(p.Socket)
	}
	err := r.deregister(ctx, log, p)
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		outcome := "deregistered"
		if err != nil {
			outcome = r.errorType(err)
			span.SetAttributes(attribute.String(tracing.ErrorType, outcome))
		}
		span.SetAttributes(attribute.String(tracing.AttrSocket, p.Socket),
			attribute.String(tracing.AttrPluginType, p.Type),
			attribute.String(tracing.AttrPluginName, p.Name),
			attribute.String(tracing.AttrOutcome, outcome))
		if p.HandlerSHA256 != "" {
			span.SetAttributes(attribute.String(tracing.AttrRevision, "sha256:"+p.HandlerSHA256))
		}
	}
	return err
}

// deregister is Deregister once the plugin is neither watched nor presented to the kubelet.
func (r *Registrar) deregister(ctx context.Context, log *slog.Logger, p state.Plugin) error {
	defer r.lockGroup(p.Type, p.Name)()
	cur, ok := r.cfg.Actual.Get(p.Socket)
	r.cfg.Actual.Remove(p.Socket)
	if ok && cur.ID == p.ID && cur.Standby {
		log.Info("plugin deregistered", "standby", true, "note", "a standby instance: its handler serves another instance and was not called")
		return nil
	}
	// Another instance of the plugin takes over: the handler is told of it, not of this one's
	// going.
	var next state.Plugin
	for _, q := range r.cfg.Actual.Group(p.Type, p.Name) {
		if q.Standby && (next.Socket == "" || q.RegisteredAt.After(next.RegisteredAt)) {
			next = q
		}
	}
	if next.Socket != "" && r.takeOver(ctx, next, log) {
		log.Info("plugin deregistered", "taken_over_by", next.Socket, "note", "another instance of the plugin took over: its handler was told of that one, not of this one's going")
		return nil
	}
	h := HandlerOf(p)
	if h == nil {
		log.Info("plugin deregistered (it had no handler)")
		return nil
	}
	info := InfoOf(p)
	if herr := r.callHandler(ctx, p.Type, CallDeregister, func(ctx context.Context) error { return h.DeRegisterPlugin(ctx, info) }); herr != nil {
		err := fmt.Errorf("registrar: plugin %s (type %s) at socket %s: DeRegisterPlugin: %w", p.Name, p.Type, p.Socket, herr)
		log.Warn("plugin deregistered, but its handler failed", "error", err)
		return err
	}
	log.Info("plugin deregistered")
	return nil
}

// takeOver makes the standby instance q the one its handler serves: ValidatePlugin and
// RegisterPlugin of q. It reports whether that worked; if not, q leaves the actual state (the
// reconciler registers it anew, with the usual outcomes).
func (r *Registrar) takeOver(ctx context.Context, q state.Plugin, log *slog.Logger) bool {
	h := HandlerOf(q)
	if h == nil {
		return false
	}
	info := InfoOf(q)
	var published map[string]string
	err := r.callHandler(ctx, q.Type, CallValidate, func(ctx context.Context) error { return h.ValidatePlugin(ctx, info) })
	if err == nil {
		err = r.callHandler(ctx, q.Type, CallRegister, func(ctx context.Context) error {
			var err error
			published, err = h.RegisterPlugin(ctx, info)
			return err
		})
	}
	if err != nil {
		log.Warn("standby instance could not take over; it will be registered anew", "instance", q.Socket, "error", err)
		if fw := r.cfg.Forward; fw != nil {
			fw.Remove(q.Socket)
		}
		r.cfg.Actual.Remove(q.Socket)
		return false
	}
	r.cfg.Actual.Update(q.Socket, func(p *state.Plugin) {
		p.Standby = false
		p.Published = maps.Clone(published)
	})
	return true
}

// getInfo asks the plugin who it is, within GetInfoTimeout, and checks the answer.
func (r *Registrar) getInfo(ctx context.Context, client *wireConn, socket string) (registration.PluginInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.GetInfoTimeout)
	defer cancel()
	ctx, span := r.startRPC(ctx, regapi.Registration_GetInfo_FullMethodName, socket)
	raw, err := client.call(ctx, regapi.Registration_GetInfo_FullMethodName, nil)
	r.endRPC(span, err)
	if status.Code(err) == codes.ResourceExhausted {
		return registration.PluginInfo{}, fmt.Errorf("%w: socket %s: GetInfo answer: %w", registration.ErrInvalidInfo, socket, err)
	}
	if errors.Is(err, registration.ErrProtocol) {
		return registration.PluginInfo{}, fmt.Errorf("%w: socket %s: GetInfo: %w", registration.ErrProtocol, socket, err)
	}
	if err != nil {
		return registration.PluginInfo{}, fmt.Errorf("%w: socket %s: GetInfo: %w", registration.ErrUnreachable, socket, err)
	}
	in, err := decodeInfo(socket, raw)
	if err != nil {
		return registration.PluginInfo{}, err
	}
	return registration.ValidateInfo(socket, in)
}

// callHandler runs one handler call within HandlerTimeout. A panicking handler (a bug in a
// native Go handler) fails the call instead of the daemon.
func (r *Registrar) callHandler(ctx context.Context, pluginType, name string, call func(context.Context) error) (err error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.HandlerTimeout)
	defer cancel()
	ctx, span := tracing.Start(ctx, r.cfg.Tracer, handlerSpanNames[name], trace.SpanKindInternal)
	if span.IsRecording() {
		span.SetAttributes(attribute.String(tracing.AttrPluginType, pluginType))
	}
	defer func() { tracing.End(span, err, r.errorType(err)) }()
	if o := r.cfg.Observer; o != nil {
		start := time.Now()
		defer func() { o.HandlerCall(pluginType, name, err, time.Since(start)) }()
	}
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("handler panicked: %v", v)
		}
	}()
	return call(ctx)
}

// notify sends NotifyRegistrationStatus within NotifyTimeout.
func (r *Registrar) notify(ctx context.Context, client *wireConn, registered bool, reason string) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.NotifyTimeout)
	defer cancel()
	ctx, span := r.startRPC(ctx, regapi.Registration_NotifyRegistrationStatus_FullMethodName, client.socket)
	if span.IsRecording() {
		span.SetAttributes(attribute.Bool(tracing.AttrRegistered, registered))
	}
	_, err := client.call(ctx, regapi.Registration_NotifyRegistrationStatus_FullMethodName, encodeStatus(registered, reason))
	r.endRPC(span, err)
	return err
}

// notifyFalse tells the plugin why it is not registered. Plugins react differently (the CSI
// node-driver-registrar exits inside the call, the DRA helper returns an error, some never
// answer), and none of that changes the outcome; a failure is logged at warn level with the
// reason the plugin may have missed, since the log is then the only place it is said.
func (r *Registrar) notifyFalse(ctx context.Context, log *slog.Logger, client *wireConn, cause error) {
	reason := reasonFor(cause)
	if err := r.notify(ctx, client, false, reason); err != nil {
		log.Warn("NotifyRegistrationStatus(false) failed", "error", err, "reason", reason)
	}
}

// maxReason caps the reason sent to a plugin, in bytes.
const maxReason = 1024

// reasonFor turns an error into the reason sent to the plugin: without the package prefix,
// valid UTF-8 (protobuf refuses to send anything else; a handler's error may hold anything),
// and at most maxReason bytes.
func reasonFor(err error) string {
	s := strings.TrimPrefix(err.Error(), "registration: ")
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) > maxReason {
		cut := maxReason
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}
