package config

import (
	"fmt"
	"strings"
	"time"
)

// retiredFields are the retired keys that are still fields of Config, tagged yaml:"-": no file
// sets them, their one value is Default's, and the daemon's tests may shorten them in Go. The
// value shown (Retired, config check's warning, docs/configuration.md's Constants) is read
// from Default, so that it is written in one place.
var retiredFields = map[string]func(Config) any{
	"watcher.resync":                            func(c Config) any { return c.Watcher.Resync },
	"reconciler.resync":                         func(c Config) any { return c.Reconciler.Resync },
	"reconciler.initialBackoff":                 func(c Config) any { return c.Reconciler.InitialBackoff },
	"reconciler.maxBackoff":                     func(c Config) any { return c.Reconciler.MaxBackoff },
	"reconciler.rejectedRecheck":                func(c Config) any { return c.Reconciler.RejectedRecheck },
	"reconciler.maxPerType":                     func(c Config) any { return c.Reconciler.MaxPerType },
	"registration.dialTimeout":                  func(c Config) any { return c.Registration.DialTimeout },
	"handlers.removalGrace":                     func(c Config) any { return c.Handlers.RemovalGrace },
	"handlers.limits.maxFunctions":              func(c Config) any { return c.Handlers.Limits.MaxFunctions },
	"handlers.limits.maxLocals":                 func(c Config) any { return c.Handlers.Limits.MaxLocals },
	"handlers.limits.maxEntries":                func(c Config) any { return c.Handlers.Limits.MaxEntries },
	"handlers.limits.logLinesPerCall":           func(c Config) any { return c.Handlers.Limits.LogLinesPerCall },
	"handlers.limits.logBytesPerCall":           func(c Config) any { return c.Handlers.Limits.LogBytesPerCall },
	"handlers.limits.kvKeysPerHandler":          func(c Config) any { return c.Handlers.Limits.KVKeysPerHandler },
	"handlers.limits.publishKeys":               func(c Config) any { return c.Handlers.Limits.PublishKeys },
	"handlers.limits.publishBytes":              func(c Config) any { return c.Handlers.Limits.PublishBytes },
	"handlers.limits.pluginCallsPerCall":        func(c Config) any { return c.Handlers.Limits.PluginCallsPerCall },
	"handlers.limits.idleInstanceTimeout":       func(c Config) any { return c.Handlers.Limits.IdleInstanceTimeout },
	"handlers.quarantine.backoff":               func(c Config) any { return c.Handlers.Quarantine.Backoff },
	"handlers.quarantine.maxBackoff":            func(c Config) any { return c.Handlers.Quarantine.MaxBackoff },
	"handlers.revisions.autoRollback.threshold": func(c Config) any { return c.Handlers.Revisions.AutoRollback.Threshold },
	"handlers.revisions.autoRollback.minCalls":  func(c Config) any { return c.Handlers.Revisions.AutoRollback.MinCalls },
	"handlers.pull.parallel":                    func(c Config) any { return c.Handlers.Pull.Parallel },
	"handlers.pull.retry":                       func(c Config) any { return c.Handlers.Pull.Retry },
	"metrics.maxConnections":                    func(c Config) any { return c.Metrics.MaxConnections },
	"publish.coalesce":                          func(c Config) any { return c.Publish.Coalesce },
	"publish.initialBackoff":                    func(c Config) any { return c.Publish.InitialBackoff },
	"publish.maxBackoff":                        func(c Config) any { return c.Publish.MaxBackoff },
	"publish.startGrace":                        func(c Config) any { return c.Publish.StartGrace },
}

// retired returns Retired: the keys retired before issue 31, whose constants live where they
// are used (internal/daemon/constants.go, internal/host), and those of retiredFields.
func retired() map[string]string {
	m := map[string]string{
		"reconciler.stalledAfter":              "20ms",
		"reconciler.maxInFlight":               "512, and at most a quarter of the descriptor limit",
		"reconciler.backoffJitter":             "0.1",
		"reconciler.maxRetrying":               "16",
		"handlers.limits.maxNestingWork":       "50000000",
		"handlers.limits.maxAbandonedCompiles": "1",
	}
	d := Default()
	for key, get := range retiredFields {
		m[key] = FormatValue(get(d))
	}
	return m
}

// FormatValue writes a value as the docs and `config defaults` write it: durations without
// their zero minutes and seconds (5m, 1h, 2m2s), sizes the Kubernetes way (64Ki).
func FormatValue(v any) string {
	if d, ok := v.(Duration); ok {
		s := time.Duration(d).String()
		if strings.HasSuffix(s, "m0s") {
			s = strings.TrimSuffix(s, "0s")
		}
		if strings.HasSuffix(s, "h0m") {
			s = strings.TrimSuffix(s, "0m")
		}
		return s
	}
	return fmt.Sprint(v)
}
