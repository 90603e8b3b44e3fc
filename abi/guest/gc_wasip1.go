//go:build wasip1

package guest

import _ "unsafe" // go:linkname

// The host keeps a handler's instances warm in its pool between calls, each with all the linear
// memory its Go heap ever grew to: WebAssembly memory does not shrink. At Go's default GOGC of
// 100 the heap takes on 4 MB of garbage before its first collection, so an instance that has
// served a few thousand calls holds 88 pages (5.5 MiB) where a new one holds 38. At GOGC 25 the
// first collection comes after 1 MB, and the instance holds 64 pages, for no cost in a call the
// benchmarks can see (docs/benchmarks.md, "The Go SDK's costs"); lower values hold no less. A
// handler that wants another value calls debug.SetGCPercent in its own init, which runs after
// this one.
const gcPercent = 25

// setGCPercent is the runtime's function behind debug.SetGCPercent, which the runtime pushes to
// package runtime/debug by name. Importing runtime/debug would link fmt and os into every
// handler: 390 KB more module and 8 more pages in every instance, more than this saves.
//
//go:linkname setGCPercent runtime/debug.setGCPercent
func setGCPercent(percent int32) int32

func init() { setGCPercent(gcPercent) }
