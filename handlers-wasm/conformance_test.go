//go:build !wasip1

// Package handlers runs the conformance kit (conformance) on every handler shipped in
// handlers-wasm/. It has only this test file, at the top of handlers-wasm/: the Makefile takes
// every directory here for a handler, and this is not one.
package handlers

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/conformance"
	"github.com/wasmhost/wasmhost/internal/guestbuild"
)

// TestHandlerConformance builds each shipped handler from source (C, abi/c), as the Makefile
// does, and runs the kit on it.
func TestHandlerConformance(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cache := filepath.Join(dir, "cache") // one compile cache for the whole test binary

	nodeInfo, err := conformance.LoadFixture("csi/testdata/nodegetinfo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	options, err := conformance.LoadFixture("deviceplugin/testdata/options.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		handler string
		opts    conformance.Options
	}{
		{"example", conformance.Options{
			PluginType: "example.wasmhost.dev",
			Valid:      conformance.Plugin{Name: "demo", Versions: []string{"v1"}},
			Invalid:    []conformance.Plugin{{Name: "old", Versions: []string{"v0"}}},
		}},
		{"csi", conformance.Options{
			PluginType: "CSIPlugin",
			Valid:      conformance.Plugin{Name: "csi.example.com", Endpoint: "/var/lib/kubelet/plugins/csi.example.com/csi.sock", Versions: []string{"1.0.0"}},
			Invalid: []conformance.Plugin{
				{Name: "old.example.com", Versions: []string{"0.3.0"}},
				{Name: "future.example.com", Versions: []string{"2.0.0", "v1beta1"}},
			},
			Grants:  map[string][]string{"CSIPlugin": {abi.CapabilityPluginCall}},
			Fixture: nodeInfo,
		}},
		{"dra", conformance.Options{
			PluginType: "DRAPlugin",
			Valid:      conformance.Plugin{Name: "gpu.example.com", Endpoint: "/var/lib/kubelet/plugins/gpu.example.com/dra.sock", Versions: []string{"v1.DRAPlugin", "v1.DRAResourceHealth"}},
			Invalid:    []conformance.Plugin{{Name: "old.example.com", Versions: []string{"v1alpha3.DRAPlugin"}}},
		}},
		{"deviceplugin", conformance.Options{
			PluginType: "DevicePlugin",
			Valid:      conformance.Plugin{Name: "example.com/gpu", Versions: []string{"v1beta1"}},
			Invalid: []conformance.Plugin{
				{Name: "example.com/gpu", Versions: []string{"v1alpha1"}},
				{Name: "kubernetes.io/gpu", Versions: []string{"v1beta1"}},
				{Name: "gpu", Versions: []string{"v1beta1"}},
			},
			Grants:  map[string][]string{"DevicePlugin": {abi.CapabilityPluginCall}},
			Fixture: options,
		}},
	} {
		t.Run(tc.handler, func(t *testing.T) {
			tc.opts.CacheDir = cache
			conformance.Run(t, guestbuild.Shipped(t, tc.handler), tc.opts)
		})
	}
}
