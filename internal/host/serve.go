package host

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
// a layer over it, here: a served is a module as the layer serves it, with the state of those
// policies, and its Serve is the whole path of one call.
//
// A plugin's call reaches the registered handler of its type (typeHandler), which takes the
// module served for the type now (swapped by Run, dir.go), or a module loaded by path (Module's
// ValidatePlugin, RegisterPlugin, DeRegisterPlugin, through its own served: sandbox.Module.SetOwn);
// then served.Serve:
//
//  1. a rollback pin: the type is served by an older revision, whose served takes the call
//     (rollback.go);
//  2. a shadow run: a candidate named for the type validates the same plugin beside the
//     serving call, in the background (shadow.go);
//  3. the sandbox serves the call (sandbox.Module.Serve), with the layer as its policy (the
//     interface sandbox.Policy), in this order:
//  4. the call begins (Module.begin): the request, the call counted and, for the types
//     recorded, its record started (sandbox's record.go);
//  5. quarantine admits it (served.Admit): a handler that keeps trapping or timing out fails
//     the call at once, but for a probe now and then (quarantine.go);
//  6. the sandbox runs it (Module.call: an instance, the export run under its deadline, CPU and
//     budgets, its answer checked and turned into a decision);
//  7. what the outcome means to the policies (served.Outcome, or served.Refused for a call the
//     quarantine failed): to the quarantine, to the revision's counters (revisions.go) and its
//     probation, which may roll it back (rollback.go), and, for a registration, which
//     revision registered the plugin;
//  8. the sandbox hands the call's record to the Recorder (Module.endRecord).
//
// The sandbox knows nothing of the policies: the layer reaches it by Module's exported API
// (Enter, Leave, Serve, and the module's file, digest and plugin types); the sandbox reaches the
// layer only through the policy it is given for the call.

// served is a module serving as a handler, with the policy layer's state of its calls: a
// handler file's module (made by Run when it installs it), an older revision's loaded for a
// rollback pin, a shadow candidate, or a module LoadFile returned.
type served struct {
	h *Host // whose layer serves it
	m *Module
	q *quarantine // the handler file's: shared by the modules of one file (a pinned revision's too)

	// The revision whose counters its calls add to (nil until the revision store records
	// it, and for a module of its own), its watch in its first minutes, and the plugin
	// types a rollback serves with another revision's module (revisions.go, rollback.go).
	rev       atomic.Pointer[revision]
	probation atomic.Pointer[probation]
	pins      atomic.Pointer[map[string]*served]
	// shadow: a shadow candidate (shadow.go): its calls start no shadow run of their own and
	// register nobody; its module is read-only.
	shadow bool

	// Run's goroutine only (dir.go): the bytes until the revision store keeps them
	// (revisions.installed), and how many per-type handlers point at it (at zero, its module
	// is retired).
	bin     []byte
	holders int
}

// typeHandler is the registration.Handler of one plugin type: a stable object registered
// once, behind which the module that serves the type is swapped atomically (by Run, dir.go).
type typeHandler struct {
	pluginType string
	cur        atomic.Pointer[served] // nil once retired
	gone       atomic.Pointer[string] // why it was taken out of the registry
	file       *fileEntry             // Run's goroutine only
}

// served returns the module serving the type, counted in, or ErrRetired.
func (t *typeHandler) served() (*served, error) {
	for {
		s := t.cur.Load()
		if s == nil {
			why := "retired"
			if p := t.gone.Load(); p != nil {
				why = *p
			}
			return nil, fmt.Errorf("%w: plugin type %s: %s", ErrRetired, t.pluginType, why)
		}
		if s.m.Enter() {
			return s, nil
		}
		// s was swapped out and retired between the load and enter: take the new one.
		if t.cur.Load() == s {
			return nil, fmt.Errorf("%w: plugin type %s: handler %s is closed", ErrRetired, t.pluginType, s.m.File())
		}
	}
}

func (t *typeHandler) ValidatePlugin(ctx context.Context, p registration.PluginInfo) error {
	s, err := t.served()
	if err != nil {
		return err
	}
	defer s.m.Leave()
	_, err = s.Serve(ctx, sandbox.FnValidate, t.pluginType, p)
	return err
}

func (t *typeHandler) RegisterPlugin(ctx context.Context, p registration.PluginInfo) (map[string]string, error) {
	s, err := t.served()
	if err != nil {
		return nil, err
	}
	defer s.m.Leave()
	return s.Serve(ctx, sandbox.FnRegister, t.pluginType, p)
}

func (t *typeHandler) DeRegisterPlugin(ctx context.Context, p registration.PluginInfo) error {
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
func (s *served) Serve(ctx context.Context, fn int, pluginType string, p registration.PluginInfo) (published map[string]string, err error) {
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
func (s *served) Admit(file string) (mark bool, err error) { return s.q.admit(time.Now(), file) }

// Refused: the quarantine failed the call at once; it counts for the revision (step 7).
func (s *served) Refused(err error) { s.observe(err) }

// Outcome is what the end of a call the sandbox ran means to the policies (step 7): to the
// quarantine (probe: it was let through as a probe), to the revision's counters and probation
// (which may roll it back), and who registered the plugin.
func (s *served) Outcome(fn int, p registration.PluginInfo, probe bool, err error) {
	s.quarantineOutcome(probe, err)
	s.observe(err)
	if err == nil {
		s.registered(fn, p)
	}
}

// quarantineOutcome tells the file's quarantine how an admitted call ended, and logs when the
// handler enters or leaves quarantine.
func (s *served) quarantineOutcome(probe bool, err error) {
	h := s.h
	fault := errors.Is(err, ErrTrap) || errors.Is(err, context.DeadlineExceeded)
	neutral := err != nil && !fault && (errors.Is(err, context.Canceled) || errors.Is(err, ErrRetired))
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

// registered tells the daemon which revision registered a plugin (Config.OnRegistered).
func (s *served) registered(fn int, p registration.PluginInfo) {
	if f := s.h.revs.cfg.OnRegistered; fn == sandbox.FnRegister && !s.shadow && f != nil {
		f(p.Socket, s.m.File(), s.m.SHA256())
	}
}

// typeHandlerOf returns the registered handler of t when it is one of this host's.
func (h *Host) typeHandlerOf(t string) *typeHandler {
	hd, ok := h.cfg.Registry.Get(t)
	if !ok {
		return nil
	}
	th, _ := hd.(*typeHandler)
	if th == nil || th.cur.Load() == nil || th.cur.Load().h != h {
		return nil
	}
	return th
}

// Serves reports whether a handler of this host serves plugin type t.
func (h *Host) Serves(t string) bool { return h.typeHandlerOf(t) != nil }
