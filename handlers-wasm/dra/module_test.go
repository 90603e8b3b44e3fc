//go:build !wasip1

package main

import (
	"context"
	"errors"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/abi/guest/guesttest"
	"github.com/wasmhost/wasmhost/conformance"
	"github.com/wasmhost/wasmhost/internal/host"
	"github.com/wasmhost/wasmhost/internal/registration"
)

// TestModule builds the module, checks what it imports (no capability), and runs it in the
// daemon's host with nothing granted.
func TestModule(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := guesttest.Build(t, ".")
	wasm, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{abi.ImportKVDelete, abi.ImportKVGet, abi.ImportKVSet, abi.ImportLog,
		abi.ImportPublish, abi.ImportRequestRead, abi.ImportResultSet}
	conformance.CheckShape(t, wasm, want)

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
