package wasmbin

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// dataModule builds a module with one exported memory of one page and the data section
// segs (each: flags and the rest of the segment after them), and a data count section of
// dataCount segments when dataCount >= 0.
func dataModule(segs [][]byte, dataCount int) []byte {
	section := func(b []byte, id byte, body []byte) []byte {
		return append(binary.AppendUvarint(append(b, id), uint64(len(body))), body...)
	}
	b := append([]byte(nil), Header...)
	b = section(b, 5, []byte{1, 0, 1})                   // memory 0: min 1 page
	b = section(b, 7, []byte{1, 3, 'm', 'e', 'm', 2, 0}) // export "mem"
	if dataCount >= 0 {
		b = section(b, 12, binary.AppendUvarint(nil, uint64(dataCount)))
	}
	body := binary.AppendUvarint(nil, uint64(len(segs)))
	for _, s := range segs {
		body = append(body, s...)
	}
	return section(b, 11, body)
}

// active is an active segment of memory 0 at off (flags 0, or flags 2 naming memory 0).
func active(off int32, data []byte, flags2 bool) []byte {
	var s []byte
	if flags2 {
		s = []byte{2, 0}
	} else {
		s = []byte{0}
	}
	s = append(s, 0x41)
	s = appendSleb(s, int64(off))
	s = append(s, 0x0b)
	s = binary.AppendUvarint(s, uint64(len(data)))
	return append(s, data...)
}

func segCount(t *testing.T, b []byte) int {
	t.Helper()
	r := reader{b: b[len(Header):]}
	for len(r.b) > 0 {
		id, _ := r.byte()
		size, _ := r.uleb(32)
		body := r.b[:size]
		r.b = r.b[size:]
		if id == 11 {
			n, _ := (&reader{b: body}).uleb(32)
			return int(n)
		}
	}
	return 0
}

// memoryAfter instantiates b (its yield import answered) and returns its memory, or the
// instantiation's error.
func memoryAfter(t *testing.T, b []byte) ([]byte, error) {
	t.Helper()
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	t.Cleanup(func() { rt.Close(ctx) })
	if _, err := rt.NewHostModuleBuilder(SandboxModule).NewFunctionBuilder().
		WithGoFunction(api.GoFunc(func(context.Context, []uint64) {}), nil, []api.ValueType{api.ValueTypeI32}).
		Export(SandboxYield).Instantiate(ctx); err != nil {
		t.Fatal(err)
	}
	mod, err := rt.InstantiateWithConfig(ctx, b, wazero.NewModuleConfig().WithName(""))
	if err != nil {
		return nil, err
	}
	mem, _ := mod.Memory().Read(0, mod.Memory().Size())
	return bytes.Clone(mem), nil
}

// TestMergeData: the rewrite joins data segments only where the memory an instantiation leaves
// is the same, and a segment past the memory's end fails the instantiation as before.
func TestMergeData(t *testing.T) {
	x := func(n int, c byte) []byte { return bytes.Repeat([]byte{c}, n) }
	tests := []struct {
		name      string
		segs      [][]byte
		dataCount int
		want      int // segments after the rewrite
	}{
		{"in order, small gaps", [][]byte{active(0, x(10, 1), false), active(20, x(5, 2), false), active(25, x(3, 3), true)}, -1, 1},
		{"a gap over MaxDataGap", [][]byte{active(0, x(10, 1), false), active(10+MaxDataGap+1, x(5, 2), false), active(10+MaxDataGap+10, x(1, 3), false)}, -1, 2},
		{"out of order, not overlapping", [][]byte{active(100, x(10, 1), false), active(0, x(10, 2), false), active(50, x(10, 3), false)}, -1, 1},
		{"overlapping: the later write wins", [][]byte{active(0, x(10, 1), false), active(5, x(10, 2), false)}, -1, 2},
		{"a gap written by an earlier segment", [][]byte{active(0, x(30, 9), false), active(0, x(5, 1), false), active(10, x(5, 2), false)}, -1, 3},
		{"passive", [][]byte{active(0, x(10, 1), false), {1, 2, 7, 7}}, -1, 2},
		{"data count", [][]byte{active(0, x(10, 1), false), active(12, x(10, 2), false)}, 2, 2},
		{"one segment", [][]byte{active(7, x(10, 1), false)}, -1, 1},
		{"past the end", [][]byte{active(0, x(10, 1), false), active(65530, x(10, 2), false)}, -1, 2},
		{"past the end, joined", [][]byte{active(65500, x(10, 1), false), active(65530, x(10, 2), false)}, -1, 1},
		{"empty, past the end", [][]byte{active(65530, x(6, 1), false), active(65537, nil, false)}, -1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			orig := dataModule(tt.segs, tt.dataCount)
			out, err := Instrument(orig, 0)
			if err != nil {
				t.Fatal(err)
			}
			if n := segCount(t, out); n != tt.want {
				t.Errorf("%d segments after the rewrite, want %d", n, tt.want)
			}
			// The memory each leaves once instantiated (both fail, or neither).
			want, werr := memoryAfter(t, orig)
			got, gerr := memoryAfter(t, out)
			if (werr != nil) != (gerr != nil) {
				t.Fatalf("instantiation: original %v, rewritten %v", werr, gerr)
			}
			if werr == nil && !bytes.Equal(want, got) {
				t.Error("the rewritten module leaves other bytes in memory than the original")
			}
		})
	}
}
