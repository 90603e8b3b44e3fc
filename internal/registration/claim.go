package registration

// Claim sets h as the handler for pluginType unless one is set already, and reports whether it
// did; otherwise it returns the handler that serves the type. Handlers that come from several
// places (the handler directory, OCI registries) claim a type through it, so that a newcomer
// never displaces the handler serving.
func (r *Registry) Claim(pluginType string, h Handler) (Handler, bool) {
	r.mu.Lock()
	cur, ok := r.handlers[pluginType]
	if !ok {
		r.handlers[pluginType] = h
	}
	r.mu.Unlock()
	if ok {
		return cur, false
	}
	r.signal()
	return h, true
}
