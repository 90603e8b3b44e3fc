package host

import (
	"context"
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/host/sandbox"
	"github.com/wasmhost/wasmhost/internal/limits"
)

// TestLimitsDefaults: the host applies the one table of handlers.limits (limits.Defaults) to
// every limit left zero, keeps the ones set, and refuses one out of range naming its key; and
// without a quarantine it takes handlers.quarantine's defaults.
func TestLimitsDefaults(t *testing.T) {
	h, _ := newTestHost(t, Config{Limits: limits.Handler{MaxNesting: 32}})
	want := limits.Defaults()
	want.MaxNesting, want.GuestThreads = 32, sandbox.DefaultGuestThreads()
	if h.cfg.Limits != want {
		t.Errorf("limits %+v; want %+v", h.cfg.Limits, want)
	}
	if *h.cfg.Quarantine != limits.DefaultQuarantine() {
		t.Errorf("quarantine %+v; want %+v", *h.cfg.Quarantine, limits.DefaultQuarantine())
	}

	_, err := New(context.Background(), Config{Limits: limits.Handler{MaxNesting: -1, PublishKeys: 65}})
	for _, msg := range []string{"handlers.limits.maxNesting: must be positive, got -1", "handlers.limits.publishKeys: must be at most 64"} {
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("New with MaxNesting -1 and PublishKeys 65: %v; want an error saying %s", err, msg)
		}
	}
}

func TestConfig(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{Grants: map[string][]string{"T": {abi.CapabilityPluginCall}}}, `Config.Grants["T"]: capability "plugin_call" needs Config.PluginCaller`},
		{Config{Grants: map[string][]string{"T": {"fly"}}}, `Config.Grants["T"]: unknown capability "fly"`},
		{Config{MemoryLimit: 100}, "Config.MemoryLimit 100"},
		{Config{CallTimeout: -1}, "Config.CallTimeout"},
	} {
		if _, err := New(ctx, tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v) = %v, want an error with %q", tt.cfg, err, tt.want)
		}
	}
	h, err := New(ctx, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	c := h.cfg // the sandbox's memory limit in pages: sandbox's TestMemoryLimitInPages
	if c.HandlerDir != DefaultHandlerDir || c.CallTimeout != sandbox.DefaultCallTimeout || c.MemoryLimit != sandbox.DefaultMemoryLimit ||
		c.PoolSize < 1 || c.RetireGrace != DefaultRetireGrace || c.Registry == nil || c.Logger == nil {
		t.Errorf("defaults not applied: %+v", c)
	}
}
