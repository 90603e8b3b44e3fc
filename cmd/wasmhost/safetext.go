package main

import "github.com/wasmhost/wasmhost/internal/safetext"

// safeText makes s safe to print on a terminal, by the daemon's one policy for untrusted text
// (package safetext): control characters (a newline, an escape sequence that clears the screen
// or sets the window title, a tab that would shift a table's columns), the bidirectional
// controls that reorder what is shown and bytes that are not UTF-8 are written as escapes.
// Names, reasons and published values come from plugins and handlers: they are shown, never
// obeyed. JSON and YAML output are left exact (their encoders escape what they must).
func safeText(s string) string { return safetext.Show(s) }
