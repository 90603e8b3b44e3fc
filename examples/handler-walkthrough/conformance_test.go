//go:build !wasip1

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/wasmhost/wasmhost/abi/conformance"
	"github.com/wasmhost/wasmhost/registration"
)

// TestWalkthroughConformance builds this handler for wasip1 and runs the conformance kit on it:
// step 4 of the walkthrough.
func TestWalkthroughConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and compiles a Go handler module")
	}
	dir := t.TempDir()
	wasm := filepath.Join(dir, "sensors.wasm")
	build := exec.Command("go", "build", "-buildmode=c-shared", "-trimpath", "-o", wasm, ".")
	build.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	conformance.Run(t, wasm, conformance.Options{
		PluginType: "sensors.example.com",
		Valid:      registration.PluginInfo{Name: "thermal-1", Versions: []string{"v1"}},
		Invalid: []registration.PluginInfo{
			{Name: "legacy-1", Versions: []string{"v0"}},
			{Name: "thermal-2", Versions: []string{"V1"}}, // versions are compared exactly
		},
		CacheDir: filepath.Join(dir, "cache"),
	})
}
