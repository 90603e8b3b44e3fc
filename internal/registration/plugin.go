package registration

import "github.com/wasmhost/wasmhost/internal/state"

// InfoOf returns a registered plugin as a handler sees it.
func InfoOf(p state.Plugin) PluginInfo {
	return PluginInfo{Socket: p.Socket, Type: p.Type, Name: p.Name, Endpoint: p.Endpoint, Versions: p.Versions}
}

// HandlerOf returns the handler that registered p (kept in the actual state so that
// deregistration goes through it even after its type lost its handler), or nil.
func HandlerOf(p state.Plugin) Handler {
	h, _ := p.Handler.(Handler)
	return h
}
