package policy

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/host/sandbox"
	"github.com/wasmhost/wasmhost/internal/host/sandbox/sandboxtest"
	"github.com/wasmhost/wasmhost/internal/limits"
	"github.com/wasmhost/wasmhost/internal/testwait"
)

// TestQuarantine: traps in a row quarantine a handler: its calls fail at once with the reason,
// a probe after the back-off that succeeds ends it, one that fails doubles the back-off.
func TestQuarantine(t *testing.T) {
	h, _ := newTestLayer(t, limits.Quarantine{After: 2, Backoff: limits.Duration(100 * time.Millisecond), MaxBackoff: limits.Duration(time.Second)})
	m := mustLoad(t, h, "trap")
	p := sandboxtest.Info("trap.example", "p")
	for range 2 {
		sandboxtest.ErrContains(t, m.ValidatePlugin(context.Background(), p), sandbox.ErrTrap)
	}
	err := m.ValidatePlugin(context.Background(), p)
	sandboxtest.ErrContains(t, err, ErrQuarantined, "testdata/trap.wasm", "2 traps or timeouts in a row", "unreachable", "then one is let through as a probe")
	if errors.Is(err, sandbox.ErrTrap) {
		t.Error("a call failed at once by the quarantine counts as a trap")
	}
	q := m.Own().(*Serving).QuarantineStatus()
	if !q.Quarantined || q.Count != 1 || q.FastFailed != 1 || q.Until.IsZero() {
		t.Errorf("quarantine %+v", q)
	}
	testwait.Until(t, "the back-off", func() bool { return time.Now().After(q.Until) })
	// A probe that works (deregister accepts) ends the quarantine.
	if err := m.DeRegisterPlugin(context.Background(), p); err != nil {
		t.Fatalf("probe: %v", err)
	}
	if q := m.Own().(*Serving).QuarantineStatus(); q.Quarantined || q.Faults != 0 {
		t.Errorf("after a good probe: %+v", q)
	}
	// Again, and a probe that traps: back for twice as long.
	for range 2 {
		sandboxtest.ErrContains(t, m.ValidatePlugin(context.Background(), p), sandbox.ErrTrap)
	}
	q = m.Own().(*Serving).QuarantineStatus()
	testwait.Until(t, "the back-off", func() bool { return time.Now().After(q.Until) })
	probed := time.Now()
	sandboxtest.ErrContains(t, m.ValidatePlugin(context.Background(), p), sandbox.ErrTrap)
	q2 := m.Own().(*Serving).QuarantineStatus()
	// The back-off starts when the probe fails, after probed: twice the first, whatever the
	// load (not measured from now, which a busy machine may have carried past it).
	if !q2.Quarantined || q2.Count != 3 || q2.Until.Sub(probed) < 200*time.Millisecond {
		t.Errorf("after a failed probe: %+v (until %v after the probe began, want 200ms or more)", q2, q2.Until.Sub(probed))
	}
}
