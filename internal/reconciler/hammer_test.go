package reconciler_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/reconciler"
	"github.com/wasmhost/wasmhost/internal/reconciler/reconcilertest"
	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/state"
	"github.com/wasmhost/wasmhost/internal/testwait"
)

// waitFor waits until cond holds, or fails the test after d (testwait.UntilWithin).
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testwait.UntilWithin(t, d, what, cond)
}

// TestHammer changes the desired state, failures and handlers from many goroutines at once,
// with real time, then checks that the reconciler converges and never ran two operations of one
// socket at once. Run it with -race.
func TestHammer(t *testing.T) {
	const (
		paths      = 40
		workers    = 8
		iterations = 2000
		maxOps     = 8
	)
	desired := state.NewDesired()
	actual := state.NewActual()
	registry := registration.NewRegistry()
	h := reconcilertest.NewHandler()
	registry.Set(csi, h)
	registry.Set(dra, h)
	ops := reconcilertest.NewOperations(actual, registry)
	name := func(i int) string { return fmt.Sprintf("/p/h%02d.sock", i) }
	for i := 1; i < paths; i += 2 {
		ops.SetInfo(name(i), dra, fmt.Sprintf("h%02d", i))
	}
	var statusCalls atomic.Int64
	r := reconciler.New(desired, actual, registry, ops, reconciler.Config{
		MaxConcurrent:  maxOps,
		InitialBackoff: time.Millisecond,
		MaxBackoff:     5 * time.Millisecond,
		Status:         counting{Store: state.New(), n: &statusCalls},
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	var ino atomic.Uint64
	var wg sync.WaitGroup
	stopReading := make(chan struct{})
	var readers sync.WaitGroup
	readers.Go(func() {
		for {
			select {
			case <-stopReading:
				return
			default:
			}
			_ = r.Status()
			_ = r.Counters()
		}
	})
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			for range iterations {
				runtime.Gosched() // let the reconciler interleave with the changes
				p := name(rng.IntN(paths))
				switch rng.IntN(10) {
				case 0, 1, 2, 3, 4, 5:
					desired.Upsert(state.Socket{Path: p, ID: state.Identity{Ino: ino.Add(1)}})
				case 6, 7:
					desired.Remove(p)
				case 8:
					if rng.IntN(2) == 0 {
						ops.Fail(p, registration.ErrUnreachable)
					} else {
						ops.Fail(p, nil)
					}
				case 9:
					if rng.IntN(2) == 0 {
						registry.Remove(dra)
					} else {
						registry.Set(dra, h)
					}
				}
			}
		})
	}
	wg.Wait()
	registry.Set(dra, h)
	for i := range paths {
		ops.Fail(name(i), nil)
	}

	converged := func() bool {
		want := desired.List()
		got := actual.List()
		if len(want) != len(got) {
			return false
		}
		for i := range want {
			if want[i].Path != got[i].Socket || want[i].ID != got[i].ID {
				return false
			}
		}
		st := r.Status()
		if len(st) != len(want) {
			return false
		}
		for _, s := range st {
			if s.State != reconciler.StateRegistered {
				return false
			}
		}
		return true
	}
	waitFor(t, 20*time.Second, "the actual state did not converge on the desired state", converged)
	close(stopReading)
	readers.Wait()

	var wantSockets []string
	for _, s := range desired.List() {
		wantSockets = append(wantSockets, s.Path)
	}
	if got := h.Registered(); !slices.Equal(got, wantSockets) {
		t.Errorf("handler holds %v, want %v", got, wantSockets)
	}
	perPath, total := ops.MaxInFlight()
	if perPath != 1 {
		t.Errorf("%d operations of one socket ran at once", perPath)
	}
	if total > maxOps {
		t.Errorf("%d operations ran at once, bound %d", total, maxOps)
	}
	t.Logf("%d operations, %d status changes, counters %+v", len(ops.Calls()), statusCalls.Load(), r.Counters())
}

// noopOps registers at once, with no handler call.
type noopOps struct{ actual *state.Actual }

func (o noopOps) Register(_ context.Context, s state.Socket) error {
	o.actual.Add(state.Plugin{Socket: s.Path, ID: s.ID, Type: csi, Name: s.Path, Endpoint: s.Path})
	return nil
}

func (o noopOps) Deregister(_ context.Context, p state.Plugin) error {
	o.actual.Remove(p.Socket)
	return nil
}

// BenchmarkRegister1000Sockets measures the time from 1,000 sockets appearing at once in the
// desired state to all of them in the actual state, with operations that cost nothing: the
// reconciler's own overhead. (The kubelet takes 1.43 s for this with fake plugins.)
func BenchmarkRegister1000Sockets(b *testing.B) {
	const n = 1000
	sockets := make([]state.Socket, n)
	for i := range sockets {
		sockets[i] = state.Socket{Path: fmt.Sprintf("/var/lib/kubelet/plugins_registry/p%04d-reg.sock", i), ID: state.Identity{Ino: uint64(i + 1)}}
	}
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		desired := state.NewDesired()
		actual := state.NewActual()
		registry := registration.NewRegistry()
		registry.Set(csi, reconcilertest.NewHandler())
		r := reconciler.New(desired, actual, registry, noopOps{actual}, reconciler.Config{})
		ctx, cancel := context.WithCancel(b.Context())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		b.StartTimer()

		start := time.Now()
		for _, s := range sockets {
			desired.Upsert(s)
		}
		for actual.Len() < n {
			<-actual.Changed()
		}
		total += time.Since(start)

		b.StopTimer()
		cancel()
		<-done
	}
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/1000sockets")
}

// counting is a state store that counts the statuses written into it.
type counting struct {
	*state.Store
	n *atomic.Int64
}

func (c counting) SetStatus(s state.Status) {
	c.n.Add(1)
	c.Store.SetStatus(s)
}
