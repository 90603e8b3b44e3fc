// Package guestfmt holds the SDK's helpers that format with package fmt. They are kept out of
// package guest because importing fmt links it, and os and reflect with it, into the module even
// when no function of it is called: about 0.4 MB of a 2 MB module and the compile time that goes
// with it. Import this package if the convenience is worth that.
package guestfmt

import (
	"fmt"

	"github.com/wasmhost/wasmhost/abi/guest"
)

// Logf formats a log line with fmt.Sprintf and writes it with guest.Log.
func Logf(level guest.Level, format string, args ...any) {
	guest.Log(level, fmt.Sprintf(format, args...))
}
