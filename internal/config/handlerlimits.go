package config

// validateLimits checks handlers.limits (their table and checks are internal/limits') and
// handlers.quarantine.
func (h *HandlersConfig) validateLimits(bad func(key, format string, args ...any)) {
	h.Limits.Check(func(key, format string, args ...any) { bad("handlers.limits."+key, format, args...) })
	if h.Quarantine.After < 0 {
		bad("handlers.quarantine.after", "must not be negative (0 disables quarantine), got %d", h.Quarantine.After)
	}
}
