package config

import (
	"time"
)

// QuarantineConfig sets aside a handler that keeps trapping or timing out: after After of them
// in a row its calls fail at once for Backoff, then one is let through as a probe; success
// ends the quarantine, failure doubles the back-off up to MaxBackoff.
type QuarantineConfig struct {
	// After is how many traps or timeouts in a row quarantine a handler; 0 disables it.
	// Defaults to 3.
	After int `yaml:"after"`
	// Backoff is the first quarantine's length. Defaults to 10s.
	Backoff Duration `yaml:"backoff"`
	// MaxBackoff caps the doubling. Defaults to 5m.
	MaxBackoff Duration `yaml:"maxBackoff"`
}

// DefaultQuarantine are the defaults of handlers.quarantine.
func DefaultQuarantine() QuarantineConfig {
	return QuarantineConfig{After: 3, Backoff: Duration(10 * time.Second), MaxBackoff: Duration(5 * time.Minute)}
}

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
