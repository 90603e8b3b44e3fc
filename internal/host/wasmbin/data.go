package wasmbin

import (
	"cmp"
	"encoding/binary"
	"slices"
)

// MaxDataGap is the longest run of zero bytes mergeData writes out to join two data segments.
// The Go linker starts a new segment at every run of more than 8 zero bytes, so that a Go
// handler has some 23,500 of them, and wazero keeps a slice header for each in every instance
// (0.55 MB) and decoded segments in every module (about 2 MB). Joined across gaps of up to
// 256 bytes they are a few hundred, for a module some kilobytes larger
// (docs/benchmarks-history.md, "The Go SDK's costs").
const MaxDataGap = 256

// dataSegment is an active segment of memory 0 at a constant offset.
type dataSegment struct {
	off  uint64
	data []byte
}

// mergeData returns the data section body with its segments joined where that cannot change
// what an instantiation writes, and whether it changed anything. It joins only when every
// segment is active, for memory 0, at an i32.const offset, and no two segments overlap: then
// the order they are written in makes no difference (the Go linker writes several runs, each
// in order of address), so they are joined in order of address, and the zero bytes written
// between two joined segments are zeros already (a new memory is all zeros, and no segment
// writes there). A segment past the memory's end fails the instantiation as before: the
// joined segments cover the same bytes and the gaps between them. A module with a data count
// section (which memory.init and data.drop name segments by) is left as it is: the caller
// passes hasDataCount.
func mergeData(body []byte, hasDataCount bool) ([]byte, bool) {
	return mergeDataGap(body, hasDataCount, MaxDataGap)
}

func mergeDataGap(body []byte, hasDataCount bool, maxGap uint64) ([]byte, bool) {
	if hasDataCount {
		return body, false
	}
	r := reader{b: body}
	n, ok := r.uleb(32)
	if !ok || n < 2 {
		return body, false
	}
	segs := make([]dataSegment, 0, n)
	for range n {
		flags, ok := r.uleb(32)
		if !ok {
			return body, false
		}
		switch flags {
		case 0:
		case 2:
			if mem, ok := r.uleb(32); !ok || mem != 0 {
				return body, false
			}
		default: // passive, or something this does not know
			return body, false
		}
		if op, ok := r.byte(); !ok || op != 0x41 { // i32.const
			return body, false
		}
		off, ok := r.sleb32()
		if !ok {
			return body, false
		}
		if end, ok := r.byte(); !ok || end != 0x0b {
			return body, false
		}
		size, ok := r.uleb(32)
		if !ok || size > uint64(len(r.b)) {
			return body, false
		}
		segs = append(segs, dataSegment{off: uint64(uint32(off)), data: r.b[:size]})
		r.b = r.b[size:]
	}
	if len(r.b) != 0 {
		return body, false
	}
	slices.SortStableFunc(segs, func(a, b dataSegment) int { return cmp.Compare(a.off, b.off) })
	for i := 1; i < len(segs); i++ {
		if prev := segs[i-1]; segs[i].off < prev.off+uint64(len(prev.data)) {
			return body, false // overlapping: the order of the writes matters
		}
	}
	// Runs of segments joined: segs[first[k]:first[k+1]] make run k, of size[k] bytes.
	var first []int
	var size []uint64
	total := 0
	for i, s := range segs {
		if k := len(first) - 1; k >= 0 {
			end := segs[first[k]].off + size[k]
			if gap := s.off - end; gap <= maxGap {
				size[k] += gap + uint64(len(s.data))
				total += int(gap) + len(s.data)
				continue
			}
		}
		first, size = append(first, i), append(size, uint64(len(s.data)))
		total += len(s.data)
	}
	if len(first) == len(segs) {
		return body, false
	}
	first = append(first, len(segs))
	out := make([]byte, 0, total+len(first)*16)
	out = binary.AppendUvarint(out, uint64(len(size)))
	for k := range size {
		run := segs[first[k]:first[k+1]]
		out = append(out, 0x00, 0x41)
		out = appendSleb(out, int64(int32(uint32(run[0].off))))
		out = append(out, 0x0b)
		out = binary.AppendUvarint(out, size[k])
		end := run[0].off
		for _, s := range run {
			out = out[:len(out)+int(s.off-end)] // zeros: out is made with room for all, never written past its length
			out = append(out, s.data...)
			end = s.off + uint64(len(s.data))
		}
	}
	return out, true
}
