package handlerbench

// The reference module of a bench: a handler whose calls do a fixed amount of
// work, run beside the module measured, so that its samples are the module's CPU per call
// relative to the reference's, measured in the same moments: what a loaded machine does to
// both (a slower share of the caches, another clock speed) cancels out.

import "github.com/wasmhost/wasmhost/abi"

// ReferenceLoops is the reference module's loop: a call of about 30 µs here.
const ReferenceLoops = 20_000

// ReferenceType is the plugin type of the reference module.
const ReferenceType = "reference.bench.wasmhost.dev"

// WorkModule assembles a handler of pluginType whose every call (validate, register,
// deregister) counts down a loop of loops iterations and accepts: twice the loops, twice the
// work. A bench runs one as its reference (ReferenceLoops, ReferenceType), and the gate's tests
// the same made slower.
func WorkModule(loops uint32, pluginType string) []byte {
	sleb := func(v int64) []byte {
		var b []byte
		for {
			c := byte(v & 0x7f)
			v >>= 7
			if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
				return append(b, c)
			}
			b = append(b, c|0x80)
		}
	}
	str := func(s string) []byte { return append([]byte{byte(len(s))}, s...) }
	section := func(id byte, parts ...[]byte) []byte {
		var body []byte
		for _, p := range parts {
			body = append(body, p...)
		}
		return append(append([]byte{id}, sleb(int64(len(body)))...), body...) // sizes here stay under 64
	}
	export := func(name string, kind, index byte) []byte { return append(str(name), kind, index) }
	body := func(code ...byte) []byte { return append([]byte{byte(len(code))}, code...) }
	// The countdown, on local 1 (an i32), then i32.const 0 (OK).
	work := append(append([]byte{0x01, 0x01, 0x7f, 0x41}, sleb(int64(loops))...),
		0x21, 0x01, // local.set 1
		0x03, 0x40, 0x20, 0x01, 0x41, 0x01, 0x6b, 0x22, 0x01, 0x0d, 0x00, 0x0b, // loop: n = n-1; br_if n
		0x41, 0x00, 0x0b)
	manifest := "\x0a" + string(str(pluginType)) // field 1, plugin_types (a type of under 128 bytes)
	m := []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}
	m = append(m, section(1, []byte{0x03},
		[]byte{0x60, 0x02, 0x7f, 0x7f, 0x01, 0x7f}, // 0: (i32, i32) -> i32: result_set
		[]byte{0x60, 0x00, 0x01, 0x7f},             // 1: () -> i32
		[]byte{0x60, 0x01, 0x7f, 0x01, 0x7f})...)   // 2: (i32) -> i32
	m = append(m, section(2, []byte{0x01}, str(abi.ImportModule), str(abi.ImportResultSet), []byte{0x00, 0x00})...)
	m = append(m, section(3, []byte{0x05, 0x01, 0x01, 0x02, 0x02, 0x02})...)
	m = append(m, section(5, []byte{0x01, 0x00, 0x01})...)
	m = append(m, section(7, []byte{0x06}, export(abi.ExportMemory, 0x02, 0),
		export(abi.ExportABIVersion, 0x00, 1), export(abi.ExportManifest, 0x00, 2),
		export(abi.ExportValidate, 0x00, 3), export(abi.ExportRegister, 0x00, 4), export(abi.ExportDeregister, 0x00, 5))...)
	m = append(m, section(10, []byte{0x05},
		body(0x00, 0x41, 0x01, 0x0b), // abi version 1
		body(append(append([]byte{0x00, 0x41, 0x00, 0x41}, sleb(int64(len(manifest)))...), 0x10, 0x00, 0x1a, 0x41, 0x00, 0x0b)...), // result_set(0, len); 0
		body(work...), body(work...), body(work...))...)
	m = append(m, section(11, []byte{0x01, 0x00, 0x41, 0x00, 0x0b}, str(manifest))...)
	return m
}
