package sandbox

import "github.com/wasmhost/wasmhost/internal/safetext"

// printable makes text that a guest wrote (a log line, a reason) safe to show, by the daemon's
// one policy for untrusted text (package safetext).
func printable(s string) string { return safetext.Show(s) }
