package registrar

import (
	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/state"
)

// InfoOf returns a registered plugin, as the actual state keeps it, as a handler sees it.
func InfoOf(p state.Plugin) registration.PluginInfo {
	return registration.PluginInfo{Socket: p.Socket, Type: p.Type, Name: p.Name, Endpoint: p.Endpoint, Versions: p.Versions}
}

// HandlerOf returns the handler that registered p (kept in the actual state so that
// deregistration goes through it even after its type lost its handler), or nil.
func HandlerOf(p state.Plugin) registration.Handler {
	h, _ := p.Handler.(registration.Handler)
	return h
}
