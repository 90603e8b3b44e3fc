//go:build !wasip1

package main

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
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

// caller is the host's plugin_call for the test: it answers NodeGetInfo.
type caller struct {
	resp []byte
	err  error
}

func (c caller) Call(_ context.Context, endpoint, method string, req []byte, _ int) ([]byte, error) {
	if method != methodNodeGetInfo || len(req) != 0 {
		return nil, errors.New("unexpected call " + method)
	}
	return c.resp, c.err
}

// TestModule builds the module, checks what it imports, and runs it in the daemon's host: it
// loads only with plugin_call granted to CSIPlugin, and registers a driver end to end.
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
	want := []string{abi.ImportErrorRead, abi.ImportKVCompareAndSet, abi.ImportKVGet, abi.ImportLog,
		abi.ImportPluginCall, abi.ImportPublish, abi.ImportRequestRead, abi.ImportResultSet}
	conformance.CheckShape(t, wasm, want)

	ctx := t.Context()
	cache := filepath.Join(dir, "cache") // the second host loads from the first one's compile
	newHost := func(grants map[string][]string, c host.PluginCaller) *host.Host {
		h, err := host.New(ctx, host.Config{HandlerDir: dir, CacheDir: cache, Grants: grants,
			PluginCaller: c, CallTimeout: time.Minute, PoolSize: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close(context.Background()) })
		return h
	}

	h := newHost(map[string][]string{PluginType: {abi.CapabilityPluginCall}}, caller{resp: nodeInfoBytes})
	m, err := h.LoadFile(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	if got := m.PluginTypes(); !slices.Equal(got, []string{PluginType}) {
		t.Errorf("plugin types %q", got)
	}
	p := registration.PluginInfo{Socket: "/r/d-reg.sock", Type: PluginType, Name: "d", Endpoint: "/d.sock", Versions: []string{"1.0.0"}}
	if err := m.ValidatePlugin(ctx, p); err != nil {
		t.Fatal(err)
	}
	published, err := m.RegisterPlugin(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	wantPub := map[string]string{"version": "1.0.0", "endpoint": "/d.sock", "node_id": "node-1",
		"max_volumes_per_node": "16", "topology": "region=r1,zone=z1"}
	if !maps.Equal(published, wantPub) {
		t.Errorf("published %v, want %v", published, wantPub)
	}
	old := p
	old.Socket, old.Versions = "/r/old-reg.sock", []string{"0.3.0"}
	if err := m.ValidatePlugin(ctx, old); !errors.Is(err, registration.ErrRejected) || !strings.Contains(err.Error(), `["0.3.0"]`) {
		t.Errorf("Validate of a 0.x driver: %v, want a rejection", err)
	}
	if err := m.DeRegisterPlugin(ctx, p); err != nil {
		t.Error(err)
	}

	failing := newHost(map[string][]string{PluginType: {abi.CapabilityPluginCall}}, caller{err: errors.New("connection refused")})
	m2, err := failing.LoadFile(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close(context.Background())
	if _, err := m2.RegisterPlugin(ctx, p); !errors.Is(err, host.ErrHandlerFailed) || !strings.Contains(err.Error(), "at endpoint /d.sock failed") {
		t.Errorf("Register with NodeGetInfo failing: %v", err)
	}

	ungranted := newHost(nil, nil)
	if _, err := ungranted.LoadFile(ctx, path); !errors.Is(err, host.ErrNotGranted) {
		t.Errorf("load without the plugin_call grant: %v, want ErrNotGranted", err)
	}
}
