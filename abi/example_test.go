package abi_test

import (
	"fmt"

	"github.com/wasmhost/wasmhost/abi"
)

// The request of the specification's example, byte for byte.
func ExampleAppendPluginRequest() {
	b := abi.AppendPluginRequest(nil, abi.PluginRequest{
		Socket: "/r/demo-reg.sock", Type: "example.wasmhost.dev", Name: "demo",
		Endpoint: "/r/demo.sock", Versions: []string{"v1"},
	})
	fmt.Println(len(b))
	fmt.Printf("% x\n", b[:2])
	fmt.Printf("%q\n", b[2:18])
	// Output:
	// 64
	// 0a 10
	// "/r/demo-reg.sock"
}

// The manifest of testdata/minimal.wat.
func ExampleDecodeManifest() {
	m, err := abi.DecodeManifest([]byte("\x0a\x1cexample.wasmhost.dev/minimal\x12\x07minimal"))
	fmt.Printf("%q %q %v\n", m.PluginTypes, m.Name, err)
	// Output:
	// ["example.wasmhost.dev/minimal"] "minimal" <nil>
}
