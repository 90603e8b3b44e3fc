package sandboxtest

import "github.com/wasmhost/wasmhost/internal/host/wasmbin"

// BombModule builds a module whose funcs functions each nest depth blocks (op 0x02), loops
// (0x03) or ifs (0x04): the compile bomb of issue 9 at depth 100,000. It is not a handler (no
// exports): what matters is what compiling it costs.
func BombModule(depth, funcs int, op byte) []byte {
	b := append([]byte(nil), wasmbin.Header...)
	b = section(b, 1, []byte{1, 0x60, 0, 0}) // one type: () -> ()
	fs := uleb(nil, uint64(funcs))
	for range funcs {
		fs = append(fs, 0)
	}
	b = section(b, 3, fs)
	body := []byte{0} // no locals
	for range depth {
		if op == 0x04 {
			body = append(body, 0x41, 0) // i32.const 0
		}
		body = append(body, op, 0x40)
	}
	for range depth + 1 {
		body = append(body, 0x0b)
	}
	code := uleb(nil, uint64(funcs))
	for range funcs {
		code = append(uleb(code, uint64(len(body))), body...)
	}
	return section(b, 10, code)
}

// ManyEntries builds a module with one function and a section id of n entries: n globals
// (each entry), or for id 9 one passive element segment of n references to the function, or
// for id 0 a name section naming the function n times.
func ManyEntries(id byte, n int, entry []byte) []byte {
	b := append([]byte(nil), wasmbin.Header...)
	b = section(b, 1, []byte{1, 0x60, 0, 0})
	b = section(b, 3, []byte{1, 0})
	var body []byte
	if id == 0 { // a name section naming the function n times
		sub := uleb(nil, uint64(n))
		for range n {
			sub = append(sub, 0, 1, 'x')
		}
		body = append(uleb([]byte{4, 'n', 'a', 'm', 'e', 1}, uint64(len(sub))), sub...)
		b = section(b, 10, []byte{1, 2, 0, 0x0b})
		return section(b, 0, body)
	}
	if id == 9 {
		body = uleb([]byte{1, 1, 0}, uint64(n)) // one segment: passive, funcref, n entries
		body = append(body, make([]byte, n)...)
	} else {
		body = uleb(nil, uint64(n))
		for range n {
			body = append(body, entry...)
		}
	}
	b = section(b, id, body)
	return section(b, 10, []byte{1, 2, 0, 0x0b})
}

// uleb appends v to b in unsigned LEB128.
func uleb(b []byte, v uint64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// section appends the section id with body to b.
func section(b []byte, id byte, body []byte) []byte {
	return append(uleb(append(b, id), uint64(len(body))), body...)
}
