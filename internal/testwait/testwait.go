// Package testwait is how the daemon's tests wait: on an outcome (a condition that holds, no
// goroutine left behind), checked often, with a bound far beyond what the outcome takes on a
// loaded machine, so that a slow run is slow and never a failure. Nothing waits by sleeping on
// a product timeout.
//
// It is imported by tests only.
package testwait

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Bound is how long Until and NoLeaks wait before they fail the test: minutes, since the
// outcome waited for takes milliseconds when the machine is idle and a CI machine may be
// anything but.
const Bound = 2 * time.Minute

// Until waits until cond holds and fails tb, naming what it waited for, if it has not within
// Bound. cond is checked at once, then every 2ms.
func Until(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	UntilWithin(tb, Bound, what, cond)
}

// UntilWithin is Until with a bound of d, for a test whose subject is how long something takes.
func UntilWithin(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("waited %v for %s", d, what)
		}
		<-tick.C
	}
}

// NoLeaks waits until no goroutine is left but those that opts ignore (goleak.IgnoreCurrent()
// taken before the test started what it stops), and fails tb with their stacks if some are
// still running after Bound. goleak's own retries give up within a second; a loaded machine
// may take longer to let an exiting goroutine run.
func NoLeaks(tb testing.TB, opts ...goleak.Option) {
	tb.Helper()
	deadline := time.Now().Add(Bound)
	for {
		err := goleak.Find(opts...)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Errorf("goroutines left behind after %v:\n%v", Bound, err)
			return
		}
	}
}
