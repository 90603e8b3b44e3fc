package daemon

import "time"

// The reconciler's constants: tuned by benchmarks, with no operator story (they were the keys
// reconciler.stalledAfter, maxInFlight, backoffJitter and maxRetrying; docs/configuration.md,
// "Constants", says why each is what it is).
const (
	// StalledAfter: an operation waiting longer than this (and than four times the recent
	// registrations) stops counting against reconciler.maxConcurrent.
	StalledAfter = 20 * time.Millisecond
	// MaxInFlight bounds the operations at once, stalled ones included; at most a quarter of
	// the descriptor limit is used.
	MaxInFlight = 512
	// BackoffJitter shortens each error backoff by a random fraction of at most this.
	BackoffJitter = 0.1
	// MaxRetrying bounds the operations at once for sockets that failed before.
	MaxRetrying = 16
)
