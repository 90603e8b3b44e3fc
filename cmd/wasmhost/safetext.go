package main

import (
	"github.com/wasmhost/wasmhost/internal/safetext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// safeText makes s safe to print on a terminal, by the daemon's one policy for untrusted text
// (package safetext): control characters (a newline, an escape sequence that clears the screen
// or sets the window title, a tab that would shift a table's columns), the bidirectional
// controls that reorder what is shown and bytes that are not UTF-8 are written as escapes.
// Names, reasons and published values come from plugins and handlers: they are shown, never
// obeyed. JSON and YAML output are left exact (their encoders escape what they must).
func safeText(s string) string { return safetext.Show(s) }

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
