package registrar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/state"
	"github.com/wasmhost/wasmhost/internal/typeslots"
)

// Forwarder is what the registrar needs of the forwarding to the kubelet;
// *forward.Forwarder implements it.
type Forwarder interface {
	// Forwards reports whether plugins of pluginType are presented to the kubelet.
	Forwards(pluginType string) bool
	// Open presents the plugin to the kubelet: a socket in its directory that answers
	// GetInfo with p. Its error wraps registration.ErrForward.
	Open(p registration.PluginInfo) error
	// Await waits for the kubelet's verdict on the plugin at pluginSocket: nil when it
	// accepted, a *registration.KubeletError when it refused or stayed silent.
	Await(ctx context.Context, pluginSocket string) error
	// Remove takes the plugin at pluginSocket away from the kubelet (its socket goes).
	Remove(pluginSocket string)
}

// forward presents the plugin its handler just admitted (registered at s, in the actual
// state) to the kubelet, waits for the kubelet's verdict, and tells the plugin it is
// registered once the kubelet accepted it. It runs without the slot of the plugin's type and
// the lock of its group, so that a burst of plugins waits for the kubelet's once-a-second
// look at its directory side by side, not one after another.
//
// When the socket cannot be made, when the kubelet refuses or does not answer, or when the
// plugin does not take NotifyRegistrationStatus(true), the registration is rolled back: the
// socket goes (the kubelet deregisters what it registered), the handler deregisters the plugin
// (or, if another instance of it stands by, that one takes over), and the plugin is told why,
// with the kubelet's own text ("kubelet: …") when the kubelet refused.
func (r *Registrar) forward(ctx context.Context, log *slog.Logger, client *wireConn, s state.Socket, info registration.PluginInfo) error {
	fw := r.cfg.Forward
	fail := func(err error) error {
		return &PluginError{Type: info.Type, Name: info.Name, Versions: info.Versions, Err: err}
	}
	if err := fw.Open(info); err != nil {
		r.rollback(ctx, log, s, "not presented to the kubelet")
		log.Debug("plugin not presented to the kubelet", "error", err)
		r.notifyFalse(ctx, log, client, err)
		return fail(err)
	}
	// The operation waits on the kubelet now, not on wasmhost: the reconciler stops counting it
	// against the operations at once (BenchmarkForwardBurst: 256 plugins in 1.8 s, 16 s without).
	typeslots.Waiting(ctx)
	err := fw.Await(ctx, s.Path)
	if err != nil {
		fw.Remove(s.Path)
		r.rollback(ctx, log, s, "not registered by the kubelet")
		var ke *registration.KubeletError
		if !errors.As(err, &ke) {
			// Cut short: the daemon is stopping. The plugin is not told.
			return fail(fmt.Errorf("registrar: plugin %s (type %s) at socket %s: waiting for the kubelet: %w", info.Name, info.Type, s.Path, err))
		}
		// The plugin is told the kubelet's own words; the operator also reads whose.
		r.notifyFalse(ctx, log, client, ke)
		err := fmt.Errorf("%w (plugin %s, type %s, at socket %s)", ke, info.Name, info.Type, s.Path)
		log.Debug("plugin not registered by the kubelet", "error", err)
		return fail(err)
	}
	if nerr := r.notify(ctx, client, true, ""); nerr != nil {
		fw.Remove(s.Path)
		r.rollback(ctx, log, s, "did not take its registration")
		err := fmt.Errorf("%w: plugin %s (type %s) at socket %s: NotifyRegistrationStatus(true): %w", registration.ErrNotifyFailed, info.Name, info.Type, s.Path, nerr)
		log.Warn("plugin did not take its registration; rolled back, and taken away from the kubelet", "error", err)
		return fail(err)
	}
	return nil
}

// rollback undoes what the handler registered of the plugin at s, as Deregister does, if it is
// still the one registered there.
func (r *Registrar) rollback(ctx context.Context, log *slog.Logger, s state.Socket, why string) {
	p, ok := r.cfg.Actual.Get(s.Path)
	if !ok || p.ID != s.ID {
		return
	}
	_ = r.deregister(ctx, log.With("rollback", why), p) // a handler's failure is logged there
}
