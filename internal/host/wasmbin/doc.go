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
// The sandbox (internal/host/sandbox) turns their results into refusals of handler files; the
// fuzz targets here check that no input makes them panic and that what compiles still compiles
// rewritten.
//
// The files read in the order the sandbox calls them on a dropped file's bytes (Scan and Check
// when it admits the bytes, in module.go and describe.go; Instrument before it compiles them,
// in callstack.go), each from its entry point down to its helpers: reader.go (the cursor every
// pass reads the format with), scan.go (Scan), check.go (Check: the sections in their ids'
// order, then the code), instrument.go (Instrument: the sections, what the rewrite learns of
// them, the frames, the module written out) and data.go (the data segments joined, the last
// section written).
package wasmbin
