// Package wasmbin reads and rewrites WebAssembly binary modules before the host compiles them:
// pure functions of bytes in, a verdict or bytes out, with no runtime, no file and no state.
//
//   - Scan reads what the host checks before anything else: the header, the imports and the
//     memories' minimums.
//   - Check walks the code and refuses what would make the compiler slow or the instances big
//     (functions, nesting, locals, tables, section entries) with a message naming the limit.
//   - Instrument adds the ticks that make every guest call interruptible and the call-stack
//     bound (instrument.go says how and why).
//
// The host (package host) turns their results into refusals of handler files; the fuzz targets
// here check that no input makes them panic and that what compiles still compiles rewritten.
package wasmbin
