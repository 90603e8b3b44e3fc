package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/wasmhost/wasmhost/internal/registration"
)

// The call path of a handler call, in the order a call takes it. A plugin's call reaches the
// registered handler of its type (typeHandler), which takes the module serving the type now,
// or a module loaded by path (Module's ValidatePlugin, RegisterPlugin, DeRegisterPlugin); then
// invoke, where the policies of a handler's revisions and failures come first:
//
//  1. a rollback pin: the type is served by an older revision, whose module takes the call
//     (revisions.go);
//  2. a shadow run: a candidate named for the type validates the same plugin beside the
//     serving call, in the background (shadow.go);
//  3. the request (newCall) and, for the types recorded, the call's record (record.go);
//  4. quarantine: a handler that keeps trapping or timing out fails the call at once, but
//     for a probe now and then (quarantine.go);
//
// then the sandbox, Module.call (module.go: an instance, the export run under its deadline,
// CPU and budgets, its answer checked and turned into a decision); and last what the outcome
// means to the policies: to the quarantine, to the revision's counters and its probation,
// which may roll it back (revisions.go), and, for a registration, which revision registered
// the plugin.

// typeHandler is the registration.Handler of one plugin type: a stable object registered
// once, behind which the module that serves the type is swapped atomically (by Run, dir.go).
type typeHandler struct {
	pluginType string
	cur        atomic.Pointer[Module] // nil once retired
	gone       atomic.Pointer[string] // why it was taken out of the registry
	file       *fileEntry             // Run's goroutine only
}

// module returns the module serving the type, counted in, or ErrRetired.
func (t *typeHandler) module() (*Module, error) {
	for {
		m := t.cur.Load()
		if m == nil {
			why := "retired"
			if p := t.gone.Load(); p != nil {
				why = *p
			}
			return nil, fmt.Errorf("%w: plugin type %s: %s", ErrRetired, t.pluginType, why)
		}
		if m.enter() {
			return m, nil
		}
		// m was swapped out and retired between the load and enter: take the new one.
		if t.cur.Load() == m {
			return nil, fmt.Errorf("%w: plugin type %s: handler %s is closed", ErrRetired, t.pluginType, m.file)
		}
	}
}

func (t *typeHandler) ValidatePlugin(ctx context.Context, p registration.PluginInfo) error {
	m, err := t.module()
	if err != nil {
		return err
	}
	defer m.leave()
	_, err = m.invoke(ctx, fnValidate, t.pluginType, p)
	return err
}

func (t *typeHandler) RegisterPlugin(ctx context.Context, p registration.PluginInfo) (map[string]string, error) {
	m, err := t.module()
	if err != nil {
		return nil, err
	}
	defer m.leave()
	return m.invoke(ctx, fnRegister, t.pluginType, p)
}

func (t *typeHandler) DeRegisterPlugin(ctx context.Context, p registration.PluginInfo) error {
	m, err := t.module()
	if err != nil {
		return err
	}
	defer m.leave()
	_, err = m.invoke(ctx, fnDeregister, t.pluginType, p)
	return err
}

// ValidatePlugin implements registration.Handler for a plugin of one of the module's types.
func (m *Module) ValidatePlugin(ctx context.Context, p registration.PluginInfo) error {
	_, err := m.direct(ctx, fnValidate, p)
	return err
}

// RegisterPlugin implements registration.Handler for a plugin of one of the module's types.
func (m *Module) RegisterPlugin(ctx context.Context, p registration.PluginInfo) (map[string]string, error) {
	return m.direct(ctx, fnRegister, p)
}

// DeRegisterPlugin implements registration.Handler for a plugin of one of the module's types.
func (m *Module) DeRegisterPlugin(ctx context.Context, p registration.PluginInfo) error {
	_, err := m.direct(ctx, fnDeregister, p)
	return err
}

func (m *Module) direct(ctx context.Context, fn int, p registration.PluginInfo) (map[string]string, error) {
	if !slices.Contains(m.manifest.PluginTypes, p.Type) {
		return nil, fmt.Errorf("%w %q: handler %s handles %v", registration.ErrNoHandler, p.Type, m.file, m.manifest.PluginTypes)
	}
	if !m.enter() {
		return nil, fmt.Errorf("%w: handler %s is closed", ErrRetired, m.file)
	}
	defer m.leave()
	return m.invoke(ctx, fn, p.Type, p)
}

// invoke is one handler call: plugin export fn (validate, register, deregister) for a plugin of
// pluginType, on behalf of its handler; the caller has entered m. The policies come first, in
// the order a call meets them, then the sandbox, then what the outcome means to the policies.
func (m *Module) invoke(ctx context.Context, fn int, pluginType string, p registration.PluginInfo) (published map[string]string, err error) {
	// 1. A rollback pinned the type to an older revision: its module serves the call.
	if pm := m.pinFor(pluginType); pm != nil && pm.enter() {
		defer pm.leave()
		return pm.invoke(ctx, fn, pluginType, p)
	}
	// 2. A candidate named for the type validates the same plugin in a shadow run.
	if fn == fnValidate && !m.shadow {
		done := m.h.startShadow(pluginType, p)
		defer func() { done(err) }()
	}
	// 3. The request, and the call's record for a type recorded.
	st, err := m.newCall(fn, pluginType, p)
	if err != nil {
		return nil, err
	}
	if m.startRecord(st); st.rec != nil {
		defer func() { m.endRecord(st, p, published, err) }()
	}
	m.stats.calls.Add(1)
	// 4. A quarantined handler fails the call at once, unless it is let through as a probe.
	probe, err := m.stats.q.admit(time.Now(), m.file)
	if err != nil {
		m.stats.failures.Add(1)
		m.observe(err)
		return nil, err
	}
	// 5. The sandbox.
	published, err = m.call(ctx, st, fn, p)
	// 6. The outcome: to the quarantine, to the revision's counters and probation (which may
	// roll it back), and who registered the plugin.
	m.quarantineOutcome(probe, err)
	m.observe(err)
	if err != nil {
		return nil, err
	}
	m.registered(fn, p)
	return published, nil
}

// quarantineOutcome tells the file's quarantine how an admitted call ended, and logs when the
// handler enters or leaves quarantine.
func (m *Module) quarantineOutcome(probe bool, err error) {
	fault := errors.Is(err, ErrTrap) || errors.Is(err, context.DeadlineExceeded)
	neutral := err != nil && !fault && (errors.Is(err, context.Canceled) || errors.Is(err, ErrRetired))
	reason := ""
	if err != nil {
		reason = err.Error()
	}
	change, backoff := m.stats.q.outcome(m.h.cfg.Quarantine, probe, neutral, fault, reason, time.Now())
	switch change {
	case quarantineEntered:
		m.h.log.Warn("handler quarantined: its calls fail at once for a while, then one is let through as a probe",
			"handler", m.file, "backoff", backoff, "probe_failed", probe, "error", err)
	case quarantineLeft:
		m.h.log.Info("handler left quarantine: the probe call did not trap or time out", "handler", m.file)
	}
}
