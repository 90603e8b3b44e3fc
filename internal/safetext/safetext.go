// Package safetext is the daemon's one policy for text it did not write: plugin names and
// socket paths, handler reasons and log lines, published values. Such text is shown, never
// obeyed: it must not move an operator's cursor, clear a terminal, set a window title, reorder
// what is shown around it, split a log line or a table row, or fail to encode.
//
// The rule, the same wherever the text goes:
//
//   - Text with nothing to escape (valid UTF-8 with no control or bidirectional formatting
//     character) is kept exactly as it is, backslashes included.
//   - Otherwise the whole string is escaped, as a Go string literal would be: a backslash is
//     written \\, newline, carriage return and tab \n, \r and \t, the other C0 controls and
//     DEL \xNN, the C1 controls and the bidirectional controls (the embeddings, overrides,
//     isolates and marks that reorder text) \uNNNN, and each byte that is not UTF-8 \xNN (NN
//     at least 80: never a character of its own). A U+FFFD the text carried is kept.
//
// So escaped text reads back to the original, unambiguously (strconv.Unquote does it), and
// escaping is idempotent: text escaped once has nothing left to escape, so a layer that
// escapes what another already escaped changes nothing (the admin API escapes for protobuf,
// the CLI for the terminal).
//
// This package is part of the daemon, not a stable API.
package safetext

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Show returns s as it may be shown to an operator: on a terminal, in a table, in a log line.
func Show(s string) string {
	if !needsShowEscape(s) {
		return s
	}
	return escape(s)
}

// UTF8 returns s as a carrier that must hold valid UTF-8 needs it (a protobuf string, which
// cannot be sent otherwise): valid text exactly as it is, control characters included (whoever
// shows it applies Show, which then changes nothing more), and text that is not UTF-8 escaped
// as Show escapes it.
func UTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return escape(s)
}

// UTF8All applies UTF8 to each of ss, returning ss itself when none changes.
func UTF8All(ss []string) []string {
	for i, s := range ss {
		if !utf8.ValidString(s) {
			out := make([]string, len(ss))
			copy(out, ss[:i])
			for j := i; j < len(ss); j++ {
				out[j] = UTF8(ss[j])
			}
			return out
		}
	}
	return ss
}

// FirstUnsafe returns what Show would escape first in s, as text for a message: a byte that is
// not UTF-8 ("byte 0xff"), or a control or bidirectional formatting character ("U+202E"); ok
// is false when s has nothing to escape. A value refused for holding such text (a published
// attribute, say) is refused by the rule Show applies, not one of its own.
func FirstUnsafe(s string) (what string, ok bool) {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			return fmt.Sprintf("byte 0x%02x, not UTF-8", s[i]), true
		}
		if unsafe(r) {
			return fmt.Sprintf("%U", r), true
		}
		i += n
	}
	return "", false
}

// unsafe reports whether r may not be shown as it is: a control character (C0, DEL, C1) or a
// bidirectional formatting character.
func unsafe(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r)
}

func needsShowEscape(s string) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return true
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || unsafe(r) {
			return true
		}
		i += n
	}
	return false
}

const hex = "0123456789abcdef"

func escape(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteString(`\x`)
			b.WriteByte(hex[s[i]>>4])
			b.WriteByte(hex[s[i]&0xf])
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x80 && unsafe(r):
			b.WriteString(`\x`)
			b.WriteByte(hex[r>>4])
			b.WriteByte(hex[r&0xf])
		case unsafe(r):
			b.WriteString(`\u`)
			for shift := 12; shift >= 0; shift -= 4 {
				b.WriteByte(hex[(r>>shift)&0xf])
			}
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// Cut bounds s to about n bytes, for text that untrusted input fills (an error a plugin sent, a
// trap's stack trace): s itself when it is at most n bytes long, otherwise its start, cut on a
// rune boundary, and how many bytes were left out, "… (1234 more bytes)", the whole at most n
// bytes (n ≥ 40; a smaller n keeps nothing but the count).
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	keep := max(n-40, 0) // room for the count
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return fmt.Sprintf("%s… (%d more bytes)", s[:keep], len(s)-keep)
}
