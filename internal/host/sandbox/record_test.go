package sandbox

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/host/sandbox/sandboxtest"
	"github.com/wasmhost/wasmhost/internal/limits"
	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/session"
)

// lastCall is a Recorder that records every type and keeps the calls it is handed.
type lastCall struct {
	mu    sync.Mutex
	calls []session.Call
}

func (r *lastCall) Records(string) bool { return true }

func (r *lastCall) Record(_ registration.PluginInfo, _ session.Handler, c session.Call) {
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
}

func (r *lastCall) take(t *testing.T) session.Call {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.calls) != 1 {
		t.Fatalf("%d calls recorded, want 1", len(r.calls))
	}
	c := r.calls[0]
	r.calls = nil
	return c
}

// checkBounded fails unless c stays within the bounds of one call's recording and says it was
// truncated.
func checkBounded(t *testing.T, c session.Call) {
	t.Helper()
	var recorded int64
	for i := range c.Exchanges {
		recorded += c.Exchanges[i].Size()
	}
	for k, v := range c.StoreBefore {
		recorded += session.StoreEntrySize(k, v)
	}
	if len(c.Exchanges) > MaxRecordExchanges || recorded > MaxRecordBytes {
		t.Errorf("recorded %d exchanges of %d bytes; the bounds are %d and %d", len(c.Exchanges), recorded, MaxRecordExchanges, MaxRecordBytes)
	}
	if c.Truncated == nil || c.Truncated.Exchanges == 0 || c.Truncated.Bytes < int64(c.Truncated.Exchanges)*60_000 {
		t.Errorf("truncated %+v, want the kv_gets left out and their 60,000 bytes each", c.Truncated)
	}
	if len(c.Exchanges) < 10 {
		t.Errorf("only %d exchanges recorded before the bound", len(c.Exchanges))
	}
}

// TestRecordingBoundedKVLoop: a validate that reads a 60,000-byte value in a loop until its
// budget (CPU or deadline: the reads are mostly host time) is recorded up to the bounds of one
// call and says what it left out; the call ends as it does unrecorded.
func TestRecordingBoundedKVLoop(t *testing.T) {
	cfg := Config{Limits: limits.Handler{CallCPU: limits.Duration(300 * time.Millisecond)}, CallTimeout: 500 * time.Millisecond}
	p := sandboxtest.Info("kvloop.example", "p")
	rec := &lastCall{}
	off, _ := newTestSandbox(t, cfg)
	cfg.Recorder = rec
	on, _ := newTestSandbox(t, cfg)
	errOff := mustLoad(t, off, "kvloop").ValidatePlugin(context.Background(), p)
	errOn := mustLoad(t, on, "kvloop").ValidatePlugin(context.Background(), p)
	// Which of the two budgets ends a call that is mostly host time is a race between them (the
	// CPU clock counts the guest's time only), recorded or not: each must end at one of them.
	atBudget := func(err error) bool {
		return errors.Is(err, ErrCPUBudget) || errors.Is(err, context.DeadlineExceeded)
	}
	if !atBudget(errOff) || !atBudget(errOn) {
		t.Fatalf("validate recorded: %v; unrecorded: %v; want both ended at a budget", errOn, errOff)
	}
	c := rec.take(t)
	checkBounded(t, c)
	if c.Result.Status != session.StatusError || c.Result.Reason != errOn.Error() {
		t.Errorf("recorded result %+v, want the call's own error", c.Result)
	}
	if c.Exchanges[0].Fn != session.KVSet || c.Exchanges[1].Fn != session.KVGet {
		t.Errorf("recorded %s, %s first; want the kv_set, then the reads", c.Exchanges[0].Fn, c.Exchanges[1].Fn)
	}
}

// TestRecordingBoundedReads: a validate that reads the value 5,000 times and accepts is
// accepted, recorded up to the bounds; the next call of the module is recorded afresh and
// whole.
func TestRecordingBoundedReads(t *testing.T) {
	rec := &lastCall{}
	sb, _ := newTestSandbox(t, Config{Recorder: rec})
	m := mustLoad(t, sb, "kvread")
	p := sandboxtest.Info("kvread.example", "p")
	if err := m.ValidatePlugin(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	c := rec.take(t)
	checkBounded(t, c)
	if got := len(c.Exchanges) + c.Truncated.Exchanges; got != 5001 {
		t.Errorf("%d exchanges recorded or left out, want the kv_set and 5,000 kv_gets", got)
	}
	if c.Result.Status != session.StatusOK {
		t.Errorf("result %+v", c.Result)
	}
	if _, err := m.RegisterPlugin(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if c := rec.take(t); c.Truncated != nil || c.Export != session.Register {
		t.Errorf("the register after it: %+v", c)
	}
}
