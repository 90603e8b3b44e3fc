//go:build !wasip1

package main

import (
	"path/filepath"
	"testing"

	"github.com/wasmhost/wasmhost/abi/guest/guesttest"
	"github.com/wasmhost/wasmhost/conformance"
)

// TestWalkthroughConformance builds this handler for wasip1 and runs the conformance kit on it:
// step 4 of the walkthrough.
func TestWalkthroughConformance(t *testing.T) {
	// guesttest.Build builds this package for wasip1 as the Makefile builds handlers (and
	// skips the test in -short mode, since that takes a while).
	wasm := guesttest.Build(t, ".")
	conformance.Run(t, wasm, conformance.Options{
		PluginType: "sensors.example.com",
		Valid:      conformance.Plugin{Name: "thermal-1", Versions: []string{"v1"}},
		Invalid: []conformance.Plugin{
			{Name: "legacy-1", Versions: []string{"v0"}},
			{Name: "thermal-2", Versions: []string{"V1"}}, // versions are compared exactly
		},
		CacheDir: filepath.Join(filepath.Dir(wasm), "cache"),
	})
}
