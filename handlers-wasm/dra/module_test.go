//go:build !wasip1

package main

import (
	"context"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/host"
	"github.com/wasmhost/wasmhost/registration"
)

// buildModule builds this handler for wasip1 as the Makefile does, into dir, and returns the
// module's path.
func buildModule(t *testing.T, dir string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds a WebAssembly module with the Go toolchain")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command in PATH")
	}
	out := filepath.Join(dir, "dra.wasm")
	cmd := exec.Command(gobin, "build", "-buildmode=c-shared", "-trimpath", "-o", out, ".")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	fi, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("dra.wasm: %d bytes", fi.Size())
	return out
}

// hostImports returns the names of the functions the module imports from abi.ImportModule,
// sorted, and fails the test on an import from any module but that one and WASI.
func hostImports(t *testing.T, wasm []byte) []string {
	t.Helper()
	// The interpreter decodes and validates as the compiler does, in a fraction of the time.
	rt := wazero.NewRuntimeWithConfig(t.Context(), wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(context.Background())
	cm, err := rt.CompileModule(t.Context(), wasm)
	if err != nil {
		t.Fatalf("compiling: %v", err)
	}
	var names []string
	for _, def := range cm.ImportedFunctions() {
		switch mod, name, _ := def.Import(); mod {
		case abi.ImportModule:
			names = append(names, name)
		case "wasi_snapshot_preview1":
		default:
			t.Errorf("imports %s.%s", mod, name)
		}
	}
	slices.Sort(names)
	return names
}

// TestModule builds the module, checks what it imports (no capability), and runs it in the
// daemon's host with nothing granted.
func TestModule(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := buildModule(t, dir)
	wasm, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{abi.ImportKVDelete, abi.ImportKVGet, abi.ImportKVSet, abi.ImportLog,
		abi.ImportPublish, abi.ImportRequestRead, abi.ImportResultSet}
	slices.Sort(want)
	if got := hostImports(t, wasm); !slices.Equal(got, want) {
		t.Errorf("imports %q, want %q", got, want)
	}

	ctx := t.Context()
	h, err := host.New(ctx, host.Config{HandlerDir: dir, CallTimeout: time.Minute, PoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	m, err := h.LoadFile(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	if got := m.PluginTypes(); !slices.Equal(got, []string{PluginType}) {
		t.Errorf("plugin types %q", got)
	}
	if caps := m.Capabilities(); len(caps) != 0 {
		t.Errorf("capabilities %q, want none", caps)
	}

	p := registration.PluginInfo{Socket: "/r/gpu-reg.sock", Type: PluginType, Name: "gpu", Endpoint: "/gpu/dra.sock",
		Versions: []string{"v1beta1.DRAPlugin", "v1.DRAPlugin", "v1alpha1.DRAResourceHealth"}}
	if err := m.ValidatePlugin(ctx, p); err != nil {
		t.Fatal(err)
	}
	published, err := m.RegisterPlugin(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	wantPub := map[string]string{"service": "v1.DRAPlugin", "health": "v1alpha1.DRAResourceHealth", "endpoint": "/gpu/dra.sock"}
	if !maps.Equal(published, wantPub) {
		t.Errorf("published %v, want %v", published, wantPub)
	}
	bad := p
	bad.Versions = []string{"1.0.0"}
	if err := m.ValidatePlugin(ctx, bad); !errors.Is(err, registration.ErrRejected) || !strings.Contains(err.Error(), `offers services ["1.0.0"]`) {
		t.Errorf("Validate without a DRAPlugin service: %v, want a rejection", err)
	}
	if err := m.DeRegisterPlugin(ctx, p); err != nil {
		t.Error(err)
	}
}
