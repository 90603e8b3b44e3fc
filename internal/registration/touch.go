package registration

// Touch wakes whoever waits on Changed without changing the registry: a handler registered
// for a type now answers differently (another revision of it serves, after a rollback), so
// that plugins it rejected are asked again.
func (r *Registry) Touch() { r.signal() }
