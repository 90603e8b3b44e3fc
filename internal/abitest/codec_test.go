package abitest

import (
	"errors"
	"reflect"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/wasmhost/wasmhost/abi"
)

// refDecode is a reference decoder built on protowire: the codec must accept and reject exactly
// what it does and give the same fields. Like the codec, it refuses groups.
func refDecode(b []byte, maxKnown protowire.Number) (map[protowire.Number][]string, bool) {
	out := map[protowire.Number][]string{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ == protowire.StartGroupType || typ == protowire.EndGroupType {
			return nil, false
		}
		b = b[n:]
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return nil, false
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, false
		}
		b = b[n:]
		if num <= maxKnown {
			if !utf8.Valid(v) {
				return nil, false
			}
			out[num] = append(out[num], string(v))
		}
	}
	return out, true
}

// last is the value proto3 gives a singular field that occurs more than once: the last one.
func last(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[len(s)-1]
}

// refAppend encodes with protowire, to check the codec's output byte for byte.
func refAppend(b []byte, fields ...any) []byte {
	for i := 0; i < len(fields); i += 2 {
		num := protowire.Number(fields[i].(int))
		switch v := fields[i+1].(type) {
		case string:
			if v != "" {
				b = protowire.AppendTag(b, num, protowire.BytesType)
				b = protowire.AppendString(b, v)
			}
		case []string:
			for _, s := range v {
				b = protowire.AppendTag(b, num, protowire.BytesType)
				b = protowire.AppendString(b, s)
			}
		}
	}
	return b
}

func TestPluginRequestRoundTrip(t *testing.T) {
	long := string(make([]byte, 300)) // a length that needs a two-byte varint
	for _, r := range []abi.PluginRequest{
		{},
		{Name: "only-name"},
		{Socket: "/var/lib/wasmhost/plugins_registry/csi-reg.sock", Type: "CSIPlugin", Name: "csi.example.com",
			Endpoint: "/var/lib/kubelet/plugins/csi.example.com/csi.sock", Versions: []string{"1.0.0"}},
		{Type: "DRAPlugin", Name: "gpu.example.com", Versions: []string{"v1.DRAPlugin", "v1beta1.DRAPlugin", "", "v1.DRAResourceHealth"}},
		{Name: "ünïcödé ✓", Endpoint: long},
	} {
		b := abi.AppendPluginRequest(nil, r)
		want := refAppend(nil, 1, r.Socket, 2, r.Type, 3, r.Name, 4, r.Endpoint, 5, r.Versions)
		if string(b) != string(want) {
			t.Errorf("abi.AppendPluginRequest(%+v) = %x, protowire gives %x", r, b, want)
		}
		got, err := abi.DecodePluginRequest(b)
		if err != nil {
			t.Fatalf("abi.DecodePluginRequest(abi.AppendPluginRequest(%+v)): %v", r, err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Errorf("round trip: got %+v, want %+v", got, r)
		}
	}
}

func TestManifestRoundTrip(t *testing.T) {
	for _, m := range []abi.Manifest{
		{},
		{PluginTypes: []string{"example.wasmhost.dev"}},
		{PluginTypes: []string{"CSIPlugin", "DRAPlugin"}, Name: "storage", Version: "1.2.3"},
	} {
		b := abi.AppendManifest(nil, m)
		if want := refAppend(nil, 1, m.PluginTypes, 2, m.Name, 3, m.Version); string(b) != string(want) {
			t.Errorf("abi.AppendManifest(%+v) = %x, protowire gives %x", m, b, want)
		}
		got, err := abi.DecodeManifest(b)
		if err != nil {
			t.Fatalf("abi.DecodeManifest(abi.AppendManifest(%+v)): %v", m, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("round trip: got %+v, want %+v", got, m)
		}
	}
}

func TestDecodeSkipsUnknownFields(t *testing.T) {
	b := abi.AppendPluginRequest(nil, abi.PluginRequest{Name: "a", Versions: []string{"v1"}})
	// Fields a later minor revision might add: a varint, fixed32, fixed64, and a bytes field
	// that is not UTF-8.
	b = protowire.AppendTag(b, 6, protowire.VarintType)
	b = protowire.AppendVarint(b, 1<<40)
	b = protowire.AppendTag(b, 7, protowire.Fixed32Type)
	b = protowire.AppendFixed32(b, 7)
	b = protowire.AppendTag(b, 8, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, 8)
	b = protowire.AppendTag(b, 1000, protowire.BytesType)
	b = protowire.AppendBytes(b, []byte{0xff, 0xfe})
	b = abi.AppendPluginRequest(b, abi.PluginRequest{Endpoint: "/e"})
	got, err := abi.DecodePluginRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	want := abi.PluginRequest{Name: "a", Endpoint: "/e", Versions: []string{"v1"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestDecodeMalformed(t *testing.T) {
	for name, b := range map[string][]byte{
		"truncated tag":        {0x80},
		"field number 0":       {0x02, 0x00},
		"truncated length":     {0x0a},
		"length past the end":  {0x0a, 0x05, 'a'},
		"invalid UTF-8":        {0x1a, 0x01, 0xff},
		"group":                {0x0b, 0x0c},
		"end group":            {0x0c},
		"reserved wire type":   {0x0e},
		"truncated fixed64":    {0x09, 1, 2, 3},
		"truncated fixed32":    {0x0d, 1},
		"varint over 64 bits":  {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02},
		"field number too big": {0x82, 0x80, 0x80, 0x80, 0x80, 0x01, 0x00},
	} {
		_, err := abi.DecodePluginRequest(b)
		if !errors.Is(err, abi.ErrMalformed) {
			t.Errorf("%s: abi.DecodePluginRequest(%x) = %v, want abi.ErrMalformed", name, b, err)
		}
		if _, ok := refDecode(b, 5); ok {
			t.Errorf("%s: the protowire reference accepts %x", name, b)
		}
	}
}

func FuzzDecodePluginRequest(f *testing.F) {
	f.Add([]byte{})
	f.Add(abi.AppendPluginRequest(nil, abi.PluginRequest{Socket: "/s", Type: "CSIPlugin", Name: "n", Endpoint: "/e", Versions: []string{"1.0.0", "v1"}}))
	f.Add([]byte{0x30, 0x01, 0x0a, 0x01, 'x'})
	f.Add([]byte{0x1a, 0x01, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := abi.DecodePluginRequest(b)
		ref, ok := refDecode(b, 5)
		if (err == nil) != ok {
			t.Fatalf("abi.DecodePluginRequest(%x) error %v, protowire reference accepts: %v", b, err, ok)
		}
		if err != nil {
			if !errors.Is(err, abi.ErrMalformed) {
				t.Fatalf("error %v is not abi.ErrMalformed", err)
			}
			return
		}
		want := abi.PluginRequest{Socket: last(ref[1]), Type: last(ref[2]), Name: last(ref[3]), Endpoint: last(ref[4]), Versions: ref[5]}
		if !reflect.DeepEqual(r, want) {
			t.Fatalf("abi.DecodePluginRequest(%x) = %+v, reference %+v", b, r, want)
		}
		// Round trip: the canonical encoding of what was decoded decodes to the same.
		again, err := abi.DecodePluginRequest(abi.AppendPluginRequest(nil, r))
		if err != nil || !reflect.DeepEqual(again, r) {
			t.Fatalf("round trip of %+v: %+v, %v", r, again, err)
		}
	})
}

func FuzzDecodeManifest(f *testing.F) {
	f.Add([]byte{})
	f.Add(abi.AppendManifest(nil, abi.Manifest{PluginTypes: []string{"a", "b"}, Name: "n", Version: "1"}))
	f.Add([]byte{0x0a, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := abi.DecodeManifest(b)
		ref, ok := refDecode(b, 3)
		if (err == nil) != ok {
			t.Fatalf("abi.DecodeManifest(%x) error %v, protowire reference accepts: %v", b, err, ok)
		}
		if err != nil {
			if !errors.Is(err, abi.ErrMalformed) {
				t.Fatalf("error %v is not abi.ErrMalformed", err)
			}
			return
		}
		want := abi.Manifest{PluginTypes: ref[1], Name: last(ref[2]), Version: last(ref[3])}
		if !reflect.DeepEqual(m, want) {
			t.Fatalf("abi.DecodeManifest(%x) = %+v, reference %+v", b, m, want)
		}
		again, err := abi.DecodeManifest(abi.AppendManifest(nil, m))
		if err != nil || !reflect.DeepEqual(again, m) {
			t.Fatalf("round trip of %+v: %+v, %v", m, again, err)
		}
	})
}
