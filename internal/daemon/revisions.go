package daemon

import (
	"context"
	"errors"
	"maps"
	"path/filepath"
	"slices"
	"time"

	"github.com/wasmhost/wasmhost/internal/admin"
	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/host"
	"github.com/wasmhost/wasmhost/internal/host/policy"
	"github.com/wasmhost/wasmhost/internal/host/sandbox"
	"github.com/wasmhost/wasmhost/internal/metrics"
	"github.com/wasmhost/wasmhost/internal/state"
)

// This file wires the revisions of the handlers: the hosts keep them (<stateDir>/revisions),
// the store shows them, the admin API's Rollback, ClearPin and SetShadow reach them, and each
// registered plugin records the revision that registered it.

// setUpRevisions configures the hosts' revision stores and the shadow candidates of the config.
func (d *Daemon) setUpRevisions(ctx context.Context, cfg config.Config) error {
	r := cfg.Handlers.Revisions
	rc := policy.RevisionConfig{
		Dir:               filepath.Join(cfg.StateDir, "revisions"),
		Keep:              r.Keep,
		RollbackWindow:    time.Duration(r.AutoRollback.Window),
		RollbackThreshold: r.AutoRollback.Threshold,
		RollbackMinCalls:  r.AutoRollback.MinCalls,
		OnRegistered:      d.registeredBy,
	}
	if err := d.host.ConfigureRevisions(rc); err != nil {
		return err
	}
	if d.oci != nil {
		rc.Dir = filepath.Join(rc.Dir, "sources") // an index of its own
		if err := d.oci.Host().ConfigureRevisions(rc); err != nil {
			return err
		}
	}
	d.state.SetHistory(d.history)
	for _, typ := range slices.Sorted(maps.Keys(cfg.Handlers.Types)) {
		if c := cfg.Handlers.Types[typ].Shadow; c != "" {
			if _, err := d.hostFor(typ).SetShadow(ctx, typ, c); err != nil {
				// A candidate is an experiment: the daemon serves without it.
				d.log.Error("shadow candidate not set (handlers.types.<T>.shadow)", "plugin_type", typ, "shadow", c, "error", err)
			}
		}
	}
	return nil
}

// registeredBy records in the plugin's entry the revision that registered it (and published
// what it shows): a later revision of the file does not take it over.
func (d *Daemon) registeredBy(socket, file, sha256 string) {
	d.actual.Update(socket, func(p *state.Plugin) { p.HandlerFile, p.HandlerSHA256 = file, sha256 })
}

// hosts are the daemon's hosts: the handler directory's, and the sources' if any.
func (d *Daemon) hosts() []*host.Host {
	if d.oci != nil {
		return []*host.Host{d.host, d.oci.Host()}
	}
	return []*host.Host{d.host}
}

// hostFor is the host serving pluginType, else the handler directory's.
func (d *Daemon) hostFor(pluginType string) *host.Host {
	for _, h := range d.hosts() {
		if h.Serves(pluginType) {
			return h
		}
	}
	return d.host
}

// history is the store's view of the revisions of pluginType's handler.
func (d *Daemon) history(pluginType string) (state.History, bool) {
	for _, h := range d.hosts() {
		revs, pin := h.History(pluginType)
		shadow := shadowOf(h, pluginType)
		if len(revs) == 0 && shadow == nil {
			continue
		}
		out := state.History{PluginType: pluginType, Shadow: shadow}
		if pin != nil {
			p := pinToState(*pin)
			out.Pin = &p
		}
		for _, r := range revs {
			out.Revisions = append(out.Revisions, revisionToState(r))
		}
		return out, true
	}
	return state.History{}, false
}

// pinsOf and shadowsOf are what the handler set and its counters show of a file's types.
func (d *Daemon) pinsOf(types []string) []state.Pin {
	var out []state.Pin
	for _, h := range d.hosts() {
		for _, p := range h.Pins(types) {
			out = append(out, pinToState(p))
		}
	}
	return out
}

func (d *Daemon) shadowsOf(types []string) []state.Shadow {
	var out []state.Shadow
	for _, h := range d.hosts() {
		for _, t := range types {
			if s := shadowOf(h, t); s != nil {
				out = append(out, *s)
			}
		}
	}
	return out
}

func shadowOf(h *host.Host, pluginType string) *state.Shadow {
	for _, s := range h.Shadows() {
		if s.PluginType == pluginType {
			return &state.Shadow{PluginType: s.PluginType, SHA256: s.SHA256, File: s.File, Name: s.Name,
				Version: s.Version, Since: s.Since, Runs: s.Runs, Disagreements: s.Disagreements,
				Failures: s.Failures, Skipped: s.Skipped, LastDisagreement: s.LastDisagreement}
		}
	}
	return nil
}

func pinToState(p policy.Pin) state.Pin {
	return state.Pin{PluginType: p.PluginType, SHA256: p.SHA256, FileSHA256: p.FileSHA256, Auto: p.Auto, Reason: p.Reason, At: p.At}
}

func revisionToState(r policy.Revision) state.Revision {
	return state.Revision{SHA256: r.SHA256, File: r.File, Name: r.Name, Version: r.Version,
		PluginTypes: r.PluginTypes, Size: r.Size, FirstLoaded: r.FirstLoaded, Calls: r.Calls,
		Failures: r.Failures, Traps: r.Traps, Timeouts: r.Timeouts, Serving: r.Serving,
		Pinned: r.Pinned, InFile: r.InFile, RolledBack: r.Bad}
}

// revisionControl serves the admin API's Rollback, ClearPin and SetShadow.
type revisionControl struct{ d *Daemon }

var _ admin.Control = revisionControl{}

func (c revisionControl) Rollback(ctx context.Context, pluginType, sha256 string) (state.Revision, error) {
	r, err := c.d.hostFor(pluginType).Rollback(ctx, pluginType, sha256)
	if err != nil {
		return state.Revision{}, controlError(err)
	}
	return revisionToState(r), nil
}

func (c revisionControl) ClearPin(_ context.Context, pluginType string) error {
	return controlError(c.d.hostFor(pluginType).Unpin(pluginType))
}

func (c revisionControl) SetShadow(ctx context.Context, pluginType, candidate string) (*state.Shadow, error) {
	if _, err := c.d.hostFor(pluginType).SetShadow(ctx, pluginType, candidate); err != nil {
		return nil, controlError(err)
	}
	return shadowOf(c.d.hostFor(pluginType), pluginType), nil
}

// controlError says whose the error of a revision change is, for the admin API's codes; its
// message is the host's.
func controlError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, policy.ErrNoRevision):
		return kindError{admin.ErrNotFound, err}
	case errors.Is(err, sandbox.ErrBadModule), errors.Is(err, sandbox.ErrInsecure):
		return kindError{admin.ErrInvalid, err}
	}
	return err
}

type kindError struct{ kind, err error }

func (e kindError) Error() string   { return e.err.Error() }
func (e kindError) Unwrap() []error { return []error{e.kind, e.err} }

func pinSamples(ps []state.Pin) []metrics.PinSample {
	var out []metrics.PinSample
	for _, p := range ps {
		out = append(out, metrics.PinSample{PluginType: p.PluginType, SHA256: p.SHA256, Auto: p.Auto})
	}
	return out
}

func shadowSamples(ss []state.Shadow) []metrics.ShadowSample {
	var out []metrics.ShadowSample
	for _, s := range ss {
		out = append(out, metrics.ShadowSample{PluginType: s.PluginType, SHA256: s.SHA256, Runs: s.Runs, Disagreements: s.Disagreements})
	}
	return out
}
