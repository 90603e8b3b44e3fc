package config

import (
	"github.com/wasmhost/wasmhost/internal/host/policy"
	"path/filepath"
	"strings"
	"time"
)

// RevisionsConfig sets how many revisions of each plugin type's handler the daemon keeps (in
// <stateDir>/revisions, by SHA-256), for `wasmhost handlers history` and `rollback`, and when a
// new revision is rolled back automatically.
type RevisionsConfig struct {
	// Keep is how many revisions are kept per plugin type, the serving one included.
	// Defaults to 5.
	Keep int `yaml:"keep"`
	// AutoRollback rolls a new revision back to the previous good one when it traps or times
	// out too often in its first minutes.
	AutoRollback AutoRollbackConfig `yaml:"autoRollback"`
}

// AutoRollbackConfig: a new revision whose calls trap or time out (or fail at once in
// quarantine) at a share of at least Threshold, over at least MinCalls calls within Window of
// its loading, is rolled back to the previous good revision.
type AutoRollbackConfig struct {
	// Window is how long a new revision is watched; 0 turns automatic rollback off.
	// Defaults to 5m.
	Window Duration `yaml:"window"`
	// Threshold is the share of its calls, 0 to 1, that rolls it back. Defaults to 0.5.
	Threshold float64 `yaml:"-"` // a constant, not a key (was threshold; docs/configuration.md, "Constants")
	// MinCalls is how many calls it must have had before it is judged. Defaults to 5.
	MinCalls int `yaml:"-"` // a constant, not a key (was minCalls; docs/configuration.md, "Constants")
}

// DefaultRevisions are the defaults of handlers.revisions.
func DefaultRevisions() RevisionsConfig {
	return RevisionsConfig{Keep: policy.DefaultKeep, AutoRollback: AutoRollbackConfig{Window: Duration(5 * time.Minute), Threshold: policy.DefaultRollbackThreshold, MinCalls: policy.DefaultRollbackMinCalls}}
}

// validateRevisions checks handlers.revisions and the shadow candidates of handlers.types.
func (h *HandlersConfig) validateRevisions(bad func(key, format string, args ...any)) {
	r := h.Revisions
	if r.Keep < 1 {
		bad("handlers.revisions.keep", "must be at least 1 (the serving revision), got %d", r.Keep)
	}
	if r.AutoRollback.Window < 0 {
		bad("handlers.revisions.autoRollback.window", "must not be negative (0 turns automatic rollback off), got %s", r.AutoRollback.Window)
	}
	for typ, tc := range h.Types {
		s := tc.Shadow
		if s == "" {
			continue
		}
		if d, ok := strings.CutPrefix(s, "sha256:"); ok {
			if len(d) < 6 || len(d) > 64 || strings.Trim(d, "0123456789abcdef") != "" {
				bad("handlers.types."+typ+".shadow", "%q: want sha256: and 6 to 64 lower-case hex digits of a kept revision, or a handler file's absolute path", s)
			}
			continue
		}
		if !filepath.IsAbs(s) {
			bad("handlers.types."+typ+".shadow", "%q: want a handler file's absolute path, or sha256: and a kept revision's digest", s)
		}
	}
}
