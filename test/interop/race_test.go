//go:build race

package interop

// raceEnabled is true when the tests run with -race; the daemon is then built with -race too.
const raceEnabled = true
