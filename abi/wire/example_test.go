package wire_test

import (
	"fmt"

	"github.com/wasmhost/wasmhost/abi/wire"
)

// A record of two strings and a number, written and read back; the decoder skips field 9,
// which it does not know.
func Example() {
	var b []byte
	b = wire.AppendNonEmpty(b, 1, "gpu.example.com")
	b = wire.AppendNonEmpty(b, 2, "") // left out, as proto3 does
	b = wire.AppendUint(b, 3, 16)
	b = wire.AppendString(b, 9, "from a later version")

	var name string
	var limit uint64
	err := wire.Walk(b, func(f wire.Field) error {
		var err error
		switch {
		case f.Num == 1:
			name, err = f.Text()
		case f.Num == 3 && f.Type == wire.VarintType:
			limit = f.Varint
		case f.Num == 3:
			err = f.WrongType()
		}
		return err
	})
	fmt.Println(name, limit, err)
	fmt.Println(wire.Walk([]byte{0x0a, 0x05, 'a'}, func(wire.Field) error { return nil }))
	// Output:
	// gpu.example.com 16 <nil>
	// malformed protobuf message: field 1: truncated
}
