package limits

import "time"

// Quarantine sets aside a handler that keeps trapping or timing out (handlers.quarantine):
// after After of them in a row its calls fail at once, with the reason, for Backoff; then one
// call is let through as a probe: if it neither traps nor times out the handler leaves
// quarantine, otherwise it goes back for twice as long, up to MaxBackoff. A new version of the
// file starts afresh.
type Quarantine struct {
	// After is how many traps or timeouts in a row quarantine a handler; 0 disables it.
	// Defaults to 3.
	After int `yaml:"after"`
	// Backoff is the first quarantine's length. Defaults to 10s.
	Backoff Duration `yaml:"-"` // a constant, not a key (was backoff; docs/configuration.md, "Constants")
	// MaxBackoff caps the doubling. Defaults to 5m.
	MaxBackoff Duration `yaml:"-"` // a constant, not a key (was maxBackoff; docs/configuration.md, "Constants")
}

// DefaultQuarantine are the defaults of handlers.quarantine: the one table, which `wasmhost
// config defaults` prints and the host applies when it is given none.
func DefaultQuarantine() Quarantine {
	return Quarantine{After: 3, Backoff: Duration(10 * time.Second), MaxBackoff: Duration(5 * time.Minute)}
}
