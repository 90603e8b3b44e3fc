package main

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// safeText makes s safe to print on a terminal: control characters (a newline, an escape
// sequence that clears the screen or sets the window title, a tab that would shift a table's
// columns) and the bidirectional controls that reorder what is shown are written as escapes
// (\n, \x1b, \u202e), and bytes that are not UTF-8 as \xNN. Names, reasons and published
// values come from plugins and handlers: they are shown, never obeyed. JSON and YAML output
// are left exact (their encoders escape what they must).
func safeText(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case (r >= 0x80 && r < 0xa0) || isBidi(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func needsEscape(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || isBidi(r) || r == utf8.RuneError {
			return true
		}
	}
	return !utf8.ValidString(s)
}

// isBidi reports whether r is a bidirectional formatting character (the embeddings, overrides
// and isolates, and the marks).
func isBidi(r rune) bool {
	return r == 0x200e || r == 0x200f || r == 0x061c || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}

// safeMessage escapes, with safeText, every string in m (fields, lists, map keys and
// values, nested messages), in place, for printing as text.
func safeMessage(m proto.Message) {
	if m == nil {
		return
	}
	safeReflect(m.ProtoReflect())
}

func safeReflect(m protoreflect.Message) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				if fd.Kind() == protoreflect.StringKind {
					l.Set(i, protoreflect.ValueOfString(safeText(l.Get(i).String())))
				} else if fd.Kind() == protoreflect.MessageKind {
					safeReflect(l.Get(i).Message())
				}
			}
		case fd.IsMap():
			mp := v.Map()
			type kv struct {
				k protoreflect.MapKey
				v protoreflect.Value
			}
			var all []kv
			mp.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
				all = append(all, kv{k, v})
				return true
			})
			for _, e := range all {
				val := e.v
				if fd.MapValue().Kind() == protoreflect.StringKind {
					val = protoreflect.ValueOfString(safeText(val.String()))
				} else if fd.MapValue().Kind() == protoreflect.MessageKind {
					safeReflect(val.Message())
				}
				key := e.k
				if fd.MapKey().Kind() == protoreflect.StringKind {
					if s := safeText(key.String()); s != key.String() {
						mp.Clear(key)
						key = protoreflect.ValueOfString(s).MapKey()
					}
				}
				mp.Set(key, val)
			}
		case fd.Kind() == protoreflect.StringKind:
			m.Set(fd, protoreflect.ValueOfString(safeText(v.String())))
		case fd.Kind() == protoreflect.MessageKind:
			safeReflect(v.Message())
		}
		return true
	})
}
