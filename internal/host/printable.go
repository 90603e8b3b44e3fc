package host

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// printable makes text that a guest wrote (a log line, a reason) safe to show: invalid UTF-8
// becomes U+FFFD, and control characters other than tab (ESC, carriage return, backspace,
// the C1 controls, bidirectional overrides) are written as escapes (\x1b, \u202e), so that a
// handler cannot rewrite an operator's terminal or hide text in the daemon's log.
func printable(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || (r != '\t' && (unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r))) { // RuneError: invalid, or a U+FFFD of its own
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		switch {
		case r == '\t' || (!unicode.IsControl(r) && !unicode.Is(unicode.Bidi_Control, r)):
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}
