package testwait_test

import (
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/wasmhost/wasmhost/internal/testwait"
)

func TestUntil(t *testing.T) {
	var n atomic.Int32
	testwait.Until(t, "the counter to reach 3", func() bool { return n.Add(1) >= 3 })
	if n.Load() != 3 {
		t.Errorf("cond called %d times, want 3 (no call after it held)", n.Load())
	}
}

// fakeTB records a failure instead of failing.
type fakeTB struct {
	testing.TB
	failed string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = format
	panic(f)
}
func (f *fakeTB) Errorf(format string, args ...any) { f.failed = format }

func TestUntilWithinFails(t *testing.T) {
	f := &fakeTB{TB: t}
	func() {
		defer func() { recover() }()
		testwait.UntilWithin(f, 10*time.Millisecond, "never", func() bool { return false })
	}()
	if f.failed == "" {
		t.Error("UntilWithin did not fail on a condition that never holds")
	}
}

func TestNoLeaks(t *testing.T) {
	before := goleak.IgnoreCurrent()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-stop
	}()
	if err := goleak.Find(before); err == nil {
		t.Fatal("goleak does not see a goroutine started after IgnoreCurrent")
	}
	close(stop)
	testwait.NoLeaks(t, before) // waits for it to exit
	<-done
}
