package host

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// wazero runs a guest's calls on a native stack of its own, allocated on the Go heap and grown
// by doubling until it passes 50,000,000 bytes, when the call fails with "stack overflow". That
// stack is outside handlers.memoryLimit: a guest function that only calls itself made the host
// allocate 169 MB and 162 ms of CPU per call before it failed (545 MB of heap in use for four
// such calls at once, measured with wazero v1.12), enough for one handler to get a daemon
// limited to 256 MiB killed. wazero has no setting for it, so the host bounds it in the code: before compiling, it
// rewrites every call site of the module to add the callee's frame to a counter, a global of
// its own, and to trap when the counter passes handlers.limits.maxCallStack; the call's return
// takes the frame off again. A frame is counted as callStackFrame bytes plus 8 per parameter
// and local of the callee (for call_indirect, the largest of the functions of its type), an
// estimate of the native frame that wazero's own may exceed by a small factor. A trap of that
// check is reported as such (see callStackOver).
//
// The rewrite changes the code's byte offsets, so DWARF sections (.debug_*) are dropped from the
// compiled copy: a trap then names the functions (the name section stays) but no source lines.
// The bytes kept, shown and stored as revisions are the file's own.

// callStackExport names the counter, exported so that the host can tell its trap from another.
const callStackExport = "wasmhost_call_stack"

var errReservedExport = fmt.Errorf("exports %s, a name the host reserves", callStackExport)

// sectionOrder is where each known section goes in a module, as the binary format sets it.
var sectionOrder = map[byte]int{1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 13: 6, 6: 7, 7: 8, 8: 9, 9: 10, 12: 11, 10: 12, 11: 13}

// callStackFrame is the part of a frame's estimate that does not depend on the callee.
const callStackFrame = 64

// guardCallStack returns b with its call sites counting toward limit bytes of call stack, as
// described above (b itself when limit is 0). A module it cannot read is an error; the
// compiler would refuse it too.
func guardCallStack(b []byte, limit uint64) ([]byte, error) {
	if limit == 0 {
		return b, nil
	}
	if limit > 1<<31-1 {
		limit = 1<<31 - 1
	}
	type section struct {
		id   byte
		body []byte // the section's content, after its size
	}
	if len(b) < len(wasmHeader) {
		return nil, errNotWasm
	}
	var secs []section
	r := reader{b: b[len(wasmHeader):]}
	for len(r.b) > 0 {
		id, _ := r.byte()
		size, ok := r.uleb(32)
		if !ok || size > uint64(len(r.b)) {
			return nil, errors.New("a section's size runs past the end of the module")
		}
		secs = append(secs, section{id, r.b[:size]})
		r.b = r.b[size:]
	}

	// What the costs need: each type's parameter count, and each function's type and locals.
	var (
		typeParams      []int
		funcTypes       []uint32 // imported functions first, as in the function index space
		imported        int
		importedGlobals uint64
		globals         uint64
		hasGlobals      bool
		exports         []byte // the export section's content after its count, and the count
		nExports        uint64
		hasExports      bool
		code            []byte
	)
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
				var params uint64
				if params, ok = sr.uleb(32); ok {
					for j := uint64(0); ok && j < params; j++ {
						ok = sr.valType()
					}
				}
				var results uint64
				if ok {
					results, ok = sr.uleb(32)
				}
				for j := uint64(0); ok && j < results; j++ {
					ok = sr.valType()
				}
				typeParams = append(typeParams, int(params))
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
				switch imp.kind {
				case 0:
					funcTypes = append(funcTypes, imp.typ)
				case 3:
					importedGlobals++
				}
			}
			imported = len(funcTypes)
		case 3:
			n, ok := sr.uleb(32)
			for i := uint64(0); ok && i < n; i++ {
				var t uint64
				t, ok = sr.uleb(32)
				funcTypes = append(funcTypes, uint32(t))
			}
			if !ok {
				return nil, errors.New("the function section cannot be read")
			}
		case 6:
			n, ok := sr.uleb(32)
			if !ok {
				return nil, errors.New("the global section cannot be read")
			}
			globals, hasGlobals = n, true
		case 7:
			n, ok := sr.uleb(32)
			for i := uint64(0); ok && i < n; i++ {
				var name string
				if name, ok = sr.name(); ok && name == callStackExport {
					return nil, errReservedExport
				}
				if ok {
					_, ok = sr.byte()
				}
				if ok {
					_, ok = sr.uleb(32)
				}
			}
			if !ok {
				return nil, errors.New("the export section cannot be read")
			}
			c := reader{b: s.body}
			c.uleb(32)
			exports, nExports, hasExports = c.b, n, true
		case 10:
			code = s.body
		}
	}
	for i, t := range funcTypes {
		if int(t) >= len(typeParams) {
			return nil, fmt.Errorf("function %d has type %d, which the module does not define", i, t)
		}
	}

	// Each function's frame, from its parameters and the locals its body declares.
	frames := make([]uint64, len(funcTypes))
	for i := range imported {
		frames[i] = callStackFrame
	}
	cr := reader{b: code}
	n, ok := cr.uleb(32)
	if code == nil { // no code section: no function defined
		n, ok = 0, true
	}
	if !ok || int(n) != len(funcTypes)-imported {
		return nil, errors.New("the code section does not match the function section")
	}
	bodies := make([][]byte, n)
	for i := range bodies {
		size, ok := cr.uleb(32)
		if !ok || size > uint64(len(cr.b)) {
			return nil, fmt.Errorf("the body of function %d runs past the code section", i)
		}
		bodies[i], cr.b = cr.b[:size], cr.b[size:]
		br := reader{b: bodies[i]}
		groups, ok := br.uleb(32)
		locals := uint64(0)
		for j := uint64(0); ok && j < groups; j++ {
			var k uint64
			if k, ok = br.uleb(32); ok {
				locals += k
				ok = br.valType()
			}
		}
		if !ok {
			return nil, fmt.Errorf("the locals of function %d cannot be read", i)
		}
		f := imported + i
		frames[f] = callStackFrame + 8*(uint64(typeParams[funcTypes[f]])+locals)
	}
	byType := make([]uint64, len(typeParams))
	for i := range byType {
		byType[i] = callStackFrame
	}
	for f, t := range funcTypes {
		byType[t] = max(byType[t], frames[f])
	}

	g := importedGlobals + globals // the counter's index: after the module's own
	var out []byte
	out = append(out, wasmHeader...)
	put := func(id byte, body []byte) {
		out = append(out, id)
		out = binary.AppendUvarint(out, uint64(len(body)))
		out = append(out, body...)
	}
	counter := []byte{0x7f, 0x01, 0x41, 0x00, 0x0b} // mutable i32 = 0
	counterExport := binary.AppendUvarint(nil, uint64(len(callStackExport)))
	counterExport = append(counterExport, callStackExport...)
	counterExport = append(counterExport, 0x03)
	counterExport = binary.AppendUvarint(counterExport, g)
	after := func(id, than byte) bool { return sectionOrder[id] > sectionOrder[than] }
	wroteGlobals, wroteExports := false, false
	for _, s := range secs {
		if s.id != 0 && !wroteGlobals && !hasGlobals && after(s.id, 6) {
			put(6, append([]byte{0x01}, counter...))
			wroteGlobals = true
		}
		if s.id != 0 && !wroteExports && !hasExports && after(s.id, 7) {
			put(7, append([]byte{0x01}, counterExport...))
			wroteExports = true
		}
		switch s.id {
		case 0:
			sr := reader{b: s.body}
			if name, ok := sr.name(); ok && strings.HasPrefix(name, ".debug_") {
				continue // its offsets no longer hold
			}
			put(0, s.body)
		case 6:
			c := reader{b: s.body}
			c.uleb(32)
			body := binary.AppendUvarint(nil, globals+1)
			body = append(body, c.b...)
			put(6, append(body, counter...))
			wroteGlobals = true
		case 7:
			body := binary.AppendUvarint(nil, nExports+1)
			body = append(body, exports...)
			put(7, append(body, counterExport...))
			wroteExports = true
		case 10:
			body := binary.AppendUvarint(nil, uint64(len(bodies)))
			for i, fb := range bodies {
				nb, err := guardBody(fb, g, uint32(limit), frames, byType)
				if err != nil {
					return nil, fmt.Errorf("function %d: %w", imported+i, err)
				}
				body = binary.AppendUvarint(body, uint64(len(nb)))
				body = append(body, nb...)
			}
			put(10, body)
		default:
			put(s.id, s.body)
		}
	}
	if !wroteGlobals {
		put(6, append([]byte{0x01}, counter...))
	}
	if !wroteExports {
		put(7, append([]byte{0x01}, counterExport...))
	}
	return out, nil
}

// guardBody returns a function body with each call and call_indirect counting its callee's
// frame in global g, trapping past limit.
func guardBody(body []byte, g uint64, limit uint32, frames, byType []uint64) ([]byte, error) {
	r := reader{b: body}
	groups, _ := r.uleb(32)
	for range groups {
		r.uleb(32)
		r.valType()
	}
	out := make([]byte, 0, len(body)+len(body)/4)
	out = append(out, body[:len(body)-len(r.b)]...)
	for len(r.b) > 0 {
		start := r.b
		op, _, known, ok := r.instr()
		if !known || !ok {
			return nil, fmt.Errorf("instruction 0x%02x at byte %d cannot be read", op, len(body)-len(start))
		}
		ins := start[:len(start)-len(r.b)]
		var cost uint64
		switch op {
		case 0x10: // call f
			ir := reader{b: ins[1:]}
			f, _ := ir.uleb(32)
			if f >= uint64(len(frames)) {
				return nil, fmt.Errorf("call of function %d, which the module does not have", f)
			}
			cost = frames[f]
		case 0x11: // call_indirect type table
			ir := reader{b: ins[1:]}
			t, _ := ir.uleb(32)
			if t >= uint64(len(byType)) {
				return nil, fmt.Errorf("call_indirect of type %d, which the module does not define", t)
			}
			cost = byType[t]
		default:
			out = append(out, ins...)
			continue
		}
		c := int64(min(cost, 1<<31-1))
		out = addToGlobal(out, g, c, 0x6a) // counter += cost
		// if counter > limit (unsigned) { unreachable }
		out = append(out, 0x23)
		out = binary.AppendUvarint(out, g)
		out = append(out, 0x41)
		out = appendSleb(out, int64(limit))
		out = append(out, 0x4b, 0x04, 0x40, 0x00, 0x0b)
		out = append(out, ins...)
		out = addToGlobal(out, g, c, 0x6b) // counter -= cost
	}
	return out, nil
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

// guardCallStack is guardCallStack with the host's bound, its failures refusals of file.
func (h *Host) guardCallStack(file string, bin []byte) ([]byte, error) {
	guarded, err := guardCallStack(bin, uint64(h.cfg.Limits.MaxCallStack))
	switch {
	case errors.Is(err, errReservedExport):
		return nil, refuse(file, RefusedABI, nil, "%v", err)
	case err != nil:
		return nil, refuse(file, RefusedInvalid, nil, "module not valid WebAssembly: %v", err)
	}
	return guarded, nil
}

// callStackFault is a trap of the call stack's bound.
type callStackFault struct {
	limit int64
	err   error // wazero's, with the guest's stack
}

func (f *callStackFault) Error() string {
	return fmt.Sprintf("call stack over %d bytes (handlers.limits.maxCallStack): %v", f.limit, f.err)
}

// callStackOver reports whether the instance's last call trapped on the call stack's bound.
func (in *instance) callStackOver(limit int64) bool {
	if in.mod == nil || limit <= 0 {
		return false
	}
	g := in.mod.ExportedGlobal(callStackExport)
	return g != nil && int64(uint32(g.Get())) > limit
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
