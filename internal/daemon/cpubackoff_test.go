package daemon

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/limits"
	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
	"github.com/wasmhost/wasmhost/internal/testwait"
)

// A handler whose validate (loop.wasm) or register (regloop.wasm) never returns ends at its
// CPU budget (handlers.limits.callCPU) on every attempt: the error is the handler's
// (registration.ErrHandlerFailed, not a refusal nor a wait), and its plugin backs off as after any other failure, each attempt at least the
// backoff after the one before (InitialBackoff doubling, less the jitter), not at every pass
// of the reconciler. Quarantine is off, so that every attempt runs the handler to its budget;
// a plugin of another type stays registered meanwhile.
func TestCPUBudgetBacksOff(t *testing.T) {
	cfg, _ := testDaemonConfig(t)
	initial := 100 * time.Millisecond
	cfg.Reconciler.InitialBackoff = config.Duration(initial)
	cfg.Reconciler.MaxBackoff = config.Duration(10 * time.Second)
	cfg.Handlers.Limits.CallCPU = limits.Duration(20 * time.Millisecond)
	cfg.Handlers.CallTimeout = config.Duration(time.Minute) // the CPU budget ends the call
	cfg.Handlers.Quarantine.After = 0
	installFixtures(t, cfg.HandlerDir, "loop", "regloop", "ok")
	d := runTestDaemon(t, cfg, nil)
	serve := func(typ, name string) *registrationtest.Plugin {
		return registrationtest.Serve(t, filepath.Join(cfg.SocketDir, name+".sock"),
			registrationtest.Info{Type: typ, Name: name, Versions: []string{"v1"}}, registrationtest.Options{})
	}
	ok := serve("ok.example", "fine")
	for _, typ := range []string{"loop.example", "regloop.example"} {
		checkBackoff(t, d, initial, serve(typ, strings.TrimSuffix(typ, ".example")))
	}
	if n := ok.Notifications(); len(n) != 1 || !n[0].Registered {
		t.Errorf("the plugin of the other type: %+v", n)
	}
}

// checkBackoff waits for 5 failed attempts of plugin and checks that each came at least the
// backoff after the one before.
func checkBackoff(t *testing.T, d *Daemon, initial time.Duration, plugin *registrationtest.Plugin) {
	t.Helper()
	const attempts = 5 // 100 + 200 + 400 + 800 ms of backoff between them
	testwait.UntilWithin(t, 2*time.Minute, "5 attempts of the looping handler's plugin", func() bool {
		return len(plugin.Notifications()) >= attempts
	})
	notes := plugin.Notifications()
	for i, n := range notes {
		if n.Registered || !strings.Contains(n.Error, "handlers.limits.callCPU") {
			t.Fatalf("attempt %d: %+v, want a failure at the CPU budget", i+1, n)
		}
	}
	// Attempt k+1 starts at least the k-th backoff after attempt k failed (and told the
	// plugin); a slow machine only makes the gaps longer.
	delay := initial
	for k := 1; k < len(notes); k++ {
		gap := notes[k].At.Sub(notes[k-1].At)
		if least := time.Duration(float64(delay) * (1 - BackoffJitter)); gap < least {
			t.Errorf("attempt %d came %v after attempt %d, before its backoff of %v (at least %v)", k+1, gap, k, delay, least)
		}
		delay *= 2
	}
	testwait.UntilWithin(t, 2*time.Minute, "the plugin's status to count the attempts", func() bool {
		v, found := d.State().Plugin(plugin.Path())
		return found && v.Attempts >= attempts && !v.Registered
	})
}
