package wasmbin

import (
	"fmt"
)

// wazero cannot interrupt a compile, and its compiler is quadratic in how deeply blocks nest
// in a function: measured with wazero v1.12 on this project's CI machines, one function of
// 1,000 nested blocks compiles in 8 ms, 3,000 in 57 ms (210 ms for loops), 10,000 in 390 ms,
// and 100,000 (a 300 KB file) for over a minute. So before compiling, the host walks the code
// section once (linear, no allocation per instruction) and refuses a module whose functions
// are too many, too big or nest too deeply; docs/configuration.md has the defaults and why.

// Limits bound a module's code before it is compiled. A zero field is no limit.
type Limits struct {
	Functions     int   // functions defined by the module
	FunctionBytes int   // bytes of one function body
	Nesting       int   // blocks, loops, ifs and trys open at once in one function
	NestingWork   int64 // the sum over the module of the depth of every block opened
	Locals        int   // locals declared by one function
	TableElements int   // elements of all the tables together, at their largest, and of the element segments
	Entries       int   // entries of any other section: types, imports, globals, exports, segments
}

// MaxNestingWork is the host's bound of Limits.NestingWork, a constant (it was the key
// handlers.limits.maxNestingWork): what compile time grows with, set from measurements so that
// the worst module that passes compiles in a few seconds while the shipped handlers have 40
// times the room. The other fields of Limits are keys of handlers.limits (internal/limits has
// their defaults; docs/configuration.md says why each is what it is).
const MaxNestingWork = 50_000_000

// Stats is what the walk found: the largest values, for the log and the tests.
type Stats struct {
	Functions     int
	FunctionBytes int
	Nesting       int
	NestingWork   int64 // the sum, over every block opened, of how deep it is
	Locals        int
	TableElements uint64 // the sum of the tables' minimums
	TableGrow     bool   // the code grows a table
	Tables        []tableInfo
}

// Check walks the code section of b (a module whose header Scan accepted) and
// returns a message saying which limit a function exceeds, or "". Code it cannot decode is
// left to the compiler, which refuses it, except that an instruction the walk does not know
// is refused here: a bound that cannot be checked is not a bound.
func Check(b []byte, lim Limits) (Stats, string) {
	var info Stats
	r := reader{b: b[len(Header):]}
	for len(r.b) > 0 {
		id, ok := r.byte()
		if !ok {
			return info, ""
		}
		size, ok := r.uleb(32)
		if !ok || size > uint64(len(r.b)) {
			return info, ""
		}
		sec := reader{b: r.b[:size]}
		r.b = r.b[size:]
		if id != 10 && id != 0 && lim.Entries > 0 { // every vector section but code (maxFunctions) and custom
			c := sec
			if n, ok := c.uleb(32); ok && n > uint64(lim.Entries) {
				return info, fmt.Sprintf("%s section of %d entries, over the limit of %d (handlers.limits.maxEntries)",
					sectionName(id), n, lim.Entries)
			}
		}
		if id == 0 && lim.Entries > 0 {
			if msg := checkNames(sec, lim); msg != "" {
				return info, msg
			}
			continue
		}
		if id == 4 {
			if msg := checkTables(&sec, lim, &info); msg != "" {
				return info, msg
			}
			continue
		}
		if id == 9 {
			if msg := checkElements(&sec, lim); msg != "" {
				return info, msg
			}
			continue
		}
		if id != 10 {
			continue
		}
		n, ok := sec.uleb(32)
		if !ok {
			return info, ""
		}
		info.Functions = int(n)
		if lim.Functions > 0 && n > uint64(lim.Functions) {
			return info, fmt.Sprintf("%d functions, over the limit of %d (handlers.limits.maxFunctions)", n, lim.Functions)
		}
		for i := uint64(0); i < n; i++ {
			bodySize, ok := sec.uleb(32)
			if !ok || bodySize > uint64(len(sec.b)) {
				return info, ""
			}
			body := sec.b[:bodySize]
			sec.b = sec.b[bodySize:]
			info.FunctionBytes = max(info.FunctionBytes, len(body))
			if lim.FunctionBytes > 0 && len(body) > lim.FunctionBytes {
				return info, fmt.Sprintf("function %d has a body of %d bytes, over the limit of %d bytes (handlers.limits.maxFunctionSize)",
					i, len(body), lim.FunctionBytes)
			}
			depth, work, locals, msg := walkBody(body, lim, &info)
			info.Nesting = max(info.Nesting, depth)
			info.NestingWork += work
			info.Locals = max(info.Locals, locals)
			if msg != "" {
				return info, fmt.Sprintf("function %d: %s", i, msg)
			}
			if lim.NestingWork > 0 && info.NestingWork > lim.NestingWork {
				return info, fmt.Sprintf("blocks nested %d levels deep in all, over the limit of %d (a constant: docs/configuration.md, \"Constants\")",
					info.NestingWork, lim.NestingWork)
			}
		}
	}
	return info, ""
}

// sectionName names a section by its id, for messages.
var sectionNames = [...]string{"custom", "type", "import", "function", "table", "memory", "global",
	"export", "start", "element", "code", "data", "data count", "tag"}

func sectionName(id byte) string {
	if int(id) < len(sectionNames) {
		return sectionNames[id]
	}
	return fmt.Sprintf("unknown (%d)", id)
}

// checkNames bounds the entries of the "name" custom section, which wazero decodes (function
// and local names) at about 30 bytes an entry; other custom sections are skipped unread.
func checkNames(sec reader, lim Limits) string {
	name, ok := sec.name()
	if !ok || name != "name" {
		return ""
	}
	entries := uint64(0)
	over := func() bool { return entries > uint64(lim.Entries) }
	for len(sec.b) > 0 {
		id, ok := sec.byte()
		if !ok {
			return ""
		}
		size, ok := sec.uleb(32)
		if !ok || size > uint64(len(sec.b)) {
			return ""
		}
		sub := reader{b: sec.b[:size]}
		sec.b = sec.b[size:]
		n, ok := sub.uleb(32)
		if !ok {
			continue
		}
		switch id {
		case 1: // function names: a name map
			entries += n
		case 2: // local names: an indirect name map
			entries += n
			for i := uint64(0); i < n && !over(); i++ {
				if _, ok := sub.uleb(32); !ok {
					break
				}
				k, ok := sub.uleb(32)
				if !ok {
					break
				}
				entries += k
				for j := uint64(0); j < k && !over(); j++ {
					if _, ok := sub.uleb(32); !ok {
						break
					}
					if _, ok := sub.name(); !ok {
						break
					}
				}
			}
		}
		if over() {
			return fmt.Sprintf("name section of %d or more entries, over the limit of %d (handlers.limits.maxEntries)", entries, lim.Entries)
		}
	}
	return ""
}

// A table holds 8 bytes per element in every instance, outside the memory limit: a 250-byte
// module declaring 100 million elements cost 763 MB per instance, and one growing its table in a
// loop 2.4 GB in one call. So the tables' minimums together are bounded, and a module whose
// code grows a table must declare a maximum within the bound for every table. (The shipped Go
// handlers declare one table of 5,524 elements, with no maximum and no table.grow.)

// checkTables reads the table section and checks the tables' minimums.
func checkTables(sec *reader, lim Limits, info *Stats) string {
	n, ok := sec.uleb(32)
	if !ok {
		return ""
	}
	for i := uint64(0); i < n; i++ {
		c, ok := sec.byte()
		if !ok || c == 0x40 { // a table with an initialiser: the compiler decides
			return ""
		}
		if c == 0x63 || c == 0x64 { // (ref null ht), (ref ht)
			if !sec.sleb() {
				return ""
			}
		}
		t, ok := sec.limits()
		if !ok {
			return ""
		}
		info.Tables = append(info.Tables, t)
		info.TableElements += t.min
		if lim.TableElements > 0 && info.TableElements > uint64(lim.TableElements) {
			return fmt.Sprintf("tables of %d elements, over the limit of %d (handlers.limits.maxTableElements)", info.TableElements, lim.TableElements)
		}
	}
	return ""
}

// checkElements reads the element section and bounds its entries together by the table limit:
// wazero keeps about 70 bytes an entry (a 5 MB segment took 343 MB to compile). Encodings it
// cannot read are left to the compiler.
func checkElements(sec *reader, lim Limits) string {
	n, ok := sec.uleb(32)
	if !ok {
		return ""
	}
	var total uint64
	for i := uint64(0); i < n; i++ {
		flags, ok := sec.uleb(32)
		if !ok || flags > 7 {
			return ""
		}
		if flags&2 != 0 && flags&1 == 0 { // an explicit table index
			if _, ok := sec.uleb(32); !ok {
				return ""
			}
		}
		if flags&1 == 0 && !sec.constExpr() { // active: the offset
			return ""
		}
		if flags&3 != 0 { // an element kind (0x00) or a reference type
			if flags&4 != 0 {
				if !sec.valType() {
					return ""
				}
			} else if _, ok := sec.byte(); !ok {
				return ""
			}
		}
		k, ok := sec.uleb(32)
		if !ok {
			return ""
		}
		total += k
		if lim.TableElements > 0 && total > uint64(lim.TableElements) {
			return fmt.Sprintf("element segments of %d entries, over the limit of %d (handlers.limits.maxTableElements)", total, lim.TableElements)
		}
		for j := uint64(0); j < k; j++ {
			if flags&4 != 0 {
				ok = sec.constExpr()
			} else {
				_, ok = sec.uleb(32)
			}
			if !ok {
				return ""
			}
		}
	}
	return ""
}

// walkBody returns how deeply the blocks of one function body nest, the sum of the depths of
// its blocks and how many locals it declares, stopping with a message as soon as one exceeds
// its limit, or at an instruction it does not know.
func walkBody(body []byte, lim Limits, info *Stats) (deepest int, work int64, locals int, _ string) {
	limit := lim.Nesting
	r := reader{b: body}
	// Locals: a vector of (count, type).
	n, ok := r.uleb(32)
	if !ok {
		return 0, 0, 0, ""
	}
	for i := uint64(0); i < n; i++ {
		k, ok := r.uleb(32)
		if !ok || !r.valType() {
			return 0, 0, locals, ""
		}
		locals += int(k)
		if lim.Locals > 0 && locals > lim.Locals {
			return 0, 0, locals, fmt.Sprintf("more than %d locals (handlers.limits.maxLocals)", lim.Locals)
		}
	}
	depth := 0
	for len(r.b) > 0 {
		at := len(body) - len(r.b)
		op, sub, known, ok := r.instr()
		switch {
		case !known:
			return deepest, work, locals, fmt.Sprintf("unknown instruction 0x%02x at byte %d of the body", op, at)
		case !ok:
			return deepest, work, locals, "" // truncated: the compiler says so
		case op == 0x02 || op == 0x03 || op == 0x04 || op == 0x06 || op == 0x1f: // block loop if try try_table
			depth++
			work += int64(depth)
			if depth > deepest {
				deepest = depth
				if limit > 0 && depth > limit {
					return deepest, work, locals, fmt.Sprintf("blocks nested more than %d deep (handlers.limits.maxNesting)", limit)
				}
			}
		case op == 0x0b: // end
			depth--
			if depth < 0 {
				return deepest, work, locals, "" // the function's own end
			}
		case op == 0x18: // delegate: closes the try
			depth--
		case op == 0xfc && sub == 15 && !info.TableGrow: // table.grow
			info.TableGrow = true
			if msg := info.checkGrow(lim); msg != "" {
				return deepest, work, locals, msg
			}
		}
	}
	return deepest, work, locals, ""
}

// checkGrow checks, for a module that grows a table, that every table has a maximum and that
// together they stay within the limit.
func (info *Stats) checkGrow(lim Limits) string {
	if lim.TableElements <= 0 {
		return ""
	}
	var sum uint64
	for i, t := range info.Tables {
		if !t.hasMax {
			return fmt.Sprintf("grows table %d, which declares no maximum (with table.grow, every table needs a maximum within handlers.limits.maxTableElements)", i)
		}
		sum += t.max
	}
	if sum > uint64(lim.TableElements) {
		return fmt.Sprintf("grows its tables up to %d elements, over the limit of %d (handlers.limits.maxTableElements)", sum, lim.TableElements)
	}
	return ""
}
