package policy

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/wasmhost/wasmhost/internal/host/sandbox"
	"github.com/wasmhost/wasmhost/internal/registration"
)

// The call path of a handler call, in the order a call takes it. The sandbox (package sandbox)
// runs a module's export for a plugin; the policies of a handler's revisions and failures sit as
// a layer over it, here: a Serving is a module as the layer serves it, with the state of those
// policies, and its Serve is the whole path of one call.
//
// A plugin's call reaches the registered handler of its type (TypeHandler), which takes the
// module served for the type now (swapped by the reloader, package host's dir.go), or a module
// loaded by path (Module's ValidatePlugin, RegisterPlugin, DeRegisterPlugin, through its own
// Serving: sandbox.Module.SetOwn); then Serving.Serve:
//
//  1. a rollback pin: the type is served by an older revision, whose Serving takes the call
//     (rollback.go);
//  2. a shadow run: a candidate named for the type validates the same plugin beside the
//     serving call, in the background (shadow.go);
//  3. the sandbox serves the call (sandbox.Module.Serve), with the layer as its policy (the
//     interface sandbox.Policy), in this order:
//  4. the call begins (Module.begin): the request, the call counted and, for the types
//     recorded, its record started (sandbox's record.go);
//  5. quarantine admits it (Serving.Admit): a handler that keeps trapping or timing out fails
//     the call at once, but for a probe now and then (quarantine.go);
//  6. the sandbox runs it (Module.call: an instance, the export run under its deadline, CPU and
//     budgets, its answer checked and turned into a decision);
//  7. what the outcome means to the policies (Serving.Outcome, or Serving.Refused for a call the
//     quarantine failed): to the quarantine, to the revision's counters (revisions.go) and its
//     probation, which may roll it back (rollback.go), and, for a registration, which
//     revision registered the plugin;
//  8. the sandbox hands the call's record to the Recorder (Module.endRecord).
//
// The sandbox knows nothing of the policies: the layer reaches it by Module's exported API
// (Enter, Leave, Serve, and the module's file, digest and plugin types); the sandbox reaches the
// layer only through the policy it is given for the call.

// Serving is a module serving as a handler, with the policy layer's state of its calls: a
// handler file's module (made by the reloader when it installs it), an older revision's loaded
// for a rollback pin, a shadow candidate, or a module loaded by path (host.LoadFile).
type Serving struct {
	h *Layer // whose layer serves it
	m *sandbox.Module
	q *Quarantine // the handler file's: shared by the modules of one file (a pinned revision's too)

	// The revision whose counters its calls add to (nil until the revision store records
	// it, and for a module of its own), its watch in its first minutes, and the plugin
	// types a rollback serves with another revision's module (revisions.go, rollback.go).
	rev       atomic.Pointer[revision]
	probation atomic.Pointer[probation]
	pins      atomic.Pointer[map[string]*Serving]
	// shadow: a shadow candidate (shadow.go): its calls start no shadow run of their own and
	// register nobody; its module is read-only.
	shadow bool

	// The bytes until the revision store keeps them (revisions.installed, from Sync).
	bin []byte
}

// NewServing makes m serve through the layer: q is its handler file's quarantine (nil: one of
// its own), bin its bytes, which the revision store keeps when the reloader says it serves
// (Sync; nil: not kept, no rollback to it).
func (h *Layer) NewServing(m *sandbox.Module, q *Quarantine, bin []byte) *Serving {
	if q == nil {
		q = new(Quarantine)
	}
	return &Serving{h: h, m: m, q: q, bin: bin}
}

// Module returns the module s serves with.
func (s *Serving) Module() *sandbox.Module { return s.m }

// QuarantineStatus is what s's quarantine says now.
func (s *Serving) QuarantineStatus() QuarantineStatus { return s.q.Status() }

// TypeHandler is the registration.Handler of one plugin type: a stable object registered
// once, behind which the module that serves the type is swapped atomically (by the reloader).
type TypeHandler struct {
	pluginType string
	cur        atomic.Pointer[Serving] // nil once retired
	gone       atomic.Pointer[string]  // why it was taken out of the registry
}

// NewTypeHandler returns the handler of pluginType, served by s.
func NewTypeHandler(pluginType string, s *Serving) *TypeHandler {
	th := &TypeHandler{pluginType: pluginType}
	th.cur.Store(s)
	return th
}

// PluginType returns the type t handles.
func (t *TypeHandler) PluginType() string { return t.pluginType }

// Swap makes s serve the type (nil: nothing, once retired) and returns what served it.
func (t *TypeHandler) Swap(s *Serving) *Serving { return t.cur.Swap(s) }

// Retire says why the type was taken out of the registry: the calls that reach it once nothing
// serves it fail with sandbox.ErrRetired and why.
func (t *TypeHandler) Retire(why string) { t.gone.Store(&why) }

// Gone says why the type was taken out of the registry, or "".
func (t *TypeHandler) Gone() string {
	if p := t.gone.Load(); p != nil {
		return *p
	}
	return ""
}

// HandlerName names the handler of a plugin type for a refusal: its file, when it is a
// TypeHandler (of this layer or another on the same registry).
func HandlerName(hd registration.Handler) string {
	if th, ok := hd.(*TypeHandler); ok {
		if s := th.cur.Load(); s != nil {
			return s.m.File()
		}
	}
	return fmt.Sprintf("another handler (%T)", hd)
}

// served returns the module serving the type, counted in, or sandbox.ErrRetired.
func (t *TypeHandler) served() (*Serving, error) {
	for {
		s := t.cur.Load()
		if s == nil {
			why := "retired"
			if p := t.gone.Load(); p != nil {
				why = *p
			}
			return nil, fmt.Errorf("%w: plugin type %s: %s", sandbox.ErrRetired, t.pluginType, why)
		}
		if s.m.Enter() {
			return s, nil
		}
		// s was swapped out and retired between the load and enter: take the new one.
		if t.cur.Load() == s {
			return nil, fmt.Errorf("%w: plugin type %s: handler %s is closed", sandbox.ErrRetired, t.pluginType, s.m.File())
		}
	}
}

func (t *TypeHandler) ValidatePlugin(ctx context.Context, p registration.PluginInfo) error {
	s, err := t.served()
	if err != nil {
		return err
	}
	defer s.m.Leave()
	_, err = s.Serve(ctx, sandbox.FnValidate, t.pluginType, p)
	return err
}

func (t *TypeHandler) RegisterPlugin(ctx context.Context, p registration.PluginInfo) (map[string]string, error) {
	s, err := t.served()
	if err != nil {
		return nil, err
	}
	defer s.m.Leave()
	return s.Serve(ctx, sandbox.FnRegister, t.pluginType, p)
}

func (t *TypeHandler) DeRegisterPlugin(ctx context.Context, p registration.PluginInfo) error {
	s, err := t.served()
	if err != nil {
		return err
	}
	defer s.m.Leave()
	_, err = s.Serve(ctx, sandbox.FnDeregister, t.pluginType, p)
	return err
}

// Serve is one handler call: plugin export fn (validate, register, deregister) for a plugin of
// pluginType, on behalf of its handler; the caller has entered s.m. The policies come first, in
// the order a call meets them, then the sandbox, then what the outcome means to the policies.
func (s *Serving) Serve(ctx context.Context, fn int, pluginType string, p registration.PluginInfo) (published map[string]string, err error) {
	// 1. A rollback pinned the type to an older revision: its module serves the call.
	if ps := s.pinFor(pluginType); ps != nil && ps.m.Enter() {
		defer ps.m.Leave()
		return ps.Serve(ctx, fn, pluginType, p)
	}
	m := s.m
	// 2. A candidate named for the type validates the same plugin in a shadow run.
	if fn == sandbox.FnValidate && !s.shadow {
		done := s.h.startShadow(pluginType, p)
		defer func() { done(err) }()
	}
	// 3. The sandbox serves the call, and s has its say as its policy (steps 4 to 8).
	return m.Serve(ctx, fn, pluginType, p, s)
}

// Admit is the quarantine's say on a call the sandbox began (step 5): a quarantined handler
// fails the call at once, unless it is let through as a probe (mark).
func (s *Serving) Admit(file string) (mark bool, err error) { return s.q.admit(time.Now(), file) }

// Refused: the quarantine failed the call at once; it counts for the revision (step 7).
func (s *Serving) Refused(err error) { s.observe(err) }

// Outcome is what the end of a call the sandbox ran means to the policies (step 7): to the
// quarantine (probe: it was let through as a probe), to the revision's counters and probation
// (which may roll it back), and who registered the plugin.
func (s *Serving) Outcome(fn int, p registration.PluginInfo, probe bool, err error) {
	s.quarantineOutcome(probe, err)
	s.observe(err)
	if err == nil {
		s.registered(fn, p)
	}
}

// quarantineOutcome tells the file's quarantine how an admitted call ended, and logs when the
// handler enters or leaves quarantine.
func (s *Serving) quarantineOutcome(probe bool, err error) {
	h := s.h
	fault := errors.Is(err, sandbox.ErrTrap) || errors.Is(err, context.DeadlineExceeded)
	neutral := err != nil && !fault && (errors.Is(err, context.Canceled) || errors.Is(err, sandbox.ErrRetired))
	reason := ""
	if err != nil {
		reason = err.Error()
	}
	change, backoff := s.q.outcome(h.cfg.Quarantine, probe, neutral, fault, reason, time.Now())
	switch change {
	case quarantineEntered:
		h.log.Warn("handler quarantined: its calls fail at once for a while, then one is let through as a probe",
			"handler", s.m.File(), "backoff", backoff, "probe_failed", probe, "error", err)
	case quarantineLeft:
		h.log.Info("handler left quarantine: the probe call did not trap or time out", "handler", s.m.File())
	}
}

// registered tells the daemon which revision registered a plugin (RevisionConfig.OnRegistered).
func (s *Serving) registered(fn int, p registration.PluginInfo) {
	if f := s.h.revs.cfg.OnRegistered; fn == sandbox.FnRegister && !s.shadow && f != nil {
		f(p.Socket, s.m.File(), s.m.SHA256())
	}
}

// typeHandlerOf returns the registered handler of t when it is one of this layer's.
func (h *Layer) typeHandlerOf(t string) *TypeHandler {
	hd, ok := h.cfg.Registry.Get(t)
	if !ok {
		return nil
	}
	th, _ := hd.(*TypeHandler)
	if th == nil || th.cur.Load() == nil || th.cur.Load().h != h {
		return nil
	}
	return th
}

// Serves reports whether a handler of this layer (of its host) serves plugin type t.
func (h *Layer) Serves(t string) bool { return h.typeHandlerOf(t) != nil }
