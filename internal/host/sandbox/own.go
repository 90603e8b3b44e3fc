package sandbox

import (
	"context"
	"fmt"
	"slices"

	"github.com/wasmhost/wasmhost/internal/registration"
)

// Server serves a module's calls as a handler of its own (SetOwn): the policy layer's.
type Server interface {
	// Serve runs export fn (FnValidate, FnRegister, FnDeregister) for plugin p of pluginType
	// through the policy layer; the caller has entered the module.
	Serve(ctx context.Context, fn int, pluginType string, p registration.PluginInfo) (map[string]string, error)
}

// SetOwn makes m a handler of its own: its ValidatePlugin, RegisterPlugin and DeRegisterPlugin
// go through s. It is set once, before m is handed to anyone that calls it.
func (m *Module) SetOwn(s Server) { m.own = s }

// Own returns what SetOwn set, or nil.
func (m *Module) Own() Server { return m.own }

// ValidatePlugin implements registration.Handler for a plugin of one of the module's types.
func (m *Module) ValidatePlugin(ctx context.Context, p registration.PluginInfo) error {
	_, err := m.direct(ctx, FnValidate, p)
	return err
}

// RegisterPlugin implements registration.Handler for a plugin of one of the module's types.
func (m *Module) RegisterPlugin(ctx context.Context, p registration.PluginInfo) (map[string]string, error) {
	return m.direct(ctx, FnRegister, p)
}

// DeRegisterPlugin implements registration.Handler for a plugin of one of the module's types.
func (m *Module) DeRegisterPlugin(ctx context.Context, p registration.PluginInfo) error {
	_, err := m.direct(ctx, FnDeregister, p)
	return err
}

// direct is a call of the module as a handler of its own, through its own Server (SetOwn).
func (m *Module) direct(ctx context.Context, fn int, p registration.PluginInfo) (map[string]string, error) {
	if !slices.Contains(m.manifest.PluginTypes, p.Type) {
		return nil, fmt.Errorf("%w %q: handler %s handles %v", registration.ErrNoHandler, p.Type, m.file, m.manifest.PluginTypes)
	}
	if m.own == nil {
		return nil, fmt.Errorf("%w: handler %s serves through the handlers of its plugin types", ErrRetired, m.file)
	}
	if !m.Enter() {
		return nil, fmt.Errorf("%w: handler %s is closed", ErrRetired, m.file)
	}
	defer m.Leave()
	return m.own.Serve(ctx, fn, p.Type, p)
}
