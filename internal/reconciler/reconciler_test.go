package reconciler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wasmhost/wasmhost/internal/reconciler"
	"github.com/wasmhost/wasmhost/internal/reconciler/reconcilertest"
	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/state"
	"github.com/wasmhost/wasmhost/internal/typeslots"
)

const (
	csi = reconcilertest.DefaultType
	dra = "DRAPlugin"
)

// env is one reconciler over real states and a fake Operations, running until the test ends.
type env struct {
	t        *testing.T
	desired  *state.Desired
	actual   *state.Actual
	registry *registration.Registry
	ops      *reconcilertest.Operations
	handler  *reconcilertest.Handler // the handler of csi
	r        *reconciler.Reconciler

	mu      sync.Mutex
	changes []reconciler.SocketStatus

	cancel   context.CancelFunc
	done     chan error
	stopOnce sync.Once
}

func newEnv(t *testing.T, cfg reconciler.Config) *env {
	t.Helper()
	st := state.New()
	e := &env{
		t:        t,
		desired:  st.Desired(),
		actual:   st.Actual(),
		registry: registration.NewRegistry(),
		handler:  reconcilertest.NewHandler(),
	}
	e.ops = reconcilertest.NewOperations(e.actual, e.registry)
	e.registry.Set(csi, e.handler)
	cfg.Status = recording{Store: st, e: e}
	e.r = reconciler.New(e.desired, e.actual, e.registry, e.ops, cfg)
	return e
}

// recording is the state store, recording every status the reconciler writes into it.
type recording struct {
	*state.Store
	e *env
}

func (r recording) SetStatus(s state.Status) {
	if old, ok := r.StatusOf(s.Path); !ok || !old.Equal(s) {
		r.e.mu.Lock()
		r.e.changes = append(r.e.changes, s)
		r.e.mu.Unlock()
	}
	r.Store.SetStatus(s)
}

func (r recording) DeleteStatus(path string, since time.Time) {
	if _, ok := r.StatusOf(path); ok {
		r.e.mu.Lock()
		r.e.changes = append(r.e.changes, state.Status{Path: path, State: state.StateGone, Since: since})
		r.e.mu.Unlock()
	}
	r.Store.DeleteStatus(path, since)
}

// start runs the reconciler until stop or the end of the test.
func (e *env) start() *env {
	ctx, cancel := context.WithCancel(e.t.Context())
	e.cancel = cancel
	e.done = make(chan error, 1)
	go func() { e.done <- e.r.Run(ctx) }()
	e.t.Cleanup(e.stop)
	return e
}

func (e *env) stop() {
	e.stopOnce.Do(func() {
		e.cancel()
		if err := <-e.done; err != nil {
			e.t.Errorf("Run returned %v, want nil", err)
		}
	})
}

func sock(path string, n uint64) state.Socket {
	return state.Socket{Path: path, ID: state.Identity{Dev: 1, Ino: n, Ctime: int64(n)}}
}

func (e *env) add(path string, n uint64) { e.desired.Upsert(sock(path, n)) }

func (e *env) status(path string) reconciler.SocketStatus {
	e.t.Helper()
	s, ok := e.r.SocketStatus(path)
	if !ok {
		e.t.Fatalf("no status for %s", path)
	}
	return s
}

func (e *env) wantState(path string, want reconciler.State) reconciler.SocketStatus {
	e.t.Helper()
	s := e.status(path)
	if s.State != want {
		e.t.Fatalf("%s: state %q (error %q), want %q", path, s.State, s.LastError, want)
	}
	return s
}

func (e *env) wantRegistered(path string, n uint64) {
	e.t.Helper()
	p, ok := e.actual.Get(path)
	if !ok {
		e.t.Fatalf("%s: not in the actual state", path)
	}
	if p.ID != sock(path, n).ID {
		e.t.Fatalf("%s: registered identity %v, want %v", path, p.ID, sock(path, n).ID)
	}
	e.wantState(path, reconciler.StateRegistered)
}

// changesOf returns the states the reconciler recorded for path, in order.
func (e *env) changesOf(path string) []reconciler.State {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []reconciler.State
	for _, c := range e.changes {
		if c.Path == path {
			out = append(out, c.State)
		}
	}
	return out
}

// callsOf renders the operations of path as "register 1", "deregister 1", ...
func (e *env) callsOf(path string) []string {
	var out []string
	for _, c := range e.ops.CallsOf(path) {
		out = append(out, fmt.Sprintf("%s %d", c.Op, c.ID.Ino))
	}
	return out
}

func equal[T comparable](t *testing.T, what string, got, want []T) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}

func TestRegisterOnePlugin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, reconciler.Config{}).start()
		t0 := time.Now()
		e.add("/p/a.sock", 1)
		synctest.Wait()
		e.wantRegistered("/p/a.sock", 1)
		if !time.Now().Equal(t0) {
			t.Errorf("registration took %v of fake time, want none", time.Since(t0))
		}
		equal(t, "handler calls", e.handler.CallsOf("/p/a.sock"), []string{"validate", "register"})
		equal(t, "operations", e.callsOf("/p/a.sock"), []string{"register 1"})
		s := e.status("/p/a.sock")
		if s.PluginType != csi || s.PluginName != "a" || s.Attempts != 0 || s.LastError != "" {
			t.Errorf("status %+v", s)
		}
		if got := e.r.Counters(); got != (reconciler.Counters{RegistrationsOK: 1}) {
			t.Errorf("counters %+v", got)
		}
		e.stop()
		if got := e.changesOf("/p/a.sock"); got[len(got)-1] != reconciler.StateRegistered {
			t.Errorf("status changes %v, want the last registered", got)
		}
	})
}

func TestRegisterSeveralPlugins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, reconciler.Config{}).start()
		var want []string
		for i := range 10 {
			p := fmt.Sprintf("/p/plugin-%d.sock", i)
			want = append(want, p)
			e.add(p, uint64(i+1))
		}
		synctest.Wait()
		for i, p := range want {
			e.wantRegistered(p, uint64(i+1))
		}
		equal(t, "handler holds", e.handler.Registered(), want)
		if n := len(e.r.Status()); n != 10 {
			t.Errorf("%d statuses, want 10", n)
		}
	})
}

func TestSamePluginNameAtDifferentSockets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, reconciler.Config{})
		e.ops.SetInfo("/p/x/drv-reg.sock", csi, "drv")
		e.ops.SetInfo("/p/y/drv-reg.sock", csi, "drv")
		e.start()
		e.add("/p/x/drv-reg.sock", 1)
		e.add("/p/y/drv-reg.sock", 2)
		synctest.Wait()
		e.wantRegistered("/p/x/drv-reg.sock", 1)
		e.wantRegistered("/p/y/drv-reg.sock", 2)
		equal(t, "handler holds", e.handler.Registered(), []string{"/p/x/drv-reg.sock", "/p/y/drv-reg.sock"})
		for _, s := range e.r.Status() {
			if s.PluginName != "drv" {
				t.Errorf("%s: plugin name %q, want drv", s.Path, s.PluginName)
			}
		}
	})
}

func TestSocketsPresentAtStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, reconciler.Config{})
		e.add("/p/a.sock", 1)
		e.add("/p/b.sock", 2)
		e.desired.TakeDirty() // as if someone had already taken the edges: the first pass must not need them
		e.add("/p/c.sock", 3)
		e.start()
		synctest.Wait()
		e.wantRegistered("/p/a.sock", 1)
		e.wantRegistered("/p/b.sock", 2)
		e.wantRegistered("/p/c.sock", 3)
		if n := len(e.ops.Calls()); n != 3 {
			t.Errorf("%d operations, want 3", n)
		}
	})
}

func TestDeregistration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, reconciler.Config{}).start()
		e.add("/p/a.sock", 1)
		synctest.Wait()
		e.wantRegistered("/p/a.sock", 1)
		e.desired.Remove("/p/a.sock")
		synctest.Wait()
		if e.actual.Len() != 0 {
			t.Fatalf("actual state still holds %v", e.actual.List())
		}
		equal(t, "handler calls", e.handler.CallsOf("/p/a.sock"), []string{"validate", "register", "deregister"})
		equal(t, "operations", e.callsOf("/p/a.sock"), []string{"register 1", "deregister 1"})
		if st := e.r.Status(); len(st) != 0 {
			t.Errorf("status lists %v after the socket is gone", st)
		}
		if got := e.r.Counters(); got.Deregistrations != 1 {
			t.Errorf("counters %+v", got)
		}
		// Quiet afterwards, and gone reported exactly once, last.
		time.Sleep(5 * time.Minute)
		changes := e.changesOf("/p/a.sock")
		if changes[len(changes)-1] != reconciler.StateGone ||
			slices.Index(changes, reconciler.StateGone) != len(changes)-1 {
			t.Errorf("status changes %v, want gone once, last", changes)
		}
		if n := len(e.ops.Calls()); n != 2 {
			t.Errorf("%d operations after the socket went, want 2", n)
		}
	})
}

func TestReRegistrationAfterSocketRecreated(t *testing.T) {
	for _, tc := range []struct {
		name     string
		recreate func(e *env)
	}{
		{"replaced", func(e *env) { e.add("/p/a.sock", 2) }},
		{"removed and created", func(e *env) { e.desired.Remove("/p/a.sock"); e.add("/p/a.sock", 2) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEnv(t, reconciler.Config{}).start()
				e.add("/p/a.sock", 1)
				synctest.Wait()
				e.wantRegistered("/p/a.sock", 1)
				tc.recreate(e)
				synctest.Wait()
				e.wantRegistered("/p/a.sock", 2)
				equal(t, "operations", e.callsOf("/p/a.sock"),
					[]string{"register 1", "deregister 1", "register 2"})
				equal(t, "handler calls", e.handler.CallsOf("/p/a.sock"),
					[]string{"validate", "register", "deregister", "validate", "register"})
			})
		})
	}
}

func TestUnknownTypeWaitsForHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, reconciler.Config{})
		e.ops.SetInfo("/p/gpu-reg.sock", dra, "gpu.example.com")
		e.start()
		e.add("/p/gpu-reg.sock", 1)
		synctest.Wait()
		s := e.wantState("/p/gpu-reg.sock", reconciler.StateWaitingForHandler)
		if s.PluginType != dra || s.PluginName != "gpu.example.com" || !strings.Contains(s.LastError, "no handler") {
			t.Errorf("status %+v", s)
		}
		// Not retried, not backed off: it waits, however long.
		time.Sleep(10 * time.Minute)
		if n := len(e.ops.Calls()); n != 1 {
			t.Fatalf("%d operations while waiting for a handler, want 1", n)
		}
		// A handler of another type does not wake it.
		e.registry.Set("Other", reconcilertest.NewHandler())
		synctest.Wait()
		if n := len(e.ops.Calls()); n != 1 {
			t.Fatalf("%d operations after an unrelated handler came, want 1", n)
		}
		h := reconcilertest.NewHandler()
		t0 := time.Now()
		e.registry.Set(dra, h)
		synctest.Wait()
		e.wantRegistered("/p/gpu-reg.sock", 1)
		if !time.Now().Equal(t0) {
			t.Errorf("registered %v after the handler came, want at once", time.Since(t0))
		}
		equal(t, "handler holds", h.Registered(), []string{"/p/gpu-reg.sock"})
		if got := e.r.Counters(); got.RegistrationsFailed != 1 || got.RegistrationsOK != 1 || got.Retries != 1 {
			t.Errorf("counters %+v", got)
		}
	})
}

// An ErrNoHandler that does not tell the plugin type: every handler change retries it.
func TestUntypedNoHandlerRetriedOnAnyHandlerChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, reconciler.Config{}).start()
		e.ops.Fail("/p/a.sock", fmt.Errorf("%w: mystery", registration.ErrNoHandler))
		e.add("/p/a.sock", 1)
		synctest.Wait()
		e.wantState("/p/a.sock", reconciler.StateWaitingForHandler)
		time.Sleep(5 * time.Minute)
		if n := len(e.ops.Calls()); n != 1 {
			t.Fatalf("%d operations while waiting, want 1", n)
		}
		e.ops.Fail("/p/a.sock", nil)
		e.registry.Set("Other", reconcilertest.NewHandler())
		synctest.Wait()
		e.wantRegistered("/p/a.sock", 1)
	})
}

// pendingError is a no-handler error that tells its plugin's type, for the status, and asks
// to be retried at any change of the handler set (as the registrar's does while handlers from
// registries are still being pulled).
type pendingError struct{ typ string }

func (e pendingError) Error() string                  { return registration.ErrNoHandler.Error() + ": " + e.typ }
func (e pendingError) Unwrap() error                  { return registration.ErrNoHandler }
func (e pendingError) PluginType() string             { return e.typ }
func (e pendingError) WaitsForAnyHandlerChange() bool { return true }

// A typed ErrNoHandler that asks for any handler change: its status names the type, and a
// handler of another type (or a touch of the registry) retries it.
func TestNoHandlerPendingRetriedOnAnyHandlerChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, reconciler.Config{}).start()
		e.ops.Fail("/p/a.sock", pendingError{"Mine"})
		e.add("/p/a.sock", 1)
		synctest.Wait()
		if st := e.wantState("/p/a.sock", reconciler.StateWaitingForHandler); st.PluginType != "Mine" {
			t.Errorf("status names type %q, want Mine", st.PluginType)
		}
		e.ops.Fail("/p/a.sock", nil)
		e.registry.Set("Other", reconcilertest.NewHandler())
		synctest.Wait()
		e.wantRegistered("/p/a.sock", 1)
	})
}

// A handler that appears while a registration is on its way to failing with ErrNoHandler must
// not be missed.
func TestHandlerSetWhileRegistrationInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, reconciler.Config{}).start()
		e.ops.Fail("/p/a.sock", fmt.Errorf("%w: mystery", registration.ErrNoHandler))
		release := e.ops.Block("/p/a.sock")
		e.add("/p/a.sock", 1)
		synctest.Wait()
		e.registry.Set("Other", reconcilertest.NewHandler())
		synctest.Wait()
		t0 := time.Now()
		release()
		synctest.Wait()
		// Retried at once; it failed again with no change since, so now it waits.
		if n := len(e.ops.Calls()); n != 2 {
			t.Fatalf("%d operations, want 2", n)
		}
		if !time.Now().Equal(t0) {
			t.Errorf("retried after %v, want at once", time.Since(t0))
		}
		e.wantState("/p/a.sock", reconciler.StateWaitingForHandler)
	})
}

// A handler that failed (an error that is not its decision: a trap, a timeout) is retried
// with the error backoff.
func TestHandlerFailureBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, reconciler.Config{}).start()
		e.handler.SetValidateError(errors.New("unsupported version"))
		t0 := time.Now()
		e.add("/p/a.sock", 1)
		synctest.Wait()
		s := e.wantState("/p/a.sock", reconciler.StateFailing)
		if s.Attempts != 1 || !s.NextRetry.Equal(t0.Add(500*time.Millisecond)) ||
			!strings.Contains(s.LastError, "handler failed") || !strings.Contains(s.LastError, "unsupported version") {
			t.Errorf("status %+v", s)
		}
		time.Sleep(2 * time.Second) // attempts at 0.5 s and 1.5 s fail; the next is due at 3.5 s
		s = e.wantState("/p/a.sock", reconciler.StateFailing)
		if s.Attempts != 3 || !s.NextRetry.Equal(t0.Add(3500*time.Millisecond)) {
			t.Errorf("status %+v", s)
		}
		e.handler.SetValidateError(nil)
		time.Sleep(2 * time.Second)
		e.wantRegistered("/p/a.sock", 1)
		var at []time.Duration
		for _, c := range e.ops.Calls() {
			at = append(at, c.At.Sub(t0))
		}
		equal(t, "attempts at", at, []time.Duration{0, 500 * time.Millisecond, 1500 * time.Millisecond, 3500 * time.Millisecond})
		if s := e.status("/p/a.sock"); s.Attempts != 0 || s.LastError != "" || !s.NextRetry.IsZero() {
			t.Errorf("status after success %+v", s)
		}
		if got := e.r.Counters(); got != (reconciler.Counters{RegistrationsOK: 1, RegistrationsFailed: 3, Retries: 3}) {
			t.Errorf("counters %+v", got)
		}
	})
}

func TestBackoffTimingsCapped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, reconciler.Config{}).start()
		e.ops.Fail("/p/a.sock", fmt.Errorf("%w: connection refused", registration.ErrUnreachable))
		e.add("/p/a.sock", 1)
		time.Sleep(15 * time.Minute)
		calls := e.ops.Calls()
		var gaps []time.Duration
		for i := 1; i < len(calls); i++ {
			gaps = append(gaps, calls[i].At.Sub(calls[i-1].At))
		}
		s := time.Second
		want := []time.Duration{s / 2, s, 2 * s, 4 * s, 8 * s, 16 * s, 32 * s, 64 * s}
		for len(want) < len(gaps) {
			want = append(want, 122*s)
		}
		equal(t, "gaps between attempts", gaps, want)
		if len(gaps) < 10 {
			t.Errorf("only %d retries in 15 minutes", len(gaps))
		}
	})
}

func TestBackoffConfigurable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, reconciler.Config{InitialBackoff: 100 * time.Millisecond, MaxBackoff: 300 * time.Millisecond}).start()
		e.ops.Fail("/p/a.sock", registration.ErrUnreachable)
		e.add("/p/a.sock", 1)
		time.Sleep(1450 * time.Millisecond) // attempts at 0, 0.1, 0.3, 0.6, 0.9, 1.2 s
		var gaps []time.Duration
		calls := e.ops.Calls()
		for i := 1; i < len(calls); i++ {
			gaps = append(gaps, calls[i].At.Sub(calls[i-1].At))
		}
		ms := time.Millisecond
		equal(t, "gaps", gaps, []time.Duration{100 * ms, 200 * ms, 300 * ms, 300 * ms, 300 * ms})
	})
}

func TestBackoffResetOnIdentityChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, reconciler.Config{}).start()
		e.ops.Fail("/p/a.sock", registration.ErrUnreachable)
		e.add("/p/a.sock", 1)
		time.Sleep(16 * time.Second) // failed at 0, 0.5, 1.5, 3.5, 7.5, 15.5; next at 31.5
		if s := e.wantState("/p/a.sock", reconciler.StateFailing); s.Attempts != 6 {
			t.Fatalf("status %+v", s)
		}
		t0 := time.Now()
		e.add("/p/a.sock", 2) // the plugin restarted
		synctest.Wait()
		calls := e.ops.Calls()
		last := calls[len(calls)-1]
		if last.ID.Ino != 2 || !last.At.Equal(t0) {
			t.Fatalf("last call %+v at %v, want the new socket at once", last, last.At.Sub(t0))
		}
		if s := e.wantState("/p/a.sock", reconciler.StateFailing); s.Attempts != 1 ||
			!s.NextRetry.Equal(t0.Add(500*time.Millisecond)) {
			t.Errorf("status %+v, want the backoff started over", s)
		}
		// The old schedule (31.5 s) is forgotten.
		e.ops.Fail("/p/a.sock", nil)
		time.Sleep(time.Second)
		e.wantRegistered("/p/a.sock", 2)
		n := len(e.ops.Calls())
		time.Sleep(time.Minute)
		if got := len(e.ops.Calls()); got != n {
			t.Errorf("%d more operations after success", got-n)
		}
	})
}

func TestBackoffClearedOnSuccessAndResyncRepairs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, reconciler.Config{Resync: 30 * time.Second}).start()
		e.ops.Fail("/p/a.sock", registration.ErrUnreachable)
		e.add("/p/a.sock", 1)
		time.Sleep(2 * time.Second) // failed at 0, 0.5, 1.5; next at 3.5
		e.ops.Fail("/p/a.sock", nil)
		time.Sleep(2 * time.Second)
		e.wantRegistered("/p/a.sock", 1)
		// The plugin vanishes from the actual state behind the reconciler's back (no edge):
		// the periodic pass notices, and the failure that follows starts the backoff over.
		e.ops.Fail("/p/a.sock", registration.ErrUnreachable)
		e.actual.Remove("/p/a.sock")
		t0 := time.Now()
		time.Sleep(27 * time.Second)
		calls := e.ops.Calls()
		if len(calls) != 6 {
			t.Fatalf("%d calls, want 6", len(calls))
		}
		if at := calls[4].At.Sub(t0); at != 26*time.Second { // the resync at 30 s from the start
			t.Errorf("resync attempt at +%v, want +26s", at)
		}
		if gap := calls[5].At.Sub(calls[4].At); gap != 500*time.Millisecond {
			t.Errorf("first retry after the success %v later, want 500ms", gap)
		}
	})
}

func TestOneOperationPerSocket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, reconciler.Config{}).start()
		release := e.ops.Block("/p/a.sock")
		e.add("/p/a.sock", 1)
		synctest.Wait()
		e.add("/p/a.sock", 2)
		synctest.Wait()
		e.desired.Remove("/p/a.sock")
		e.add("/p/a.sock", 3)
		synctest.Wait()
		e.registry.Set("Other", reconcilertest.NewHandler())
		time.Sleep(5 * time.Minute) // resyncs and timers must not start a second one either
		equal(t, "operations while blocked", e.callsOf("/p/a.sock"), []string{"register 1"})
		e.wantState("/p/a.sock", reconciler.StatePending)
		release()
		synctest.Wait()
		equal(t, "operations", e.callsOf("/p/a.sock"), []string{"register 1", "deregister 1", "register 3"})
		e.wantRegistered("/p/a.sock", 3)
		if perPath, _ := e.ops.MaxInFlight(); perPath != 1 {
			t.Errorf("%d operations at once for one socket", perPath)
		}
	})
}

func TestReplaceDeregistersBeforeRegistering(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, reconciler.Config{}).start()
		e.add("/p/a.sock", 1)
		synctest.Wait()
		release := e.ops.Block("/p/a.sock")
		e.add("/p/a.sock", 2)
		synctest.Wait()
		// The deregistration of the old plugin is blocked: the new one must wait for it.
		equal(t, "operations", e.callsOf("/p/a.sock"), []string{"register 1", "deregister 1"})
		e.wantState("/p/a.sock", reconciler.StatePending)
		release()
		synctest.Wait()
		equal(t, "operations", e.callsOf("/p/a.sock"), []string{"register 1", "deregister 1", "register 2"})
		equal(t, "handler calls", e.handler.CallsOf("/p/a.sock"),
			[]string{"validate", "register", "deregister", "validate", "register"})
		e.wantRegistered("/p/a.sock", 2)
	})
}

func TestMaxConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, reconciler.Config{MaxConcurrent: 4}).start()
		var releases []func()
		for i := range 20 {
			p := fmt.Sprintf("/p/%02d.sock", i)
			releases = append(releases, e.ops.Block(p))
			e.add(p, uint64(i+1))
		}
		synctest.Wait()
		if n := e.ops.InFlight(); n != 4 {
			t.Fatalf("%d operations in flight, want 4", n)
		}
		for _, s := range e.r.Status() {
			if s.State != reconciler.StatePending {
				t.Fatalf("%s: %q, want pending", s.Path, s.State)
			}
		}
		for _, release := range releases {
			release()
		}
		synctest.Wait()
		if e.actual.Len() != 20 {
			t.Fatalf("%d registered, want 20", e.actual.Len())
		}
		if _, total := e.ops.MaxInFlight(); total != 4 {
			t.Errorf("%d operations at once, want 4", total)
		}
	})
}

// Sockets that never answer hold their operations past StalledAfter: from then on they no
// longer count against MaxConcurrent, so a plugin that appears after them registers at once;
// MaxInFlight still bounds them all.
func TestStalledOperationsLeaveRoomWithinMaxInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, reconciler.Config{MaxConcurrent: 2, MaxInFlight: 5, StalledAfter: 50 * time.Millisecond}).start()
		var releases []func()
		hang := func(p string, n uint64) {
			releases = append(releases, e.ops.Block(p))
			e.add(p, n)
		}
		for i := range 4 {
			hang(fmt.Sprintf("/p/hung%d.sock", i), uint64(i+1))
		}
		synctest.Wait()
		if n := e.ops.InFlight(); n != 2 {
			t.Fatalf("%d operations in flight before any stalled, want maxConcurrent 2", n)
		}
		time.Sleep(60 * time.Millisecond)
		synctest.Wait()
		if n := e.ops.InFlight(); n != 4 {
			t.Fatalf("%d operations in flight once the first two stalled, want all 4", n)
		}
		time.Sleep(60 * time.Millisecond)
		synctest.Wait()

		e.add("/p/new.sock", 10)
		synctest.Wait()
		e.wantRegistered("/p/new.sock", 10)

		hang("/p/hung4.sock", 5)
		hang("/p/hung5.sock", 6)
		time.Sleep(time.Second)
		synctest.Wait()
		if n := e.ops.InFlight(); n != 5 {
			t.Fatalf("%d operations in flight, want maxInFlight 5", n)
		}
		if s := e.status("/p/hung5.sock"); s.State != reconciler.StatePending {
			t.Fatalf("the sixth hung socket: %q, want pending (queued)", s.State)
		}
		for _, release := range releases {
			release()
		}
		synctest.Wait()
		if e.actual.Len() != 7 {
			t.Fatalf("%d registered, want 7", e.actual.Len())
		}
		if _, total := e.ops.MaxInFlight(); total != 5 {
			t.Errorf("%d operations at once, want 5", total)
		}
	})
}

func TestHandlerRemovedDeregistersAndWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, reconciler.Config{})
		draHandler := reconcilertest.NewHandler()
		e.registry.Set(dra, draHandler)
		e.ops.SetInfo("/p/b.sock", dra, "b")
		e.start()
		e.add("/p/a.sock", 1)
		e.add("/p/b.sock", 2)
		e.add("/p/c.sock", 3)
		synctest.Wait()
		e.wantRegistered("/p/a.sock", 1)
		e.wantRegistered("/p/b.sock", 2)

		e.registry.Remove(csi)
		synctest.Wait()
		for _, p := range []string{"/p/a.sock", "/p/c.sock"} {
			equal(t, p+" handler calls", e.handler.CallsOf(p), []string{"validate", "register", "deregister"})
			if s := e.wantState(p, reconciler.StateWaitingForHandler); s.PluginType != csi {
				t.Errorf("status %+v", s)
			}
			if _, ok := e.actual.Get(p); ok {
				t.Errorf("%s still in the actual state", p)
			}
		}
		e.wantRegistered("/p/b.sock", 2)
		equal(t, "dra handler calls", draHandler.CallsOf("/p/b.sock"), []string{"validate", "register"})

		time.Sleep(5 * time.Minute)
		if n := len(e.ops.CallsOf("/p/a.sock")); n != 2 {
			t.Fatalf("%d operations of a while waiting, want 2", n)
		}
		h := reconcilertest.NewHandler()
		e.registry.Set(csi, h)
		synctest.Wait()
		e.wantRegistered("/p/a.sock", 1)
		e.wantRegistered("/p/c.sock", 3)
		equal(t, "new handler holds", h.Registered(), []string{"/p/a.sock", "/p/c.sock"})
	})
}

func TestDeregisterHandlerErrorIsNotBackedOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, reconciler.Config{}).start()
		e.add("/p/a.sock", 1)
		synctest.Wait()
		e.handler.SetDeregisterError(errors.New("driver busy"))
		t0 := time.Now()
		e.add("/p/a.sock", 2)
		synctest.Wait()
		e.wantRegistered("/p/a.sock", 2)
		if !time.Now().Equal(t0) {
			t.Errorf("re-registered after %v, want at once", time.Since(t0))
		}
		if got := e.r.Counters(); got.DeregistrationsFailed != 1 || got.RegistrationsOK != 2 {
			t.Errorf("counters %+v", got)
		}
	})
}

func TestDeregisterFailureBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, reconciler.Config{}).start()
		e.add("/p/a.sock", 1)
		synctest.Wait()
		e.ops.FailDeregister("/p/a.sock", errors.New("stuck"))
		t0 := time.Now()
		e.desired.Remove("/p/a.sock")
		synctest.Wait()
		if s := e.wantState("/p/a.sock", reconciler.StateFailing); s.Attempts != 1 || !s.NextRetry.Equal(t0.Add(500*time.Millisecond)) {
			t.Errorf("status %+v", s)
		}
		time.Sleep(time.Second) // fails again at 0.5 s
		e.ops.FailDeregister("/p/a.sock", nil)
		time.Sleep(time.Second) // succeeds at 1.5 s
		if _, ok := e.r.SocketStatus("/p/a.sock"); ok || e.actual.Len() != 0 {
			t.Errorf("socket still known after deregistration")
		}
		var at []time.Duration
		for _, c := range e.ops.CallsOf("/p/a.sock")[1:] {
			at = append(at, c.At.Sub(t0))
		}
		equal(t, "deregistrations at", at, []time.Duration{0, 500 * time.Millisecond, 1500 * time.Millisecond})
	})
}

// A plugin registered by the Operations but whose socket disappeared meanwhile is deregistered
// when the operation ends.
func TestSocketRemovedWhileRegistering(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, reconciler.Config{}).start()
		release := e.ops.Block("/p/a.sock")
		e.add("/p/a.sock", 1)
		synctest.Wait()
		e.desired.Remove("/p/a.sock")
		synctest.Wait()
		release()
		synctest.Wait()
		equal(t, "operations", e.callsOf("/p/a.sock"), []string{"register 1", "deregister 1"})
		if e.actual.Len() != 0 || len(e.r.Status()) != 0 {
			t.Errorf("left over: actual %v, status %v", e.actual.List(), e.r.Status())
		}
	})
}

// slowOps blocks every operation until its context is done, then takes another second.
type slowOps struct {
	started chan struct{}
	exited  atomic.Bool
}

func (o *slowOps) Register(ctx context.Context, _ state.Socket) error {
	o.started <- struct{}{}
	<-ctx.Done()
	time.Sleep(time.Second)
	o.exited.Store(true)
	return ctx.Err()
}

func (o *slowOps) Deregister(context.Context, state.Plugin) error { return nil }

func TestRunWaitsForOperationsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		desired := state.NewDesired()
		ops := &slowOps{started: make(chan struct{}, 1)}
		r := reconciler.New(desired, state.NewActual(), registration.NewRegistry(), ops, reconciler.Config{})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		desired.Upsert(sock("/p/a.sock", 1))
		<-ops.started
		t0 := time.Now()
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
		if !ops.exited.Load() {
			t.Fatal("Run returned before its operation did")
		}
		if d := time.Since(t0); d != time.Second {
			t.Errorf("Run returned %v after cancel, want 1s", d)
		}
		if err := r.Run(t.Context()); !errors.Is(err, reconciler.ErrAlreadyStarted) {
			t.Errorf("second Run: %v, want ErrAlreadyStarted", err)
		}
		// synctest.Test fails if any goroutine of the bubble is left.
	})
}

func TestStatusSortedAndSince(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, reconciler.Config{}).start()
		e.ops.Fail("/p/b.sock", registration.ErrUnreachable)
		e.add("/p/c.sock", 1)
		e.add("/p/a.sock", 2)
		e.add("/p/b.sock", 3)
		synctest.Wait()
		t0 := time.Now()
		var paths []string
		for _, s := range e.r.Status() {
			paths = append(paths, s.Path)
			if !s.Since.Equal(t0) {
				t.Errorf("%s: since %v, want %v", s.Path, s.Since, t0)
			}
		}
		equal(t, "paths", paths, []string{"/p/a.sock", "/p/b.sock", "/p/c.sock"})
		time.Sleep(10 * time.Second) // b keeps failing; every retry is pending, then failing again
		calls := e.ops.CallsOf("/p/b.sock")
		if s := e.wantState("/p/b.sock", reconciler.StateFailing); !s.Since.Equal(calls[len(calls)-1].At) || s.Attempts != len(calls) {
			t.Errorf("status %+v, %d calls", s, len(calls))
		}
		if s := e.wantState("/p/a.sock", reconciler.StateRegistered); !s.Since.Equal(t0) {
			t.Errorf("status %+v", s)
		}
	})
}

func TestWaitingSocketRecreatedIsTriedAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, reconciler.Config{})
		e.ops.SetInfo("/p/a.sock", dra, "a")
		e.start()
		e.add("/p/a.sock", 1)
		synctest.Wait()
		e.wantState("/p/a.sock", reconciler.StateWaitingForHandler)
		e.add("/p/a.sock", 2)
		synctest.Wait()
		equal(t, "operations", e.callsOf("/p/a.sock"), []string{"register 1", "register 2"})
		e.wantState("/p/a.sock", reconciler.StateWaitingForHandler)
		e.desired.Remove("/p/a.sock")
		synctest.Wait()
		if _, ok := e.r.SocketStatus("/p/a.sock"); ok {
			t.Error("a removed waiting socket is still listed")
		}
		if got := e.changesOf("/p/a.sock"); got[len(got)-1] != reconciler.StateGone {
			t.Errorf("changes %v, want gone last", got)
		}
	})
}

// forgetfulOps claims success without recording the plugin.
type forgetfulOps struct{ calls atomic.Int32 }

func (o *forgetfulOps) Register(context.Context, state.Socket) error {
	o.calls.Add(1)
	return nil
}
func (o *forgetfulOps) Deregister(context.Context, state.Plugin) error { return nil }

func TestSuccessWithoutPluginIsAFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		desired := state.NewDesired()
		ops := &forgetfulOps{}
		r := reconciler.New(desired, state.NewActual(), registration.NewRegistry(), ops, reconciler.Config{})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		desired.Upsert(sock("/p/a.sock", 1))
		time.Sleep(2 * time.Second) // 0, 0.5, 1.5: backed off, not spinning
		if n := ops.calls.Load(); n != 3 {
			t.Errorf("%d calls in 2 s, want 3", n)
		}
		s, _ := r.SocketStatus("/p/a.sock")
		if s.State != reconciler.StateFailing || !strings.Contains(s.LastError, "/p/a.sock") {
			t.Errorf("status %+v", s)
		}
		cancel()
		<-done
	})
}

func TestConfigDefaults(t *testing.T) {
	r := reconciler.New(state.NewDesired(), state.NewActual(), registration.NewRegistry(),
		reconcilertest.NewOperations(nil, nil), reconciler.Config{})
	c := r.Config()
	if c.MaxConcurrent != 64 || c.InitialBackoff != 500*time.Millisecond ||
		c.MaxBackoff != 2*time.Minute+2*time.Second || c.Resync != time.Minute || c.Logger == nil {
		t.Errorf("defaults %+v", c)
	}
}

// syncBuffer is a bytes.Buffer safe for the logger's concurrent use.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) records(t *testing.T) []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for line := range strings.Lines(b.buf.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func TestFailureLoggedOnceAtWarn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf syncBuffer
		logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		e := newEnv(t, reconciler.Config{Logger: logger}).start()
		e.ops.Fail("/p/a.sock", fmt.Errorf("%w: connection refused", registration.ErrUnreachable))
		e.add("/p/a.sock", 1)
		// Failures at 0, 0.5, 1.5, ... 31.5 s; the resync at 60 s finds it backing off until 63.5 s.
		time.Sleep(61 * time.Second)
		calls := e.ops.Calls()
		var warns []map[string]any
		debug := 0
		for _, m := range buf.records(t) {
			switch {
			case m["level"] == "WARN":
				warns = append(warns, m)
			case m["level"] == "DEBUG" && strings.Contains(fmt.Sprint(m["msg"]), "backing off"):
				debug++
			}
		}
		if len(warns) != len(calls) || len(calls) != 7 {
			t.Fatalf("%d warnings for %d failures, want 7 each", len(warns), len(calls))
		}
		for i, w := range warns {
			if w["socket"] != "/p/a.sock" || !strings.Contains(fmt.Sprint(w["error"]), "connection refused") ||
				w["attempt"] != float64(i+1) || w["next_retry"] == nil {
				t.Errorf("warning %d: %v", i, w)
			}
		}
		if debug != 1 {
			t.Errorf("%d debug records of skips while backing off, want 1 (the resync)", debug)
		}
	})
}

// versionsError is a registration error that tells who the plugin is, as the registrar's does.
type versionsError struct{ versions []string }

func (versionsError) Error() string              { return "rejected: version 0.9 is too old" }
func (versionsError) PluginType() string         { return "example.com/demo" }
func (versionsError) PluginName() string         { return "demo" }
func (e versionsError) PluginVersions() []string { return e.versions }

// TestStatusShowsVersionsOfFailingPlugin: a plugin that fails after telling who it is shows its
// type, name and versions, which are often why it fails.
func TestStatusShowsVersionsOfFailingPlugin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		desired, actual, reg := state.NewDesired(), state.NewActual(), registration.NewRegistry()
		ops := reconcilertest.NewOperations(actual, reg)
		ops.Fail("/s/a.sock", versionsError{versions: []string{"0.9"}})
		r := reconciler.New(desired, actual, reg, ops, reconciler.Config{})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- r.Run(ctx) }()
		desired.Upsert(state.Socket{Path: "/s/a.sock", ID: state.Identity{Ino: 1}})
		synctest.Wait()
		st, ok := r.SocketStatus("/s/a.sock")
		if !ok || st.State != reconciler.StateFailing || st.PluginType != "example.com/demo" || st.PluginName != "demo" || !slices.Equal(st.PluginVersions, []string{"0.9"}) {
			t.Errorf("status %+v", st)
		}
		cancel()
		<-done
	})
}

// Sockets that keep failing retry within a budget of their own (Config.MaxRetrying): however
// many of their retries hang, a new socket starts at once.
func TestRetriesHaveABudgetOfTheirOwn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, reconciler.Config{MaxConcurrent: 4, MaxRetrying: 1,
			InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond}).start()
		bad := func(i int) string { return fmt.Sprintf("/p/bad%d.sock", i) }
		for i := range 6 {
			e.ops.Fail(bad(i), registration.ErrUnreachable)
			e.add(bad(i), uint64(i+1))
		}
		synctest.Wait()
		var releases []func()
		for i := range 6 {
			e.wantState(bad(i), reconciler.StateFailing)
			e.ops.Fail(bad(i), nil)
			releases = append(releases, e.ops.Block(bad(i))) // the retries hang
		}
		time.Sleep(10 * time.Millisecond) // the backoffs end
		synctest.Wait()
		e.add("/p/good.sock", 100)
		synctest.Wait()
		e.wantRegistered("/p/good.sock", 100)
		for _, release := range releases {
			release()
		}
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		for i := range 6 {
			e.wantRegistered(bad(i), uint64(i+1))
		}
	})
}

// typeBusy is the error the registrar returns when its plugin type has no free slot.
type typeBusy struct{ typ string }

func (b typeBusy) Error() string      { return "busy: " + b.typ }
func (b typeBusy) Unwrap() error      { return typeslots.ErrBusy }
func (b typeBusy) PluginType() string { return b.typ }

// busyOps answers Register with typeslots.ErrBusy while the type's slots are taken, as the registrar
// does, and otherwise registers through the fake operations; the operations of slowType hold
// their slot until released.
type busyOps struct {
	*reconcilertest.Operations
	slots    *typeslots.Slots
	slowType string
	hold     chan struct{}
}

func (o busyOps) Register(ctx context.Context, s state.Socket) error {
	typ, _ := o.Info(s.Path)
	release, ok := o.slots.TryAcquire(typ)
	if !ok {
		return typeBusy{typ}
	}
	defer release()
	if typ == o.slowType {
		select {
		case <-o.hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return o.Operations.Register(ctx, s)
}

// A plugin type whose operations do not end holds only its own slots: plugins of other types
// register, and the slow type's sockets wait behind it without failing, then register.
func TestSlowTypeWaitsBehindItself(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := state.New()
		registry := registration.NewRegistry()
		registry.Set(csi, reconcilertest.NewHandler())
		registry.Set(dra, reconcilertest.NewHandler())
		slots := typeslots.New(2, 0)
		ops := busyOps{reconcilertest.NewOperations(st.Actual(), registry), slots, dra, make(chan struct{})}
		r := reconciler.New(st.Desired(), st.Actual(), registry, ops, reconciler.Config{
			MaxConcurrent: 4, TypeSlots: slots, Status: st})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		defer func() { cancel(); <-done }()

		for i := range 20 {
			p := fmt.Sprintf("/p/slow%02d.sock", i)
			ops.SetInfo(p, dra, fmt.Sprintf("slow%02d", i))
			st.Desired().Upsert(sock(p, uint64(i+1)))
		}
		synctest.Wait()
		st.Desired().Upsert(sock("/p/fast.sock", 100))
		synctest.Wait()
		if _, ok := st.Actual().Get("/p/fast.sock"); !ok {
			s, _ := st.StatusOf("/p/fast.sock")
			t.Fatalf("a plugin of another type is not registered while the slow type holds its slots: %+v", s)
		}
		for i := range 20 {
			s, _ := st.StatusOf(fmt.Sprintf("/p/slow%02d.sock", i))
			if s.State != reconciler.StatePending || s.Attempts != 0 {
				t.Errorf("slow socket %d: %q after %d failed attempts, want pending and no failure", i, s.State, s.Attempts)
			}
		}
		close(ops.hold)
		synctest.Wait()
		if n := st.Actual().Len(); n != 21 {
			t.Errorf("%d registered once the slow type moves, want 21", n)
		}
		if c := r.Counters(); c.RegistrationsFailed != 0 {
			t.Errorf("%d failed registrations, want 0: waiting for a slot is not a failure", c.RegistrationsFailed)
		}
	})
}

// A plugin its handler rejects (the handler's own decision) is not retried on the error
// backoff: it is asked again when its handler changes, when a plugin of the same type and
// name goes away, or at the slow re-check.
func TestRejectionIsAskedAgainWhenSomethingChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, reconciler.Config{}).start()
		e.ops.SetInfo("/p/a.sock", csi, "dup")
		e.ops.SetInfo("/p/b.sock", csi, "dup")
		e.add("/p/a.sock", 1)
		synctest.Wait()
		e.wantRegistered("/p/a.sock", 1)

		e.handler.SetValidateError(fmt.Errorf("%w: driver dup is registered already", registration.ErrRejected))
		t0 := time.Now()
		e.add("/p/b.sock", 2)
		synctest.Wait()
		s := e.wantState("/p/b.sock", reconciler.StateRejected)
		if s.Attempts != 1 || !s.NextRetry.Equal(t0.Add(5*time.Minute)) || s.PluginName != "dup" ||
			!strings.Contains(s.LastError, "registered already") {
			t.Errorf("status %+v", s)
		}
		time.Sleep(time.Minute) // no error backoff: nothing happens
		if n := len(e.callsOf("/p/b.sock")); n != 1 {
			t.Fatalf("%d attempts within a minute of a rejection, want 1", n)
		}

		// A new handler for its type: asked again at once (and refused again).
		e.registry.Set(csi, e.handler)
		synctest.Wait()
		if s := e.wantState("/p/b.sock", reconciler.StateRejected); s.Attempts != 2 {
			t.Errorf("after a handler change: %+v, want asked again", s)
		}

		// The incumbent goes away: the duplicate is asked again at once, and accepted.
		e.handler.SetValidateError(nil)
		e.desired.Remove("/p/a.sock")
		t1 := time.Now()
		synctest.Wait()
		e.wantRegistered("/p/b.sock", 2)
		if !time.Now().Equal(t1) {
			t.Errorf("registered %v after the incumbent left, want at once", time.Since(t1))
		}
		if c := e.r.Counters(); c.RegistrationsFailed != 2 {
			t.Errorf("counters %+v", c)
		}
	})
}

// Without any change, a rejected plugin is asked again at the re-check.
func TestRejectionRecheck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, reconciler.Config{RecheckRejected: time.Hour}).start()
		e.handler.SetValidateError(fmt.Errorf("%w: not yet", registration.ErrRejected))
		e.add("/p/a.sock", 1)
		synctest.Wait()
		e.wantState("/p/a.sock", reconciler.StateRejected)
		e.handler.SetValidateError(nil)
		time.Sleep(time.Hour - time.Second)
		e.wantState("/p/a.sock", reconciler.StateRejected)
		time.Sleep(2 * time.Second)
		e.wantRegistered("/p/a.sock", 1)
	})
}

// The slots across types: a type with slots of its own left still waits when all types
// together hold the total, and any type's release frees one for the others.
func TestTypeSlotsBoundAcrossTypes(t *testing.T) {
	slots := typeslots.New(2, 3)
	a1, ok1 := slots.TryAcquire(csi)
	_, ok2 := slots.TryAcquire(csi)
	_, ok3 := slots.TryAcquire(dra)
	if !ok1 || !ok2 || !ok3 {
		t.Fatalf("acquires within both bounds: %v %v %v, want all true", ok1, ok2, ok3)
	}
	if _, ok := slots.TryAcquire(dra); ok {
		t.Fatalf("%s took a fourth slot; the total is 3", dra)
	}
	if free := slots.Free("other"); free != 0 {
		t.Fatalf("another type has %d free, want 0 with the total taken", free)
	}
	a1()
	a1() // a release counts once
	if free := slots.Free("other"); free != 1 {
		t.Fatalf("another type has %d free after one release, want 1", free)
	}
	if got := slots.TakeReleased(); !slices.Equal(got, []string{csi}) {
		t.Fatalf("released %v, want [%s]", got, csi)
	}
}

// With the slots across types all held by one slow type, a plugin of another type waits
// behind its own type without failing, and starts when the slow type releases a slot: a
// release of one type wakes the sockets held back for another.
func TestReleaseOfOneTypeStartsAnotherWithinTheTotal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := state.New()
		registry := registration.NewRegistry()
		registry.Set(csi, reconcilertest.NewHandler())
		registry.Set(dra, reconcilertest.NewHandler())
		slots := typeslots.New(2, 2)
		ops := busyOps{reconcilertest.NewOperations(st.Actual(), registry), slots, dra, make(chan struct{})}
		r := reconciler.New(st.Desired(), st.Actual(), registry, ops, reconciler.Config{
			MaxConcurrent: 8, TypeSlots: slots, Status: st, Resync: -1})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		defer func() { cancel(); <-done }()

		for i := range 2 {
			p := fmt.Sprintf("/p/slow%d.sock", i)
			ops.SetInfo(p, dra, fmt.Sprintf("slow%d", i))
			st.Desired().Upsert(sock(p, uint64(i+1)))
		}
		synctest.Wait()
		st.Desired().Upsert(sock("/p/other.sock", 100))
		synctest.Wait()
		if s, _ := st.StatusOf("/p/other.sock"); s.State != reconciler.StatePending || s.Attempts != 0 {
			t.Fatalf("with every slot held: %q after %d failed attempts, want pending and no failure", s.State, s.Attempts)
		}
		close(ops.hold)
		synctest.Wait()
		if _, ok := st.Actual().Get("/p/other.sock"); !ok {
			s, _ := st.StatusOf("/p/other.sock")
			t.Fatalf("not registered after the slow type released its slots: %+v", s)
		}
	})
}

// An operation that says it waits outside the daemon (typeslots.Waiting: a forwarded plugin
// waiting for the kubelet's verdict) stops counting against MaxConcurrent at once, without
// waiting to stall: the next plugin registers while it waits. MaxInFlight still bounds them.
func TestWaitingOperationLeavesRoom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, reconciler.Config{MaxConcurrent: 1, MaxInFlight: 3, StalledAfter: time.Hour}).start()
		var releases []func()
		for i := range 3 {
			p := fmt.Sprintf("/p/fwd%d.sock", i)
			e.ops.Waits(p)
			releases = append(releases, e.ops.Block(p))
			e.add(p, uint64(i+1))
		}
		synctest.Wait()
		if n := e.ops.InFlight(); n != 3 {
			t.Fatalf("%d operations in flight, want all 3 (each waits outside the daemon)", n)
		}
		e.add("/p/hung.sock", 9) // a plugin that does not say it waits: over MaxInFlight, queued
		releases = append(releases, e.ops.Block("/p/hung.sock"))
		synctest.Wait()
		if n := e.ops.InFlight(); n != 3 {
			t.Fatalf("%d operations in flight, want maxInFlight 3", n)
		}
		for _, release := range releases {
			release()
		}
		synctest.Wait()
		if e.actual.Len() != 4 {
			t.Fatalf("%d registered, want 4", e.actual.Len())
		}
	})
}
