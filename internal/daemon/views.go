package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/wasmhost/wasmhost/internal/admin"
	"github.com/wasmhost/wasmhost/internal/host/policy"
	"github.com/wasmhost/wasmhost/internal/host/sandbox"
	"github.com/wasmhost/wasmhost/internal/metrics"
	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/state"
	"github.com/wasmhost/wasmhost/internal/typeslots"
)

// This file feeds the state store from the host, and the metrics from the store.

// publishHandlers puts the host's handler set into the state store; the host calls it after
// every step of following the handler directory.
func (d *Daemon) publishHandlers() {
	// Two hosts and the sources call it from their goroutines: one at a time, so that an
	// older list is never set after a newer one.
	publishMu.Lock()
	defer publishMu.Unlock()
	files := d.host.Handlers()
	hs := append(files, d.oci.Statuses()...)
	out := make([]state.Handler, 0, len(hs))
	for i, h := range hs {
		source := state.SourceFile
		if i >= len(files) {
			source = state.SourceRegistry
		}
		out = append(out, state.Handler{
			Source: source, Reason: h.Refusal,
			File: h.File, PluginTypes: h.PluginTypes, Name: h.Name, Version: h.Version,
			SHA256: h.SHA256, Size: h.Size, ABIVersion: h.ABIVersion, Capabilities: h.Capabilities,
			LoadedAt: h.LoadedAt, PoolSize: h.PoolSize, Serving: h.Serving,
			LastError: h.LastError, LastErrorAt: h.LastErrorAt, GoneSince: h.GoneSince,
			Pins: d.pinsOf(h.PluginTypes),
		})
	}
	d.state.SetHandlers(out)
}

// handlerCounters reads the running totals of every handler file from the hosts, by file,
// for the store (one pass, whatever the number of files).
func (d *Daemon) handlerCounters() map[string]state.HandlerCounters {
	hs := append(d.host.Handlers(), d.oci.Statuses()...)
	out := make(map[string]state.HandlerCounters, len(hs))
	for _, h := range hs {
		out[h.File] = state.HandlerCounters{Calls: h.Calls, Rejected: h.Rejected, Failures: h.Failures,
			Traps: h.Traps, Timeouts: h.Timeouts, Instances: h.Instances, CPU: h.CPU, Throttled: h.Throttled,
			Quarantined: h.Quarantine.Quarantined, QuarantinedUntil: h.Quarantine.Until,
			QuarantineReason: h.Quarantine.Reason, Quarantines: h.Quarantine.Count,
			FastFailed: h.Quarantine.FastFailed, KVKeys: h.KVKeys, KVBytes: h.KVBytes,
			Shadows: d.shadowsOf(h.PluginTypes)}
	}
	return out
}

// Ready returns nil once the socket directory was listed in full and the
// handlers present at start were loaded (or refused).
func (d *Daemon) Ready() error {
	select {
	case <-d.watcher.Synced():
	default:
		return errors.New("the socket directory has not been listed yet")
	}
	if d.host != nil {
		select {
		case <-d.host.Ready():
		default:
			return errors.New("the handlers present at start are still loading")
		}
	}
	if err := d.oci.NotReady(); err != nil {
		return err
	}
	return nil
}

// problems says what does not serve, once the daemon is ready (before, /readyz says what it
// waits for): an empty handler directory, the handler files and sources that serve nothing,
// the plugin types whose plugins wait for a handler.
func (d *Daemon) problems() []string {
	if d.Ready() != nil {
		return nil
	}
	var out []string
	if len(d.host.Handlers()) == 0 && len(d.cfg.Handlers.Sources) == 0 {
		out = append(out, fmt.Sprintf("the handler directory %s holds no handler file, and no handler source is configured", d.cfg.HandlerDir))
	}
	return append(out, d.state.Health().Lines()...)
}

// warnNothingServes logs, when registrations start, that the handler directory is empty while
// no source is configured (a volume that was not mounted: on Kubernetes, an image volume the
// API server dropped because its feature is off), and that no handler serves at all.
func (d *Daemon) warnNothingServes() {
	if len(d.host.Handlers()) == 0 && len(d.cfg.Handlers.Sources) == 0 {
		d.log.Warn("the handler directory holds no handler file: is its volume mounted? (on Kubernetes, an image volume is dropped without a word where the ImageVolume feature is off)",
			"handler_dir", d.cfg.HandlerDir)
	}
	if len(d.registry.Types()) == 0 {
		d.log.Warn("no handler serves any plugin type: every plugin found waits for one",
			"handler_dir", d.cfg.HandlerDir, "handler_sources", len(d.cfg.Handlers.Sources))
	}
}

// notServingSamples are the handler files and sources that serve nothing, for the metrics.
func (d *Daemon) notServingSamples() []metrics.NotServingSample {
	var out []metrics.NotServingSample
	for _, h := range d.state.Health().NotServing {
		name := h.File
		if h.Source == state.SourceFile {
			name = filepath.Base(h.File)
		}
		out = append(out, metrics.NotServingSample{Source: h.Source, Name: name, Reason: cmp.Or(h.Reason, "error")})
	}
	return out
}

// pullSources tries at once the sources that do not serve their configured revision.
func (d *Daemon) pullSources(ctx context.Context) error {
	if d.oci == nil {
		return admin.ErrNoSources
	}
	if err := d.oci.PullNow(ctx); err != nil {
		return err
	}
	d.publishHandlers()
	return nil
}

func (d *Daemon) pluginSamples() []metrics.PluginSample {
	ps := d.state.Plugins()
	out := make([]metrics.PluginSample, 0, len(ps))
	for _, p := range ps {
		out = append(out, metrics.PluginSample{Socket: p.Path, Type: p.PluginType, State: string(p.State), Desired: p.Desired, Actual: p.Registered})
	}
	return out
}

func (d *Daemon) handlerSamples() []metrics.HandlerSample {
	var out []metrics.HandlerSample
	for _, h := range d.state.Handlers() {
		out = append(out, metrics.HandlerSample{
			Name:        filepath.Base(h.File),
			PluginTypes: h.PluginTypes,
			SHA256:      h.SHA256,
			ABIVersion:  h.ABIVersion,
			Calls:       h.Counters.Calls,
			Failures:    h.Counters.Failures,
			Traps:       h.Counters.Traps,
			Timeouts:    h.Counters.Timeouts,
			CPU:         h.Counters.CPU,
			Throttled:   h.Counters.Throttled,
			Quarantined: h.Counters.Quarantined,
			Quarantines: h.Counters.Quarantines,
			FastFailed:  h.Counters.FastFailed,
			Pins:        pinSamples(h.Pins),
			Shadows:     shadowSamples(h.Counters.Shadows),
		})
	}
	return out
}

// observer feeds the registrar's outcomes into the metrics.
type observer struct{ m *metrics.Metrics }

func (o observer) HandlerCall(pluginType, call string, err error, d time.Duration) {
	o.m.ObserveHandlerCall(pluginType, call, resultOf(err), d)
}

func (o observer) Registration(pluginType string, err error, d time.Duration) {
	o.m.ObserveRegistration(pluginType, resultOf(err), d)
}

// resultOf names the outcome of a registration or handler call for metric labels.
func resultOf(err error) string {
	switch {
	case err == nil:
		return metrics.ResultOK
	case errors.Is(err, context.DeadlineExceeded):
		return metrics.ResultTimeout
	case errors.Is(err, policy.ErrQuarantined):
		return metrics.ResultQuarantined
	case errors.Is(err, sandbox.ErrTrap):
		return metrics.ResultTrap
	case errors.Is(err, typeslots.ErrBusy):
		return metrics.ResultTypeBusy
	case errors.Is(err, registration.ErrProtocol):
		return metrics.ResultProtocol
	case errors.Is(err, registration.ErrNoHandler):
		return metrics.ResultNoHandler
	case errors.Is(err, registration.ErrRejected):
		return metrics.ResultRejected
	case errors.Is(err, registration.ErrUnreachable):
		return metrics.ResultUnreachable
	case errors.Is(err, registration.ErrNotifyFailed):
		return metrics.ResultNotifyFailed
	default:
		return metrics.ResultError
	}
}
