//go:build !wasip1

package guesttest

import (
	"testing"

	"github.com/wasmhost/wasmhost/abi/guest"
)

// Fake returns the SDK's in-memory host (guest.Fake), empty, and empties it again when the test
// ends, so that a handler's logic can be tested natively with go test: its Validate, Register
// and Deregister make the daemon's calls to the handler given to guest.Handle. There is one fake
// per process: tests that use it must not run in parallel.
func Fake(tb testing.TB) *guest.FakeHost {
	tb.Helper()
	f := guest.Fake()
	f.Reset()
	tb.Cleanup(f.Reset)
	return f
}
