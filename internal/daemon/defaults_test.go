package daemon

import (
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/host"
	"github.com/wasmhost/wasmhost/internal/host/sandbox"
	"github.com/wasmhost/wasmhost/internal/limits"
	"github.com/wasmhost/wasmhost/internal/publish"
)

// TestConfigDefaultsAreTheHosts: a limit has one default. What `wasmhost config defaults`
// prints for handlers.limits is the one table (internal/limits), which the daemon hands to
// the host as it is (the host fills the zero fields from the same table: host's
// TestLimitsDefaults); and what it prints for handlers.quarantine and the sandbox's other keys,
// turned into the host's settings as the daemon turns them, is what the host would take by
// itself.
func TestConfigDefaultsAreTheHosts(t *testing.T) {
	d := config.Default()
	if got := SandboxConfig(d).Limits; got != limits.Defaults() {
		t.Errorf("handlers.limits' defaults reach the host as %+v, want the table's %+v", got, limits.Defaults())
	}
	if d.Handlers.Quarantine != limits.DefaultQuarantine() {
		t.Errorf("handlers.quarantine's defaults are %+v, the table's %+v", d.Handlers.Quarantine, limits.DefaultQuarantine())
	}
	for _, c := range []struct {
		key       string
		got, want any
	}{
		{"handlerDir", d.HandlerDir, host.DefaultHandlerDir},
		{"handlers.callTimeout", time.Duration(d.Handlers.CallTimeout), sandbox.DefaultCallTimeout},
		{"handlers.memoryLimit", int64(d.Handlers.MemoryLimit), int64(sandbox.DefaultMemoryLimit)},
		{"handlers.removalGrace", time.Duration(d.Handlers.RemovalGrace), host.DefaultRemovalGrace},
		{"publish.maxBytes", int(d.Publish.MaxBytes), publish.DefaultMaxBytes},
		{"publish.maxBytes' most", config.MaxPublishMaxBytes, publish.MaxMaxBytes},
		{"publish.maxBytes' least", config.MinPublishMaxBytes, publish.MaxPluginBytes},
	} {
		if c.got != c.want {
			t.Errorf("%s defaults to %v, the host's default is %v", c.key, c.got, c.want)
		}
	}
}
