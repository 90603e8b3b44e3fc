package wasmbin

import "bytes"

// Info is what the host learns from a module's bytes before compiling it, to refuse it
// with a precise message instead of the compiler's.
type Info struct {
	// MemMin is the largest minimum, in pages, of the memories the module defines.
	MemMin uint64
	// Imports are the module's imports, when the import section could be read; nil otherwise
	// (the compiler then reports what is wrong).
	Imports []Import
}

// Import is one import of a module.
type Import struct {
	Module, Name string
	Kind         byte   // 0 func, 1 table, 2 memory, 3 global, 4 tag
	Type         uint32 // a function's type index
}

var importKinds = [...]string{"function", "table", "memory", "global", "tag"}

// KindName names the kind of the import.
func (i Import) KindName() string {
	if int(i.Kind) < len(importKinds) {
		return importKinds[i.Kind]
	}
	return "unknown"
}

// Scan reads the header, the import section and the memory section of a binary module.
// Only a bad header is an error: for anything else it cannot read it returns what it has and
// leaves the diagnosis to the compiler.
func Scan(b []byte) (Info, error) {
	var info Info
	if len(b) < len(Header) || !bytes.Equal(b[:len(Header)], Header) {
		return info, ErrNotWasm
	}
	r := reader{b: b[len(Header):]}
	for len(r.b) > 0 {
		id, ok := r.byte()
		if !ok {
			return info, nil
		}
		size, ok := r.uleb(32)
		if !ok || size > uint64(len(r.b)) {
			return info, nil
		}
		sec := reader{b: r.b[:size]}
		r.b = r.b[size:]
		switch id {
		case 2:
			info.Imports = sec.imports()
		case 5:
			n, ok := sec.uleb(32)
			for i := uint64(0); ok && i < n; i++ {
				var lim uint64
				lim, ok = sec.limitsMin()
				if ok && lim > info.MemMin {
					info.MemMin = lim
				}
			}
		}
	}
	return info, nil
}

func (r *reader) imports() []Import {
	n, ok := r.uleb(32)
	if !ok {
		return nil
	}
	out := make([]Import, 0, min(n, 1024))
	for i := uint64(0); i < n; i++ {
		var imp Import
		if imp.Module, ok = r.name(); !ok {
			return nil
		}
		if imp.Name, ok = r.name(); !ok {
			return nil
		}
		if imp.Kind, ok = r.byte(); !ok {
			return nil
		}
		switch imp.Kind {
		case 0: // type index
			var t uint64
			t, ok = r.uleb(32)
			imp.Type = uint32(t)
		case 1: // reference type, limits
			if _, ok = r.byte(); ok {
				_, ok = r.limitsMin()
			}
		case 2:
			_, ok = r.limitsMin()
		case 3: // value type, mutability
			if _, ok = r.byte(); ok {
				_, ok = r.byte()
			}
		case 4: // attribute, type index
			if _, ok = r.byte(); ok {
				_, ok = r.uleb(32)
			}
		default:
			return nil
		}
		if !ok {
			return nil
		}
		out = append(out, imp)
	}
	return out
}
