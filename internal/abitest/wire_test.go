package abitest

import (
	"bytes"
	"errors"
	"math"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/wasmhost/wasmhost/abi/wire"
)

func TestAppend(t *testing.T) {
	for _, v := range []uint64{0, 1, 127, 128, 300, 1 << 32, math.MaxUint64} {
		if got, want := wire.AppendVarint(nil, v), protowire.AppendVarint(nil, v); !bytes.Equal(got, want) {
			t.Errorf("wire.AppendVarint(%d) = %x, protowire %x", v, got, want)
		}
		if got, n := wire.ConsumeVarint(wire.AppendVarint([]byte(nil), v)); got != v || n != protowire.SizeVarint(v) {
			t.Errorf("wire.ConsumeVarint(wire.AppendVarint(%d)) = %d, %d", v, got, n)
		}
	}
	long := string(make([]byte, 300))
	for _, num := range []uint32{1, 15, 16, 2047, wire.MaxFieldNumber} {
		for _, s := range []string{"", "x", long} {
			want := protowire.AppendString(protowire.AppendTag(nil, protowire.Number(num), protowire.BytesType), s)
			if got := wire.AppendString(nil, num, s); !bytes.Equal(got, want) {
				t.Errorf("wire.AppendString(%d, %d bytes) = %x, protowire %x", num, len(s), got, want)
			}
			if got := wire.AppendBytes(nil, num, []byte(s)); !bytes.Equal(got, want) {
				t.Errorf("wire.AppendBytes(%d, %d bytes) = %x, protowire %x", num, len(s), got, want)
			}
			if s == "" {
				want = nil
			}
			if got := wire.AppendNonEmpty(nil, num, s); !bytes.Equal(got, want) {
				t.Errorf("wire.AppendNonEmpty(%d, %d bytes) = %x, want %x", num, len(s), got, want)
			}
		}
		want := protowire.AppendVarint(protowire.AppendTag(nil, protowire.Number(num), protowire.VarintType), 1<<40)
		if got := wire.AppendUint(nil, num, 1<<40); !bytes.Equal(got, want) {
			t.Errorf("wire.AppendUint(%d) = %x, protowire %x", num, got, want)
		}
	}
}

func TestWalk(t *testing.T) {
	var b []byte
	b = wire.AppendString(b, 1, "a")
	b = wire.AppendUint(b, 2, 300)
	b = protowire.AppendFixed64(protowire.AppendTag(b, 3, protowire.Fixed64Type), 0x0102030405060708)
	b = protowire.AppendFixed32(protowire.AppendTag(b, 4, protowire.Fixed32Type), 0x01020304)
	b = wire.AppendBytes(b, 5, wire.AppendString(nil, 1, "inner"))
	var got []wire.Field
	if err := wire.Walk(b, func(f wire.Field) error { got = append(got, f); return nil }); err != nil {
		t.Fatal(err)
	}
	want := []wire.Field{
		{Num: 1, Type: wire.BytesType, Data: []byte("a")},
		{Num: 2, Type: wire.VarintType, Varint: 300},
		{Num: 3, Type: wire.Fixed64Type, Data: []byte{8, 7, 6, 5, 4, 3, 2, 1}},
		{Num: 4, Type: wire.Fixed32Type, Data: []byte{4, 3, 2, 1}},
		{Num: 5, Type: wire.BytesType, Data: wire.AppendString(nil, 1, "inner")},
	}
	if len(got) != len(want) {
		t.Fatalf("walked %d fields, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Num != w.Num || g.Type != w.Type || g.Varint != w.Varint || !bytes.Equal(g.Data, w.Data) {
			t.Errorf("field %d = %+v, want %+v", i, g, w)
		}
	}
	if s, err := got[0].Text(); s != "a" || err != nil {
		t.Errorf("Text of field 1 = %q, %v", s, err)
	}
	if _, err := got[1].Text(); !errors.Is(err, wire.ErrMalformed) || err.Error() != "malformed protobuf message: field 2: unexpected wire type 0" {
		t.Errorf("Text of a varint = %v", err)
	}
	stop := errors.New("stop")
	n := 0
	if err := wire.Walk(b, func(wire.Field) error { n++; return stop }); err != stop || n != 1 {
		t.Errorf("wire.Walk with fn failing: %v after %d fields", err, n)
	}
}

func TestMalformed(t *testing.T) {
	for name, tc := range map[string]struct {
		b   []byte
		msg string
	}{
		"truncated tag":        {[]byte{0x80}, "malformed protobuf message: bad field tag"},
		"field number 0":       {[]byte{0x02, 0x00}, "malformed protobuf message: bad field tag"},
		"field number too big": {[]byte{0x82, 0x80, 0x80, 0x80, 0x80, 0x01, 0x00}, "malformed protobuf message: bad field tag"},
		"truncated length":     {[]byte{0x0a}, "malformed protobuf message: field 1: truncated"},
		"length past the end":  {[]byte{0x0a, 0x05, 'a'}, "malformed protobuf message: field 1: truncated"},
		"group":                {[]byte{0x0b, 0x0c}, "malformed protobuf message: field 1: unsupported wire type 3"},
		"end group":            {[]byte{0x0c}, "malformed protobuf message: field 1: unsupported wire type 4"},
		"reserved wire type":   {[]byte{0x0e}, "malformed protobuf message: field 1: unsupported wire type 6"},
		"truncated fixed64":    {[]byte{0x09, 1, 2, 3}, "malformed protobuf message: field 1: truncated"},
		"truncated fixed32":    {[]byte{0x0d, 1}, "malformed protobuf message: field 1: truncated"},
		"varint over 64 bits":  {[]byte{0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}, "malformed protobuf message: field 1: bad varint"},
		"truncated varint":     {[]byte{0x18, 0x80}, "malformed protobuf message: field 3: bad varint"},
	} {
		err := wire.Walk(tc.b, func(wire.Field) error { return nil })
		if !errors.Is(err, wire.ErrMalformed) || err.Error() != tc.msg {
			t.Errorf("%s: wire.Walk(%x) = %v, want %q", name, tc.b, err, tc.msg)
		}
		if refWalk(tc.b) {
			t.Errorf("%s: the protowire reference accepts %x", name, tc.b)
		}
	}
}

// refWalk reports whether protowire parses every field of b (refusing groups, as Walk does).
func refWalk(b []byte) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ == protowire.StartGroupType || typ == protowire.EndGroupType {
			return false
		}
		b = b[n:]
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return false
		}
		b = b[n:]
	}
	return true
}

func FuzzWalk(f *testing.F) {
	f.Add([]byte{})
	f.Add(wire.AppendString(wire.AppendUint(nil, 2, 7), 1, "x"))
	f.Add([]byte{0x0b, 0x0c})
	f.Add([]byte{0x09, 1, 2, 3, 4, 5, 6, 7, 8})
	f.Fuzz(func(t *testing.T, b []byte) {
		var re []byte // the fields re-encoded
		err := wire.Walk(b, func(f wire.Field) error {
			switch f.Type {
			case wire.VarintType:
				re = wire.AppendUint(re, f.Num, f.Varint)
			case wire.BytesType:
				re = wire.AppendBytes(re, f.Num, f.Data)
			default:
				re = append(wire.AppendTag(re, f.Num, f.Type), f.Data...)
			}
			return nil
		})
		if ok := refWalk(b); (err == nil) != ok {
			t.Fatalf("wire.Walk(%x) = %v, protowire accepts: %v", b, err, ok)
		}
		if err != nil {
			if !errors.Is(err, wire.ErrMalformed) {
				t.Fatalf("error %v is not wire.ErrMalformed", err)
			}
			return
		}
		// The canonical re-encoding walks to the same fields.
		var again []byte
		_ = wire.Walk(re, func(f wire.Field) error {
			switch f.Type {
			case wire.VarintType:
				again = wire.AppendUint(again, f.Num, f.Varint)
			case wire.BytesType:
				again = wire.AppendBytes(again, f.Num, f.Data)
			default:
				again = append(wire.AppendTag(again, f.Num, f.Type), f.Data...)
			}
			return nil
		})
		if !bytes.Equal(re, again) {
			t.Fatalf("re-encoding of %x is not stable: %x then %x", b, re, again)
		}
	})
}
