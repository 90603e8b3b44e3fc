package conformance_test

import (
	"context"
	"fmt"

	"github.com/wasmhost/wasmhost/conformance"
)

// Check runs the kit outside a test: here on a small handler written in WebAssembly text
// (testdata/handler.wat) that accepts plugins speaking v1 and refuses the others.
func ExampleCheck() {
	results, err := conformance.Check(context.Background(), "testdata/handler.wasm", conformance.Options{
		PluginType: "conformance.example",
		Valid:      conformance.Plugin{Name: "good", Versions: []string{"v1"}},
		Invalid:    []conformance.Plugin{{Name: "old", Versions: []string{"v0"}}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range results {
		verdict := "ok"
		if r.Problem != "" {
			verdict = "FAIL: " + r.Problem
		}
		fmt.Println(r.Name, verdict)
	}
	// Output:
	// module ok
	// exports ok
	// imports ok
	// abi-version ok
	// manifest ok
	// grants ok
	// load ok
	// validate ok
	// register ok
	// register-again ok
	// deregister ok
	// deregister-unknown ok
	// reject/old ok
	// deadline ok
	// no-traps ok
}
