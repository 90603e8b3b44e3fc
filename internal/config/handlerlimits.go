package config

import (
	"time"
)

// validateLimits checks handlers.limits (their table and checks are internal/limits') and
// handlers.quarantine.
func (h *HandlersConfig) validateLimits(bad func(key, format string, args ...any)) {
	h.Limits.Check(func(key, format string, args ...any) { bad("handlers.limits."+key, format, args...) })
	for key, v := range map[string]Duration{
		"handlers.quarantine.backoff":    h.Quarantine.Backoff,
		"handlers.quarantine.maxBackoff": h.Quarantine.MaxBackoff,
	} {
		if v <= 0 {
			bad(key, "must be positive, got %d", int64(v))
		}
	}
	if h.Quarantine.After < 0 {
		bad("handlers.quarantine.after", "must not be negative (0 disables quarantine), got %d", h.Quarantine.After)
	}
	if h.Quarantine.MaxBackoff < h.Quarantine.Backoff {
		bad("handlers.quarantine.maxBackoff", "%s is below handlers.quarantine.backoff %s",
			time.Duration(h.Quarantine.MaxBackoff), time.Duration(h.Quarantine.Backoff))
	}
}
