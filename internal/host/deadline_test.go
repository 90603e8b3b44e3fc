package host

import (
	"sync/atomic"
	"testing"
	"time"
)

// The deadline thread fires what is due, in order, not what was cancelled, and stops without
// firing what is not due yet.
func TestDeadlineThread(t *testing.T) {
	ds, err := startDeadlines()
	if err != nil {
		t.Fatal(err)
	}
	var order []int
	fired := make(chan int, 3)
	now := time.Now()
	cancelLate := ds.at(now.Add(time.Hour), func() { t.Error("a deadline an hour away fired") })
	c2 := ds.at(now.Add(20*time.Millisecond), func() { fired <- 2 })
	c1 := ds.at(now.Add(10*time.Millisecond), func() { fired <- 1 })
	var cancelled atomic.Bool
	c3 := ds.at(now.Add(15*time.Millisecond), func() { cancelled.Store(true) })
	if c3() {
		t.Error("cancel of a deadline not yet due says it fired")
	}
	for range 2 {
		select {
		case n := <-fired:
			order = append(order, n)
		case <-time.After(10 * time.Second):
			t.Fatalf("deadlines did not fire (fired so far: %v)", order)
		}
	}
	if order[0] != 1 || order[1] != 2 {
		t.Errorf("fired in order %v, want [1 2]", order)
	}
	if !c1() || !c2() {
		t.Error("cancel of a deadline that fired says it did not")
	}
	if cancelled.Load() {
		t.Error("a cancelled deadline fired")
	}
	ds.stop()
	if cancelLate() {
		t.Error("a deadline not due when the thread stopped says it fired")
	}
}

// A looping call is stopped by the deadline thread: the call fails as a timeout, and the
// module serves the next call.
func TestDeadlineThreadStopsLoop(t *testing.T) {
	h, _ := newTestHost(t, Config{CallTimeout: 50 * time.Millisecond, PoolSize: 1})
	m := mustLoad(t, h, "loop")
	err := m.ValidatePlugin(t.Context(), info("loop.example", "p"))
	errContains(t, err, nil, "timed out after 50ms")
	if h.deadlineThread() == nil {
		t.Fatal("no deadline thread")
	}
	err = m.ValidatePlugin(t.Context(), info("loop.example", "p"))
	errContains(t, err, nil, "timed out after 50ms")
}
