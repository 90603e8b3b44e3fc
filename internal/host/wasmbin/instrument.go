package wasmbin

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Before it compiles a module, the host rewrites its code so that no guest call can hold the
// daemon, whatever its shape. Two things are added:
//
//   - Ticks. wazero checks for cancellation only at loop headers, and while a goroutine runs
//     compiled guest code the Go runtime cannot preempt it: a call tree with no loop ran past
//     its deadline, and a stop-the-world (every garbage collection has two) waited for it, so
//     one such call froze every goroutine of the daemon. The rewrite puts a tick at the entry
//     of every function, at the head of every loop and at least every tickSpan instructions
//     of straight-line code. A tick takes the instructions up to the next tick off a fuel
//     counter (a global of the host's); when the counter runs out, the tick calls the host's
//     yield function (sandbox.go). That call is the point where the Go runtime may preempt the
//     guest, and where the host checks the call's deadline, its context, its CPU budget and
//     its turn on the CPU. A guest running flat out reaches it about every TickFuel
//     instructions; a normal call, far shorter, rarely does.
//   - The call-stack bound. wazero runs guest calls on a stack of its own, allocated on the Go
//     heap and grown by doubling until it passes 50,000,000 bytes: a function that only calls
//     itself made the host allocate 169 MB per call (measured with wazero v1.12), outside
//     handlers.memoryLimit. Every call site adds the callee's frame to a counter (another
//     global of the host's), traps when it passes handlers.limits.maxCallStack, and takes the
//     frame off when the call returns. A frame is counted as callStackFrame bytes plus 8 per
//     parameter, local and operand stack slot the callee can hold at once (for call_indirect,
//     the largest of the functions of its type).
//
// The yield function is imported from SandboxModule: it comes after the module's own function
// imports, so the index of every function the module defines moves up by one, in the code,
// the exports, the start function, the element segments, the globals' initial values and the
// name section. The globals come after the module's own, so no global index moves. The
// module's own code may not touch what the rewrite adds: an index past the module's own
// globals or functions is refused here, before the rewrite would make it valid.
//
// The rewrite also joins the data segments that can be joined without changing what an
// instantiation writes (mergeData, data.go): the Go linker writes thousands, and wazero keeps
// each in every module and instance.
//
// The rewrite changes the code's byte offsets, so DWARF sections (.debug_*) are dropped from the
// compiled copy: a trap then names the functions (the name section stays) but no source lines.
// The bytes kept, shown and stored as revisions are the file's own.

const (
	// SandboxModule and SandboxYield name the host function the ticks call. A module that
	// imports from SandboxModule itself is refused.
	SandboxModule = "wasmhost_sandbox"
	SandboxYield  = "yield"

	// tickSpan is the most instructions of straight-line code between two ticks.
	tickSpan = 256
	// TickFuel is how many instructions a guest runs between two calls of yield, at most: at
	// the 0.5-2 instructions a nanosecond that compiled guest code runs here, 50-200 µs, so
	// that a stop-the-world never waits long for a guest, while a yield (about a microsecond)
	// costs a looping guest under 1 % of its time. Measured: docs/benchmarks-history.md.
	TickFuel = 100_000
)

// CallStackExport names the call-stack counter, exported so that the host can tell its trap
// from another.
const CallStackExport = "wasmhost_call_stack"

// ErrReservedExport and ErrReservedImport: the module uses a name the rewrite adds.
var (
	ErrReservedExport = fmt.Errorf("exports %s, a name the host reserves", CallStackExport)
	ErrReservedImport = fmt.Errorf("imports from %s, a module name the host reserves", SandboxModule)
)

// sectionOrder is where each known section goes in a module, as the binary format sets it.
var sectionOrder = map[byte]int{1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 13: 6, 6: 7, 7: 8, 8: 9, 9: 10, 12: 11, 10: 12, 11: 13}

// callStackFrame is the part of a frame's estimate that does not depend on the callee.
const callStackFrame = 64

// rewriter holds what the rewrite of one module needs across its sections.
type rewriter struct {
	types        []funcType
	funcTypes    []uint32 // imported functions first, as in the function index space
	imported     uint64   // functions imported by the module itself
	ownGlobals   uint64   // globals imported and defined by the module itself
	counter      uint64   // the call-stack counter's global index (limit > 0)
	fuel         uint64   // the fuel counter's global index
	yield        uint64   // the yield function's index
	limit        uint32   // maxCallStack; 0: not bounded
	frames       []uint64 // by function
	bulk         []bool   // by function: its code has a bulk memory or table instruction
	byType       []uint64 // by type: the largest frame of a function of that type
	yieldTypeIdx uint64
	// importEntries and imports are the import section's count and its entries after it.
	importEntries uint64
	imports       []byte
}

type funcType struct{ params, results int }

// remap returns the index of function f of the module once the yield import is added.
func (rw *rewriter) remap(f uint64) uint64 {
	if f >= rw.imported {
		return f + 1
	}
	return f
}

type section struct {
	id   byte
	body []byte // the section's content, after its size
}

// Instrument returns b rewritten as described above, with the call stack bounded to limit
// bytes (not bounded when limit is 0). A module it cannot read is an error; the compiler
// would refuse it too. It reads the module in three passes, each below in the order it runs:
// the sections (splitSections), what the rewrite needs to know of them (learn), each
// function's frame (measureFrames), then writes the module out (write).
func Instrument(b []byte, limit uint64) ([]byte, error) {
	if limit > 1<<31-1 {
		limit = 1<<31 - 1
	}
	if len(b) < len(Header) {
		return nil, ErrNotWasm
	}
	secs, err := splitSections(b[len(Header):])
	if err != nil {
		return nil, err
	}
	rw := &rewriter{limit: uint32(limit)}
	code, err := rw.learn(secs)
	if err != nil {
		return nil, err
	}
	bodies, err := rw.measureFrames(code)
	if err != nil {
		return nil, err
	}
	return rw.write(secs, bodies)
}

// splitSections cuts a module's bytes after the header into its sections, in file order.
func splitSections(b []byte) ([]section, error) {
	var secs []section
	r := reader{b: b}
	for len(r.b) > 0 {
		id, _ := r.byte()
		size, ok := r.uleb(32)
		if !ok || size > uint64(len(r.b)) {
			return nil, errors.New("a section's size runs past the end of the module")
		}
		secs = append(secs, section{id, r.b[:size]})
		r.b = r.b[size:]
	}
	return secs, nil
}

// learn reads what the rewrite needs of the module's sections: the function types, the
// imports (refusing one from SandboxModule), every function's type, how many globals the module
// has; it places the counters and the yield import after the module's own, and returns the
// code section.
func (rw *rewriter) learn(secs []section) (code []byte, _ error) {
	var globals uint64
	for _, s := range secs {
		sr := reader{b: s.body}
		switch s.id {
		case 1:
			n, ok := sr.uleb(32)
			for i := uint64(0); ok && i < n; i++ {
				var form byte
				if form, ok = sr.byte(); !ok || form != 0x60 {
					return nil, fmt.Errorf("type %d is not a function type", i)
				}
				var ft funcType
				var k uint64
				if k, ok = sr.uleb(32); ok {
					ft.params = int(k)
					for j := uint64(0); ok && j < k; j++ {
						ok = sr.valType()
					}
				}
				if ok {
					k, ok = sr.uleb(32)
					ft.results = int(k)
				}
				for j := uint64(0); ok && j < k; j++ {
					ok = sr.valType()
				}
				rw.types = append(rw.types, ft)
			}
			if !ok {
				return nil, errors.New("the type section cannot be read")
			}
		case 2:
			imps := sr.imports()
			if imps == nil && len(s.body) > 0 {
				return nil, errors.New("the import section cannot be read")
			}
			for _, imp := range imps {
				if imp.Module == SandboxModule {
					return nil, ErrReservedImport
				}
				switch imp.Kind {
				case 0:
					rw.funcTypes = append(rw.funcTypes, imp.Type)
				case 3:
					rw.ownGlobals++
				}
			}
			rw.imported = uint64(len(rw.funcTypes))
			c := reader{b: s.body}
			rw.importEntries, _ = c.uleb(32)
			rw.imports = c.b
		case 3:
			n, ok := sr.uleb(32)
			for i := uint64(0); ok && i < n; i++ {
				var t uint64
				t, ok = sr.uleb(32)
				rw.funcTypes = append(rw.funcTypes, uint32(t))
			}
			if !ok {
				return nil, errors.New("the function section cannot be read")
			}
		case 6:
			n, ok := sr.uleb(32)
			if !ok {
				return nil, errors.New("the global section cannot be read")
			}
			globals = n
		case 10:
			code = s.body
		}
	}
	for i, t := range rw.funcTypes {
		if int(t) >= len(rw.types) {
			return nil, fmt.Errorf("function %d has type %d, which the module does not define", i, t)
		}
	}
	rw.ownGlobals += globals
	rw.counter = rw.ownGlobals
	rw.fuel = rw.ownGlobals
	if rw.limit > 0 {
		rw.fuel++
	}
	rw.yield = rw.imported
	rw.yieldTypeIdx = uint64(len(rw.types))
	return code, nil
}

// measureFrames splits the code section into the functions' bodies and works out each function's
// frame (its parameters, the locals its body declares, and the operand stack it can fill)
// and, by type, the largest frame of a function of that type, for call_indirect.
func (rw *rewriter) measureFrames(code []byte) ([][]byte, error) {
	cr := reader{b: code}
	n, ok := cr.uleb(32)
	if code == nil { // no code section: no function defined
		n, ok = 0, true
	}
	if !ok || n != uint64(len(rw.funcTypes))-rw.imported {
		return nil, errors.New("the code section does not match the function section")
	}
	bodies := make([][]byte, n)
	rw.frames = make([]uint64, len(rw.funcTypes))
	rw.bulk = make([]bool, len(rw.funcTypes))
	for i := range rw.imported {
		rw.frames[i] = callStackFrame
	}
	for i := range bodies {
		size, ok := cr.uleb(32)
		if !ok || size > uint64(len(cr.b)) {
			return nil, fmt.Errorf("the body of function %d runs past the code section", i)
		}
		bodies[i], cr.b = cr.b[:size], cr.b[size:]
		f := rw.imported + uint64(i)
		slots, bulk, err := rw.frameSlots(bodies[i], rw.types[rw.funcTypes[f]])
		rw.bulk[f] = bulk
		if err != nil {
			return nil, fmt.Errorf("function %d: %w", f, err)
		}
		rw.frames[f] = callStackFrame + 8*slots
	}
	rw.byType = make([]uint64, len(rw.types))
	for i := range rw.byType {
		rw.byType[i] = callStackFrame
	}
	for f, t := range rw.funcTypes {
		rw.byType[t] = max(rw.byType[t], rw.frames[f])
	}
	return bodies, nil
}

// frameSlots returns how many values a frame of a function of type ft with body can hold at
// once: its parameters and locals, and at most as many operands as its code can push before
// it pops them. The operand count is an upper bound (an instruction whose effect the walk does
// not model is taken to push one value and pop none).
//
// bulk reports whether the code has a bulk memory or table instruction (bulkCharge).
func (rw *rewriter) frameSlots(body []byte, ft funcType) (_ uint64, bulk bool, _ error) {
	r := reader{b: body}
	groups, ok := r.uleb(32)
	locals := uint64(0)
	for j := uint64(0); ok && j < groups; j++ {
		var k uint64
		if k, ok = r.uleb(32); ok {
			locals += k
			ok = r.valType()
		}
	}
	if !ok {
		return 0, false, errors.New("its locals cannot be read")
	}
	type ctl struct{ base, params, results int }
	ctls := []ctl{{0, 0, ft.results}}
	h, top := 0, 0
	pop := func(k int) {
		h = max(h-k, ctls[len(ctls)-1].base)
	}
	push := func(k int) {
		h += k
		top = max(top, h)
	}
	for len(r.b) > 0 && len(ctls) > 0 {
		start := r.b
		op, sub, known, ok := r.instr()
		if !known || !ok {
			return 0, false, fmt.Errorf("instruction 0x%02x at byte %d cannot be read", op, len(body)-len(start))
		}
		imm := reader{b: start[1:]}
		switch {
		case op == 0x02 || op == 0x03 || op == 0x04: // block loop if
			if op == 0x04 {
				pop(1)
			}
			params, results, ok := rw.blockArity(&imm)
			if !ok {
				return 0, false, errors.New("a block type cannot be read")
			}
			base := max(h-params, ctls[len(ctls)-1].base)
			ctls = append(ctls, ctl{base, params, results})
		case op == 0x05: // else
			c := ctls[len(ctls)-1]
			h = c.base
			push(c.params)
		case op == 0x0b: // end
			c := ctls[len(ctls)-1]
			ctls = ctls[:len(ctls)-1]
			h = c.base
			push(c.results)
		case op == 0x00 || op == 0x0c || op == 0x0e || op == 0x0f: // unreachable br br_table return
			h = ctls[len(ctls)-1].base
		case op == 0x01: // nop
		case op == 0x0d || op == 0x1a || op == 0x21 || op == 0x24: // br_if drop local.set global.set
			pop(1)
		case op == 0x10 || op == 0x11: // call call_indirect
			f, _ := imm.uleb(32)
			var ft funcType
			if op == 0x10 && f < uint64(len(rw.funcTypes)) {
				ft = rw.types[rw.funcTypes[f]]
			} else if op == 0x11 && f < uint64(len(rw.types)) {
				pop(1)
				ft = rw.types[f]
			}
			pop(ft.params)
			push(ft.results)
		case op == 0x1b || op == 0x1c: // select
			pop(3)
			push(1)
		case op == 0x20 || op == 0x23 || op == 0x3f || (op >= 0x41 && op <= 0x44) || op == 0xd0 || op == 0xd2:
			push(1) // local.get global.get memory.size const ref.null ref.func
		case op == 0x22 || op == 0x25 || (op >= 0x28 && op <= 0x35) || op == 0x40 || op == 0x45 || op == 0x50 ||
			(op >= 0x67 && op <= 0x69) || (op >= 0x79 && op <= 0x7b) || (op >= 0x8b && op <= 0x91) ||
			(op >= 0x99 && op <= 0x9f) || (op >= 0xa7 && op <= 0xc4) || op == 0xd1:
			// local.tee table.get loads memory.grow eqz unary conversions ref.is_null: one for one
		case op == 0x26 || (op >= 0x36 && op <= 0x3e): // table.set stores
			pop(2)
		case op >= 0x46 && op <= 0xa6: // comparisons and binary operators
			pop(2)
			push(1)
		case op == 0xfc:
			bulk = bulk || bulkCharge(sub) > 0
			switch {
			case sub <= 7: // saturating truncations
			case sub == 8 || sub == 10 || sub == 11 || sub == 12 || sub == 14 || sub == 17:
				pop(3)
			case sub == 15: // table.grow
				pop(2)
				push(1)
			case sub == 16:
				push(1)
			}
		default: // SIMD and the rest: counted as a push
			push(1)
		}
	}
	return uint64(ft.params) + locals + uint64(top), bulk, nil
}

// blockArity returns the parameters and results of a block type read from r.
func (rw *rewriter) blockArity(r *reader) (params, results int, ok bool) {
	if len(r.b) == 0 {
		return 0, 0, false
	}
	switch c := r.b[0]; {
	case c == 0x40:
		r.b = r.b[1:]
		return 0, 0, true
	case c&0x80 == 0 && c >= 0x40: // a value type (one byte, negative as an s33)
		return 0, 1, r.valType()
	}
	start := r.b
	if !r.sleb() {
		return 0, 0, false
	}
	t, ok := (&reader{b: start}).uleb(32)
	if !ok || t >= uint64(len(rw.types)) {
		return 0, 0, false
	}
	return rw.types[t].params, rw.types[t].results, true
}

// addedEntries are what the rewrite adds to a module: the yield function's type and import, the
// counters' globals and the call-stack counter's export (with a call-stack limit), each with
// its count.
type addedEntries struct {
	yieldType, yieldImport   []byte
	newGlobals, newExports   []byte
	nNewGlobals, nNewExports uint64
}

// additions makes the entries the rewrite adds, placed where learn put them.
func (rw *rewriter) additions() addedEntries {
	var a addedEntries
	a.yieldType = []byte{0x60, 0x00, 0x01, 0x7f} // [] -> [i32]
	a.yieldImport = appendName(nil, SandboxModule)
	a.yieldImport = appendName(a.yieldImport, SandboxYield)
	a.yieldImport = append(a.yieldImport, 0x00)
	a.yieldImport = binary.AppendUvarint(a.yieldImport, rw.yieldTypeIdx)
	if rw.limit > 0 {
		a.newGlobals = append(a.newGlobals, 0x7f, 0x01, 0x41, 0x00, 0x0b) // mutable i32 = 0
	}
	a.newGlobals = append(a.newGlobals, 0x7f, 0x01, 0x41)
	a.newGlobals = appendSleb(a.newGlobals, TickFuel)
	a.newGlobals = append(a.newGlobals, 0x0b)
	a.nNewGlobals = 1
	if rw.limit > 0 {
		a.nNewGlobals = 2
	}
	if rw.limit > 0 {
		a.newExports = appendName(nil, CallStackExport)
		a.newExports = append(a.newExports, 0x03)
		a.newExports = binary.AppendUvarint(a.newExports, rw.counter)
		a.nNewExports = 1
	}
	return a
}

// write writes the module out, section by section in its order, each rewritten as it needs,
// and the sections the rewrite needs that the module lacks in their places.
func (rw *rewriter) write(secs []section, bodies [][]byte) ([]byte, error) {
	var out []byte
	out = append(out, Header...)
	put := func(id byte, body []byte) {
		out = append(out, id)
		out = binary.AppendUvarint(out, uint64(len(body)))
		out = append(out, body...)
	}
	a := rw.additions()

	wrote := map[byte]bool{}
	// missing writes the sections the module does not have but the rewrite needs, before a
	// section that goes after them.
	missing := func(before byte) {
		for _, id := range []byte{1, 2, 6, 7} {
			if wrote[id] || (before != 0xff && sectionOrder[before] <= sectionOrder[id]) {
				continue
			}
			wrote[id] = true
			switch id {
			case 1:
				put(1, append([]byte{0x01}, a.yieldType...))
			case 2:
				put(2, append([]byte{0x01}, a.yieldImport...))
			case 6:
				put(6, append(binary.AppendUvarint(nil, a.nNewGlobals), a.newGlobals...))
			case 7:
				if a.nNewExports > 0 {
					put(7, append(binary.AppendUvarint(nil, a.nNewExports), a.newExports...))
				}
			}
		}
	}
	for _, s := range secs {
		if s.id != 0 {
			missing(s.id)
		}
		sr := reader{b: s.body}
		switch s.id {
		case 0:
			name, ok := sr.name()
			switch {
			case ok && strings.HasPrefix(name, ".debug_"):
				continue // its offsets no longer hold
			case ok && name == "name":
				if body, ok := rw.names(s.body, sr.b); ok {
					put(0, body)
				}
				continue // a name section it cannot read is dropped: it only names things
			}
			put(0, s.body)
		case 1:
			sr.uleb(32)
			body := binary.AppendUvarint(nil, uint64(len(rw.types))+1)
			body = append(body, sr.b...)
			put(1, append(body, a.yieldType...))
		case 2:
			body := binary.AppendUvarint(nil, rw.importEntries+1)
			body = append(body, rw.imports...)
			put(2, append(body, a.yieldImport...))
		case 6:
			body, err := rw.globals(sr, a.nNewGlobals, a.newGlobals)
			if err != nil {
				return nil, err
			}
			put(6, body)
		case 7:
			body, err := rw.exports(sr, a.nNewExports, a.newExports)
			if err != nil {
				return nil, err
			}
			put(7, body)
		case 8:
			f, ok := sr.uleb(32)
			if !ok || f >= uint64(len(rw.funcTypes)) {
				return nil, errors.New("the start section names no function of the module")
			}
			put(8, binary.AppendUvarint(nil, rw.remap(f)))
		case 9:
			body, err := rw.elements(sr)
			if err != nil {
				return nil, err
			}
			put(9, body)
		case 10:
			body := binary.AppendUvarint(nil, uint64(len(bodies)))
			for i, fb := range bodies {
				nb, err := rw.body(rw.imported+uint64(i), fb)
				if err != nil {
					return nil, fmt.Errorf("function %d: %w", rw.imported+uint64(i), err)
				}
				body = binary.AppendUvarint(body, uint64(len(nb)))
				body = append(body, nb...)
			}
			put(10, body)
		case 11:
			hasDataCount := slices.ContainsFunc(secs, func(s section) bool { return s.id == 12 })
			body, _ := mergeData(s.body, hasDataCount)
			put(11, body)
		default:
			put(s.id, s.body)
		}
		wrote[s.id] = true
	}
	missing(0xff)
	return out, nil
}

func appendName(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// names returns the name section (section is the custom section's content, sub what follows
// its name) with the function indices of its function, local and label names moved; ok is
// false when it cannot be read.
func (rw *rewriter) names(section, sub []byte) ([]byte, bool) {
	out := append([]byte(nil), section[:len(section)-len(sub)]...)
	sr := reader{b: sub}
	for len(sr.b) > 0 {
		id, ok := sr.byte()
		if !ok {
			return nil, false
		}
		size, ok := sr.uleb(32)
		if !ok || size > uint64(len(sr.b)) {
			return nil, false
		}
		body := sr.b[:size]
		sr.b = sr.b[size:]
		if id == 1 || id == 2 || id == 3 { // function names, local names, label names: by function
			br := reader{b: body}
			n, ok := br.uleb(32)
			if !ok {
				return nil, false
			}
			nb := binary.AppendUvarint(nil, n)
			for i := uint64(0); i < n; i++ {
				f, ok := br.uleb(32)
				if !ok {
					return nil, false
				}
				nb = binary.AppendUvarint(nb, rw.remap(f))
				start := br.b
				if id == 1 {
					_, ok = br.name()
				} else { // an indirect name map: a name map per function
					var k uint64
					k, ok = br.uleb(32)
					for j := uint64(0); ok && j < k; j++ {
						if _, ok = br.uleb(32); ok {
							_, ok = br.name()
						}
					}
				}
				if !ok {
					return nil, false
				}
				nb = append(nb, start[:len(start)-len(br.b)]...)
			}
			body = nb
		}
		out = append(out, id)
		out = binary.AppendUvarint(out, uint64(len(body)))
		out = append(out, body...)
	}
	return out, true
}

// globals returns the global section with its initial values' function indices moved and
// the host's globals added.
func (rw *rewriter) globals(sr reader, nNew uint64, added []byte) ([]byte, error) {
	n, _ := sr.uleb(32)
	out := binary.AppendUvarint(nil, n+nNew)
	for i := uint64(0); i < n; i++ {
		start := sr.b
		if !sr.valType() || !sr.skip(1) {
			return nil, fmt.Errorf("global %d cannot be read", i)
		}
		out = append(out, start[:len(start)-len(sr.b)]...)
		var err error
		if out, err = rw.constExpr(&sr, out); err != nil {
			return nil, fmt.Errorf("global %d: %w", i, err)
		}
	}
	return append(out, added...), nil
}

// exports returns the export section with function indices moved and the host's exports added.
func (rw *rewriter) exports(sr reader, nNew uint64, added []byte) ([]byte, error) {
	n, _ := sr.uleb(32)
	out := binary.AppendUvarint(nil, n+nNew)
	for i := uint64(0); i < n; i++ {
		name, ok := sr.name()
		if !ok {
			return nil, errors.New("the export section cannot be read")
		}
		if name == CallStackExport {
			return nil, ErrReservedExport
		}
		kind, ok := sr.byte()
		var idx uint64
		if ok {
			idx, ok = sr.uleb(32)
		}
		if !ok {
			return nil, errors.New("the export section cannot be read")
		}
		switch kind {
		case 0:
			if idx >= uint64(len(rw.funcTypes)) {
				return nil, fmt.Errorf("export %q names function %d, which the module does not have", name, idx)
			}
			idx = rw.remap(idx)
		case 3:
			if idx >= rw.ownGlobals {
				return nil, fmt.Errorf("export %q names global %d, which the module does not have", name, idx)
			}
		}
		out = appendName(out, name)
		out = append(out, kind)
		out = binary.AppendUvarint(out, idx)
	}
	return append(out, added...), nil
}

// elements returns the element section with its function indices moved.
func (rw *rewriter) elements(sr reader) ([]byte, error) {
	n, ok := sr.uleb(32)
	if !ok {
		return nil, errors.New("the element section cannot be read")
	}
	out := binary.AppendUvarint(nil, n)
	bad := fmt.Errorf("the element section cannot be read")
	for i := uint64(0); i < n; i++ {
		flags, ok := sr.uleb(32)
		if !ok || flags > 7 {
			return nil, bad
		}
		out = binary.AppendUvarint(out, flags)
		if flags&2 != 0 && flags&1 == 0 { // an explicit table index
			t, ok := sr.uleb(32)
			if !ok {
				return nil, bad
			}
			out = binary.AppendUvarint(out, t)
		}
		var err error
		if flags&1 == 0 { // active: the offset
			if out, err = rw.constExpr(&sr, out); err != nil {
				return nil, fmt.Errorf("element segment %d: %w", i, err)
			}
		}
		if flags&3 != 0 { // an element kind (0x00) or a reference type
			start := sr.b
			if flags&4 != 0 {
				ok = sr.valType()
			} else {
				_, ok = sr.byte()
			}
			if !ok {
				return nil, bad
			}
			out = append(out, start[:len(start)-len(sr.b)]...)
		}
		k, ok := sr.uleb(32)
		if !ok {
			return nil, bad
		}
		out = binary.AppendUvarint(out, k)
		for j := uint64(0); j < k; j++ {
			if flags&4 != 0 {
				if out, err = rw.constExpr(&sr, out); err != nil {
					return nil, fmt.Errorf("element segment %d: %w", i, err)
				}
				continue
			}
			f, ok := sr.uleb(32)
			if !ok || f >= uint64(len(rw.funcTypes)) {
				return nil, fmt.Errorf("element segment %d names a function the module does not have", i)
			}
			out = binary.AppendUvarint(out, rw.remap(f))
		}
	}
	return out, nil
}

// constExpr copies a constant expression to out, with function indices moved.
func (rw *rewriter) constExpr(r *reader, out []byte) ([]byte, error) {
	for {
		start := r.b
		op, idx, ok := r.constInstr()
		switch {
		case !ok:
			return nil, fmt.Errorf("a constant expression cannot be read (instruction 0x%02x)", op)
		case op == 0x0b:
			return append(out, op), nil
		case op == 0xd2 && idx >= uint64(len(rw.funcTypes)):
			return nil, errors.New("a constant expression names a function the module does not have")
		case op == 0xd2: // ref.func
			out = append(out, op)
			out = binary.AppendUvarint(out, rw.remap(idx))
			continue
		case op == 0x23 && idx >= rw.ownGlobals:
			return nil, errors.New("a constant expression names a global the module does not have")
		}
		out = append(out, start[:len(start)-len(r.b)]...)
	}
}

// body returns a function body with its function indices moved, a tick at its entry, at the
// head of each loop and every tickSpan instructions, and each call counting its callee's frame.
func (rw *rewriter) body(f uint64, body []byte) ([]byte, error) {
	r := reader{b: body}
	groups, _ := r.uleb(32)
	locals := uint64(rw.types[rw.funcTypes[f]].params)
	for range groups {
		k, _ := r.uleb(32)
		locals += k
		r.valType()
	}
	out := make([]byte, 0, len(body)+len(body)/2+32)
	scratch := locals // a local of the host's, for the length of a bulk instruction
	if rw.bulk[f] {
		out = binary.AppendUvarint(out, groups+1)
		lr := reader{b: body}
		lr.uleb(32) // the group count, as written
		out = append(out, lr.b[:len(lr.b)-len(r.b)]...)
		out = append(out, 0x01, 0x7f) // one i32
	} else {
		out = append(out, body[:len(body)-len(r.b)]...)
	}
	// The cost of a tick is patched in once the instructions up to the next one are counted.
	costAt, count := 0, 0
	tick := func() {
		if costAt > 0 {
			putSleb5(out[costAt:], int64(count))
		}
		out = append(out, 0x23)
		out = binary.AppendUvarint(out, rw.fuel)
		out = append(out, 0x41)
		costAt = len(out)
		out = append(out, 0x80, 0x80, 0x80, 0x80, 0x00) // patched
		out = append(out, 0x6b, 0x24)                   // i32.sub global.set
		out = binary.AppendUvarint(out, rw.fuel)
		out = rw.fuelCheck(out)
		count = 0
	}
	tick()
	for len(r.b) > 0 {
		if count >= tickSpan {
			tick()
		}
		start := r.b
		op, sub, known, ok := r.instr()
		if !known || !ok {
			return nil, fmt.Errorf("instruction 0x%02x at byte %d cannot be read", op, len(body)-len(start))
		}
		count++
		if op == 0xfc && bulkCharge(sub) > 0 {
			// fuel -= length >> shift, from the length on top of the stack; yield if out.
			out = append(out, 0x22)
			out = binary.AppendUvarint(out, scratch)
			out = append(out, 0x23)
			out = binary.AppendUvarint(out, rw.fuel)
			out = append(out, 0x20)
			out = binary.AppendUvarint(out, scratch)
			out = append(out, 0x41, byte(bulkCharge(sub)-1), 0x76, 0x6b, 0x24) // i32.const shift i32.shr_u i32.sub global.set
			out = binary.AppendUvarint(out, rw.fuel)
			out = rw.fuelCheck(out)
		}
		ins := start[:len(start)-len(r.b)]
		imm := reader{b: ins[1:]}
		switch op {
		case 0x03: // loop: a tick at its head
			out = append(out, ins...)
			tick()
		case 0x10, 0x12: // call f, return_call f
			f, _ := imm.uleb(32)
			if f >= uint64(len(rw.funcTypes)) {
				return nil, fmt.Errorf("call of function %d, which the module does not have", f)
			}
			call := append([]byte{op}, binary.AppendUvarint(nil, rw.remap(f))...)
			out = rw.guardCall(out, call, rw.frames[f])
		case 0x11: // call_indirect type table
			t, _ := imm.uleb(32)
			if t >= uint64(len(rw.types)) {
				return nil, fmt.Errorf("call_indirect of type %d, which the module does not define", t)
			}
			out = rw.guardCall(out, ins, rw.byType[t])
		case 0xd2: // ref.func f
			f, _ := imm.uleb(32)
			if f >= uint64(len(rw.funcTypes)) {
				return nil, fmt.Errorf("ref.func of function %d, which the module does not have", f)
			}
			out = append(out, op)
			out = binary.AppendUvarint(out, rw.remap(f))
		case 0x23, 0x24: // global.get, global.set
			if g, _ := imm.uleb(32); g >= rw.ownGlobals {
				return nil, fmt.Errorf("global.%s of global %d, which the module does not have", map[byte]string{0x23: "get", 0x24: "set"}[op], g)
			}
			out = append(out, ins...)
		default:
			out = append(out, ins...)
		}
	}
	if costAt > 0 {
		putSleb5(out[costAt:], int64(count))
	}
	return out, nil
}

// fuelCheck appends: if fuel < 0 { fuel = yield() }.
func (rw *rewriter) fuelCheck(out []byte) []byte {
	out = append(out, 0x23)
	out = binary.AppendUvarint(out, rw.fuel)
	out = append(out, 0x41, 0x00, 0x48, 0x04, 0x40, 0x10) // i32.const 0 i32.lt_s if call
	out = binary.AppendUvarint(out, rw.yield)
	out = append(out, 0x24)
	out = binary.AppendUvarint(out, rw.fuel)
	return append(out, 0x0b)
}

// bulkCharge returns, for the bulk instruction 0xFC sub, 1 + the shift that turns its length
// into fuel, or 0 for another instruction. A bulk instruction runs as one, whatever its
// length: its fuel is taken before it, so that the yields keep up with the work (memory.fill
// and memory.copy move about 16 bytes a nanosecond here; a table element costs about one
// instruction). One over a whole 64 MiB memory still runs 4-6 ms without a yield.
func bulkCharge(sub uint64) int {
	switch sub {
	case 8, 10, 11: // memory.init, memory.copy, memory.fill
		return 1 + 4
	case 12, 14, 17: // table.init, table.copy, table.fill
		return 1
	}
	return 0
}

// guardCall appends call (a call instruction) counting cost bytes of call stack around it,
// trapping past the limit; the call alone when the call stack is not bounded.
func (rw *rewriter) guardCall(out, call []byte, cost uint64) []byte {
	if rw.limit == 0 {
		return append(out, call...)
	}
	g := rw.counter
	c := int64(min(cost, 1<<31-1))
	out = addToGlobal(out, g, c, 0x6a) // counter += cost
	// if counter > limit (unsigned) { unreachable }
	out = append(out, 0x23)
	out = binary.AppendUvarint(out, g)
	out = append(out, 0x41)
	out = appendSleb(out, int64(rw.limit))
	out = append(out, 0x4b, 0x04, 0x40, 0x00, 0x0b)
	out = append(out, call...)
	return addToGlobal(out, g, c, 0x6b) // counter -= cost
}

// putSleb5 writes v (0 <= v < 2^31) as a signed LEB128 number of exactly five bytes.
func putSleb5(b []byte, v int64) {
	for i := range 4 {
		b[i] = byte(v&0x7f) | 0x80
		v >>= 7
	}
	b[4] = byte(v & 0x7f)
}

// addToGlobal appends global.get g, i32.const c, op (i32.add or i32.sub), global.set g.
func addToGlobal(out []byte, g uint64, c int64, op byte) []byte {
	out = append(out, 0x23)
	out = binary.AppendUvarint(out, g)
	out = append(out, 0x41)
	out = appendSleb(out, c)
	out = append(out, op, 0x24)
	return binary.AppendUvarint(out, g)
}

// appendSleb appends v as a signed LEB128 number.
func appendSleb(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
