// Package registration says what registering a plugin means, whoever speaks to the plugin: the
// Handler interface that decides whether a plugin is valid and what registering it means (the
// WebAssembly host and native Go handlers implement it), Registry, the set of handlers by
// plugin type, which may change while the daemon runs, PluginInfo and the limits on what a
// plugin may answer (ValidateInfo), and the sentinel errors callers decide on.
//
// The kubelet's plugin-registration protocol (k8s.io/kubelet/pkg/apis/pluginregistration/v1)
// is spoken by the subpackage registrar, and a registered plugin's server is watched by
// liveness.
//
// This package is part of the daemon, not a stable API.
package registration

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
)

// Sentinel errors. Callers decide with errors.Is.
var (
	// ErrNoHandler: no handler is registered for the plugin's type. This is not retried with
	// backoff; the plugin waits until a handler for its type appears (the reconciler sees it
	// by its WaitsForHandler method, without importing this package).
	ErrNoHandler error = noHandlerError{}
	// ErrInvalidInfo: the plugin's GetInfo answer was refused (empty, oversized or malformed).
	ErrInvalidInfo = errors.New("registration: invalid plugin info")
	// ErrRejected: the handler decided to refuse the plugin (its ValidatePlugin or
	// RegisterPlugin said no, with a reason). It is not retried like an error: the
	// reconciler asks again when something that could change the answer changes (the
	// handler, the socket, a plugin of the same type and name going away), and otherwise
	// rarely. It has a method Rejected() bool, by which the reconciler knows it.
	ErrRejected error = rejectedError{}
	// ErrHandlerFailed: the handler did not decide: its call trapped, ran over its deadline,
	// was refused by a budget or quarantine, or returned an error of its own. The plugin is
	// not to blame; the registration is retried with backoff.
	ErrHandlerFailed = errors.New("registration: handler failed")
	// ErrUnreachable: the plugin's socket could not be dialled or did not answer GetInfo.
	ErrUnreachable = errors.New("registration: plugin unreachable")
	// ErrNotifyFailed: the plugin did not accept NotifyRegistrationStatus(true); the
	// registration was rolled back.
	ErrNotifyFailed = errors.New("registration: notify failed")
	// ErrProtocol: the plugin answered, but broke HTTP/2 or gRPC (a malformed or reset
	// response, a connection error it sent, a compression that was not offered). It is the
	// plugin's fault, not a socket nobody listens on: ErrUnreachable does not match it.
	ErrProtocol = errors.New("registration: plugin protocol error")
	// ErrResponseTooLarge: a plugin answered a handler's plugin_call with a message over the
	// caller's limit (handlers.limits.pluginCallResponseSize); the guest is told CodeTooLarge.
	ErrResponseTooLarge = errors.New("registration: plugin_call response too large")
)

type rejectedError struct{}

func (rejectedError) Error() string  { return "registration: rejected by handler" }
func (rejectedError) Rejected() bool { return true }

type noHandlerError struct{}

func (noHandlerError) Error() string         { return "registration: no handler registered for plugin type" }
func (noHandlerError) WaitsForHandler() bool { return true }

// PluginInfo is what a handler is told about a plugin: what its GetInfo answered, with the
// endpoint defaulted to the socket path when the plugin gave none.
type PluginInfo struct {
	Socket   string   // the registration socket the plugin was found at
	Type     string   // e.g. CSIPlugin, DRAPlugin
	Name     string   // e.g. the CSI driver's name
	Endpoint string   // where the plugin serves its own API
	Versions []string // as the plugin sent them
}

// Handler decides what registering a plugin of one type means. The kubelet's handlers have the
// same three calls. Every call gets a context with a deadline; an implementation must return
// when it is done.
type Handler interface {
	// ValidatePlugin refuses a plugin that must not be registered (unsupported versions, a
	// duplicate name). Its error is sent to the plugin as the reason.
	ValidatePlugin(ctx context.Context, p PluginInfo) error
	// RegisterPlugin registers a validated plugin. It returns what the handler publishes about
	// the plugin (may be nil), which is kept in the plugin's record.
	RegisterPlugin(ctx context.Context, p PluginInfo) (map[string]string, error)
	// DeRegisterPlugin forgets a plugin that is gone. Its error is logged; the plugin is
	// removed all the same.
	DeRegisterPlugin(ctx context.Context, p PluginInfo) error
}

// Registry maps plugin types to handlers. It is safe for concurrent use; every change wakes
// whoever waits on Changed (the reconciler registers waiting plugins when their handler comes).
type Registry struct {
	mu       sync.RWMutex
	handlers map[string]Handler
	changed  chan struct{}
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{handlers: make(map[string]Handler), changed: make(chan struct{}, 1)}
}

// Set makes h the handler for pluginType, replacing any other.
func (r *Registry) Set(pluginType string, h Handler) {
	r.mu.Lock()
	r.handlers[pluginType] = h
	r.mu.Unlock()
	r.signal()
}

// Remove takes away the handler for pluginType and returns it.
func (r *Registry) Remove(pluginType string) (Handler, bool) {
	r.mu.Lock()
	h, ok := r.handlers[pluginType]
	delete(r.handlers, pluginType)
	r.mu.Unlock()
	if ok {
		r.signal()
	}
	return h, ok
}

// Has reports whether a handler serves pluginType.
func (r *Registry) Has(pluginType string) bool {
	_, ok := r.Get(pluginType)
	return ok
}

// Get returns the handler for pluginType.
func (r *Registry) Get(pluginType string) (Handler, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	h, ok := r.handlers[pluginType]
	return h, ok
}

// Types returns the plugin types that have a handler, sorted.
func (r *Registry) Types() []string {
	r.mu.RLock()
	out := slices.Collect(maps.Keys(r.handlers))
	r.mu.RUnlock()
	slices.Sort(out)
	return out
}

// Changed returns a one-slot channel that receives a value after a handler was set or removed.
func (r *Registry) Changed() <-chan struct{} { return r.changed }

func (r *Registry) signal() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}
