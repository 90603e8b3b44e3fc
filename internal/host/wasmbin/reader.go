package wasmbin

import "errors"

// The reader every pass of this package reads a module with: a cursor over bytes, each method
// reading one thing of the binary format and reporting, with ok, whether the bytes held it.
// Nothing here allocates but name. In the order a module's bytes meet them: the header, the
// numbers (LEB128), names, value types and limits (types, imports, tables, memories), constant
// expressions (globals, segments), and the instructions of code.

// Header is how every binary module of the format's version 1 starts.
var Header = []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}

// ErrNotWasm: the bytes do not start with Header.
var ErrNotWasm = errors.New("not a WebAssembly binary module (bad magic number or version)")

// reader reads b from its start; every method consumes what it reads.
type reader struct{ b []byte }

// byte reads one byte.
func (r *reader) byte() (byte, bool) {
	if len(r.b) == 0 {
		return 0, false
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c, true
}

// skip reads n bytes and drops them.
func (r *reader) skip(n int) bool {
	if len(r.b) < n {
		return false
	}
	r.b = r.b[n:]
	return true
}

// uleb reads an unsigned LEB128 number of at most bits bits.
func (r *reader) uleb(bits uint) (uint64, bool) {
	var v uint64
	for shift := uint(0); shift < bits+7; shift += 7 {
		c, ok := r.byte()
		if !ok {
			return 0, false
		}
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, true
		}
	}
	return 0, false
}

// sleb skips a signed LEB128 number (s32, s33, s64: at most 10 bytes).
func (r *reader) sleb() bool {
	for range 10 {
		c, ok := r.byte()
		if !ok {
			return false
		}
		if c&0x80 == 0 {
			return true
		}
	}
	return false
}

// sleb32 reads a signed LEB128 of at most 32 bits.
func (r *reader) sleb32() (int32, bool) {
	var v int64
	var shift uint
	for i := 0; i < 5; i++ {
		c, ok := r.byte()
		if !ok {
			return 0, false
		}
		v |= int64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			if v < -1<<31 || v > 1<<31-1 {
				return 0, false
			}
			return int32(v), true
		}
	}
	return 0, false
}

// name reads a name: its length, then its bytes.
func (r *reader) name() (string, bool) {
	n, ok := r.uleb(32)
	if !ok || n > uint64(len(r.b)) {
		return "", false
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s, true
}

// valType skips a value type: one byte, or a reference type with a heap type.
func (r *reader) valType() bool {
	c, ok := r.byte()
	if !ok {
		return false
	}
	if c == 0x63 || c == 0x64 { // (ref null ht), (ref ht)
		return r.sleb()
	}
	return true
}

// tableInfo is one table's limits.
type tableInfo struct {
	min, max uint64
	hasMax   bool
}

// limits reads table or memory limits.
func (r *reader) limits() (tableInfo, bool) {
	var t tableInfo
	flag, ok := r.byte()
	if !ok || flag > 7 {
		return t, false
	}
	bits := uint(32)
	if flag&4 != 0 {
		bits = 64
	}
	if t.min, ok = r.uleb(bits); !ok {
		return t, false
	}
	if flag&1 != 0 {
		t.hasMax = true
		if t.max, ok = r.uleb(bits); !ok {
			return t, false
		}
	}
	return t, true
}

// limitsMin reads memory or table limits and returns the minimum.
func (r *reader) limitsMin() (uint64, bool) {
	flag, ok := r.byte()
	if !ok || flag > 7 {
		return 0, false
	}
	bits := uint(32)
	if flag&4 != 0 { // 64-bit memory
		bits = 64
	}
	min, ok := r.uleb(bits)
	if !ok {
		return 0, false
	}
	if flag&1 != 0 {
		if _, ok = r.uleb(bits); !ok {
			return 0, false
		}
	}
	return min, true
}

// constExpr skips a constant expression up to its end.
func (r *reader) constExpr() bool {
	for {
		op, _, ok := r.constInstr()
		if !ok || op == 0x0b {
			return ok
		}
	}
}

// constInstr reads one instruction of a constant expression and returns its opcode (0x0b at the
// expression's end) and, for global.get and ref.func, its index.
func (r *reader) constInstr() (op byte, idx uint64, ok bool) {
	if op, ok = r.byte(); !ok {
		return 0, 0, false
	}
	switch {
	case op == 0x0b:
	case op == 0x41 || op == 0x42 || op == 0xd0:
		ok = r.sleb()
	case op == 0x23 || op == 0xd2:
		idx, ok = r.uleb(32)
	case op == 0x43:
		ok = r.skip(4)
	case op == 0x44:
		ok = r.skip(8)
	case op == 0xfd:
		var sub uint64
		if sub, ok = r.uleb(32); ok && sub == 0x0c {
			ok = r.skip(16)
		} else {
			ok = false
		}
	case op >= 0x6a && op <= 0x6c, op >= 0x7c && op <= 0x7e: // extended constant expressions
	default:
		ok = false
	}
	return op, idx, ok
}

// instr reads one instruction with its immediates and returns its opcode and, after the 0xFC
// prefix, its sub-opcode. known is false for an opcode the walk does not know (nothing is read
// past it); ok is false when the immediates are cut short.
func (r *reader) instr() (op byte, sub uint64, known, ok bool) {
	op, ok = r.byte()
	if !ok {
		return 0, 0, true, false
	}
	switch {
	case op == 0x02 || op == 0x03 || op == 0x04 || op == 0x06 || op == 0x1f: // block loop if try try_table
		ok = r.sleb()
		if op == 0x1f { // try_table's catch clauses
			var k uint64
			if k, ok = r.uleb(32); ok {
				for j := uint64(0); ok && j < k; j++ {
					var kind byte
					if kind, ok = r.byte(); ok && kind <= 1 {
						_, ok = r.uleb(32) // tag
					}
					if ok {
						_, ok = r.uleb(32) // label
					}
				}
			}
		}
	case op == 0x00 || op == 0x01 || op == 0x05 || op == 0x0a || op == 0x0b || op == 0x0f || op == 0x19 ||
		op == 0x1a || op == 0x1b || op == 0xd1 || op == 0xd3 || (op >= 0x45 && op <= 0xc4):
		// no immediate
	case op == 0x07 || op == 0x08 || op == 0x09 || op == 0x0c || op == 0x0d || op == 0x10 || op == 0x12 ||
		op == 0x14 || op == 0x15 || op == 0x18 || op == 0xd2 || op == 0xd4 || op == 0xd5 ||
		(op >= 0x20 && op <= 0x26) || op == 0x3f || op == 0x40:
		_, ok = r.uleb(32)
	case op == 0x11 || op == 0x13: // call_indirect: type, table
		if _, ok = r.uleb(32); ok {
			_, ok = r.uleb(32)
		}
	case op == 0x0e: // br_table
		var k uint64
		if k, ok = r.uleb(32); ok {
			for j := uint64(0); ok && j <= k; j++ {
				_, ok = r.uleb(32)
			}
		}
	case op == 0x1c: // select t*
		var k uint64
		if k, ok = r.uleb(32); ok {
			for j := uint64(0); ok && j < k; j++ {
				ok = r.valType()
			}
		}
	case op >= 0x28 && op <= 0x3e:
		ok = r.memarg()
	case op == 0x41 || op == 0x42 || op == 0xd0:
		ok = r.sleb()
	case op == 0x43:
		ok = r.skip(4)
	case op == 0x44:
		ok = r.skip(8)
	case op == 0xfc:
		if sub, ok = r.uleb(32); ok {
			ok = r.prefixFC(sub)
		}
	case op == 0xfd:
		ok = r.prefixFD()
	case op == 0xfe:
		ok = r.prefixFE()
	default:
		return op, 0, false, false
	}
	return op, sub, true, ok
}

// memarg skips a memory argument: alignment (with bit 6 meaning a memory index follows) and
// offset.
func (r *reader) memarg() bool {
	align, ok := r.uleb(32)
	if !ok {
		return false
	}
	if align&0x40 != 0 {
		if _, ok = r.uleb(32); !ok {
			return false
		}
	}
	_, ok = r.uleb(64)
	return ok
}

// prefixFC reads the immediates of an instruction after the 0xFC prefix (saturating
// truncations, bulk memory and table instructions), sub its sub-opcode.
func (r *reader) prefixFC(sub uint64) bool {
	var ok bool
	switch {
	case sub <= 7: // saturating truncations
		return true
	case sub == 8 || sub == 10 || sub == 12 || sub == 14: // two indices
		if _, ok = r.uleb(32); !ok {
			return false
		}
		_, ok = r.uleb(32)
		return ok
	case sub <= 17:
		_, ok = r.uleb(32)
		return ok
	}
	return false
}

// prefixFD reads a SIMD instruction after the 0xFD prefix: its sub-opcode and immediates.
func (r *reader) prefixFD() bool {
	sub, ok := r.uleb(32)
	if !ok {
		return false
	}
	switch {
	case sub <= 0x0b || sub == 0x5c || sub == 0x5d: // loads and stores
		return r.memarg()
	case sub == 0x0c || sub == 0x0d: // v128.const, i8x16.shuffle
		return r.skip(16)
	case sub >= 0x15 && sub <= 0x22: // extract and replace lane
		return r.skip(1)
	case sub >= 0x54 && sub <= 0x5b: // load and store lane
		return r.memarg() && r.skip(1)
	case sub <= 0x113:
		return true
	}
	return false
}

// prefixFE reads an atomic instruction after the 0xFE prefix: its sub-opcode and immediates.
func (r *reader) prefixFE() bool {
	sub, ok := r.uleb(32)
	if !ok {
		return false
	}
	if sub == 0x03 { // atomic.fence
		return r.skip(1)
	}
	if sub <= 0x02 || (sub >= 0x10 && sub <= 0x4e) {
		return r.memarg()
	}
	return false
}
