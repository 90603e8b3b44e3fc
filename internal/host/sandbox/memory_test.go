package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/host/sandbox/sandboxtest"
	"github.com/wasmhost/wasmhost/internal/limits"
	"github.com/wasmhost/wasmhost/internal/testwait"
)

// rss returns the resident set of the process, in bytes (/proc/self/statm's second field).
func rss(t testing.TB) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skipf("no /proc/self/statm: %v", err)
	}
	f := bytes.Fields(b)
	pages, err := strconv.ParseInt(string(f[1]), 10, 64)
	if err != nil {
		t.Fatalf("/proc/self/statm %q: %v", b, err)
	}
	return pages * int64(os.Getpagesize())
}

// TestInstanceMemoryHandedBack (issue 27): 16 instances of a handler that fills 64 MiB each
// (testdata/hog.wat), over a ceiling of 480 MiB of idle instances: once the calls return, the
// instances over the ceiling are closed and the process's resident memory is back under the
// ceiling, over what it held before, within seconds; 20 times over, each with a module of its
// own, whose close hands the memory of the instances left back too. The trim leaves at most 7
// instances of 64 MiB (448 MiB): the 32 MiB left under the ceiling are for what the process
// itself grows by meanwhile (its heap, goroutine stacks).
func TestInstanceMemoryHandedBack(t *testing.T) {
	const (
		instances = 16
		memLimit  = 64 << 20
		ceiling   = 480 << 20
		runs      = 20
		within    = 10 * time.Second // "within a few seconds", with room for a loaded machine
	)
	h, lg := newTestSandbox(t, Config{MemoryLimit: memLimit, PoolSize: instances, CallTimeout: time.Minute,
		Limits: limits.Handler{InstanceMemory: ceiling, CallCPU: limits.Duration(time.Minute)}})
	for run := range runs {
		// What the process holds with no instance alive: the last run's module is closed.
		base := rss(t)
		m := mustLoad(t, h, "hog")
		var wg sync.WaitGroup
		for i := range instances {
			wg.Go(func() {
				if _, err := m.RegisterPlugin(context.Background(), sandboxtest.Info("hog.example", fmt.Sprint(i))); err != nil {
					t.Errorf("run %d: register: %v", run, err)
				}
			})
		}
		wg.Wait()
		after, closed := rss(t), lg.Count("idle handler instance closed")
		t0 := time.Now()
		testwait.UntilWithin(t, within, fmt.Sprintf("run %d: resident memory back under %d MiB (ceiling) + %d MiB (before), from %d MiB",
			run, ceiling>>20, base>>20, after>>20), func() bool { return rss(t) <= base+ceiling })
		t.Logf("run %d: %d instances closed in all, %d live; resident %d MiB before, %d MiB after the calls, under %d MiB after %v",
			run, closed, m.Instances(), base>>20, after>>20, (base+ceiling)>>20, time.Since(t0).Round(time.Millisecond))
		if err := m.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		testwait.UntilWithin(t, within, fmt.Sprintf("run %d: the memory of the closed module's instances handed back", run),
			func() bool { return rss(t) < base+memLimit })
	}
}

// TestCloseUnderACallWritingMemory: a module closed by force while a call writes its memory
// (hog.wat's deregister, without end) ends the call; the memory is unmapped once the call has
// left it, not under it (which would crash the process).
func TestCloseUnderACallWritingMemory(t *testing.T) {
	h, _ := newTestSandbox(t, Config{CallTimeout: time.Minute, Limits: limits.Handler{CallCPU: limits.Duration(time.Minute)}})
	m := mustLoad(t, h, "hog")
	done := make(chan error)
	go func() { done <- m.DeRegisterPlugin(context.Background(), sandboxtest.Info("hog.example", "p")) }()
	testwait.Until(t, "the call to start", func() bool { m.mu.Lock(); defer m.mu.Unlock(); return m.inflight == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no grace: the runtime is closed under the call
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	sandboxtest.ErrContains(t, <-done, ErrRetired, "closed during the call")
}

// TestLinearMemory: a linear memory grows in place up to its maximum, and freed while guest
// code runs on it, it stays mapped until the last user leaves.
func TestLinearMemory(t *testing.T) {
	lm := newLinearMemory(4 << 16)
	if lm.res == nil {
		t.Skip("no address space could be reserved")
	}
	a := lm.Reallocate(1 << 16)
	a[len(a)-1] = 1
	b := lm.Reallocate(3 << 16)
	if len(b) != 3<<16 || &a[0] != &b[0] || b[1<<16-1] != 1 || b[len(b)-1] != 0 {
		t.Fatalf("grown to %d bytes, moved %v", len(b), &a[0] != &b[0])
	}
	if lm.Reallocate(5<<16) != nil {
		t.Error("grown past its maximum")
	}
	lm.enter() // a call; the instantiation's user is still in
	lm.leave()
	lm.Free()
	b[0] = 1 // the instantiation has not left: still mapped
	if lm.res == nil {
		t.Fatal("unmapped under a user")
	}
	lm.leave()
	if lm.res != nil {
		t.Error("still mapped after the last user left a freed memory")
	}
	if lm.Reallocate(1<<16) != nil {
		t.Error("a freed memory grew again")
	}
}
