package daemon

import (
	"context"
	"errors"
	"path/filepath"
	"time"

	"github.com/wasmhost/wasmhost/internal/admin"
	"github.com/wasmhost/wasmhost/internal/host"
	"github.com/wasmhost/wasmhost/internal/metrics"
	"github.com/wasmhost/wasmhost/internal/reconciler"
	"github.com/wasmhost/wasmhost/internal/registration"
)

// This file adapts the daemon's parts to what the admin API and the metrics read: the
// reconciler's view of each socket joined with the actual state and the handlers.

// Plugins implements admin.Source.
func (d *Daemon) Plugins() []admin.Plugin {
	st := d.rec.Status()
	handlers := d.handlersByType()
	out := make([]admin.Plugin, 0, len(st))
	for _, s := range st {
		out = append(out, d.joinPlugin(s, handlers))
	}
	return out
}

// adminPlugin returns the admin view of one socket.
func (d *Daemon) adminPlugin(s reconciler.SocketStatus) admin.Plugin {
	return d.joinPlugin(s, d.handlersByType())
}

// joinPlugin joins a socket's reconciler status with its record in the actual state and the
// handler serving its type.
func (d *Daemon) joinPlugin(s reconciler.SocketStatus, handlers map[string]host.HandlerStatus) admin.Plugin {
	p := admin.Plugin{
		Socket:         s.Path,
		Type:           s.PluginType,
		Name:           s.PluginName,
		Versions:       s.PluginVersions,
		State:          admin.PluginState(s.State),
		LastError:      s.LastError,
		Attempts:       s.Attempts,
		NextRetry:      s.NextRetry,
		LastTransition: s.Since,
	}
	if s.State == reconciler.StateGone {
		return p
	}
	if a, ok := d.actual.Get(s.Path); ok {
		p.Type, p.Name = a.Type, a.Name
		p.Endpoint = a.Endpoint
		p.Versions = a.Versions
		p.Published = a.Published
		p.RegisteredAt = a.RegisteredAt
		if hs, ok := handlers[a.Type]; ok {
			p.HandlerFile, p.HandlerSHA256 = hs.File, hs.SHA256
		}
	}
	return p
}

// handlersByType indexes the handler files serving calls by the plugin types they serve.
func (d *Daemon) handlersByType() map[string]host.HandlerStatus {
	out := make(map[string]host.HandlerStatus)
	if d.host == nil {
		return out
	}
	for _, hs := range d.host.Handlers() {
		if hs.Serving {
			for _, t := range hs.PluginTypes {
				out[t] = hs
			}
		}
	}
	return out
}

// Handlers implements admin.Source.
func (d *Daemon) Handlers() []admin.Handler {
	if d.host == nil {
		return nil
	}
	var out []admin.Handler
	for _, hs := range d.host.Handlers() {
		out = append(out, admin.Handler{
			PluginTypes:  hs.PluginTypes,
			File:         hs.File,
			SHA256:       hs.SHA256,
			Size:         hs.Size,
			ABIVersion:   hs.ABIVersion,
			Capabilities: hs.Capabilities,
			LoadedAt:     hs.LoadedAt,
			PoolSize:     hs.PoolSize,
			Calls:        hs.Calls,
			Failures:     hs.Failures,
			Traps:        hs.Traps,
			Timeouts:     hs.Timeouts,
			LastError:    hs.LastError,
		})
	}
	return out
}

// Ready implements admin.Source: ready once the socket directory was listed in full and the
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
	return nil
}

func (d *Daemon) pluginSamples() []metrics.PluginSample {
	st := d.rec.Status()
	out := make([]metrics.PluginSample, 0, len(st))
	for _, s := range st {
		_, desired := d.desired.Get(s.Path)
		a, actual := d.actual.Get(s.Path)
		typ := s.PluginType
		if actual {
			typ = a.Type
		}
		out = append(out, metrics.PluginSample{Socket: s.Path, Type: typ, State: string(s.State), Desired: desired, Actual: actual})
	}
	return out
}

func (d *Daemon) handlerSamples() []metrics.HandlerSample {
	if d.host == nil {
		return nil
	}
	var out []metrics.HandlerSample
	for _, hs := range d.host.Handlers() {
		out = append(out, metrics.HandlerSample{
			Name:        filepath.Base(hs.File),
			PluginTypes: hs.PluginTypes,
			SHA256:      hs.SHA256,
			ABIVersion:  hs.ABIVersion,
			Calls:       hs.Calls,
			Failures:    hs.Failures,
			Traps:       hs.Traps,
			Timeouts:    hs.Timeouts,
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
	case errors.Is(err, host.ErrTrap):
		return metrics.ResultTrap
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

// handlerOf returns the status of the handler file serving pluginType.
func (d *Daemon) handlerOf(pluginType string) (host.HandlerStatus, bool) {
	hs, ok := d.handlersByType()[pluginType]
	return hs, ok
}
