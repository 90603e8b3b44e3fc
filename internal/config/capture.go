package config

import (
	"regexp"
	"slices"

	"github.com/wasmhost/wasmhost/internal/session"
)

// CaptureConfig is what the daemon keeps of the registrations its handlers served, for
// `wasmhost plugins capture` (docs/sessions.md).
type CaptureConfig struct {
	// Sessions is how many plugins' last registrations are kept per plugin type, in memory
	// (the oldest dropped first); 0 turns capture off. A type opts out with
	// handlers.types.<T>.capture: false. Defaults to 16.
	Sessions int `yaml:"sessions"`
	// Redact are RE2 regular expressions: every match in a value a session keeps (what a
	// plugin answered, the store, published values, reasons) is replaced by as many '*'.
	// Defaults to PEM private keys, JSON Web Tokens and bearer tokens; an empty list redacts
	// nothing.
	Redact []string `yaml:"redact"`
}

// DefaultCapture are the defaults of handlers.capture.
func DefaultCapture() CaptureConfig {
	return CaptureConfig{Sessions: 16, Redact: slices.Clone(session.DefaultRedactRules)}
}

// CaptureOptOut returns the plugin types whose registrations are not captured.
func (c *Config) CaptureOptOut() map[string]bool {
	out := make(map[string]bool)
	for typ, tc := range c.Handlers.Types {
		if tc.Capture != nil && !*tc.Capture {
			out[typ] = true
		}
	}
	return out
}

// validateCapture checks handlers.capture.
func (h *HandlersConfig) validateCapture(bad func(key, format string, args ...any)) {
	if n := h.Capture.Sessions; n < 0 || n > 10000 {
		bad("handlers.capture.sessions", "must be between 0 (off) and 10000, got %d", n)
	}
	for _, r := range h.Capture.Redact {
		if _, err := regexp.Compile(r); err != nil {
			bad("handlers.capture.redact", "%q: %v", r, err)
		}
	}
}
