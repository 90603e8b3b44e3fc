package sandbox

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/registration"
)

func TestInspect(t *testing.T) {
	h, _ := newTestSandbox(t, Config{})
	ctx := context.Background()
	read := func(name string) []byte {
		b, err := os.ReadFile(fixture(name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	// A module that imports plugin_call: described in full, though this host (no grants)
	// would refuse to load it.
	r, err := h.Inspect(ctx, "ungranted.wasm", read("ungranted"))
	if err != nil {
		t.Fatal(err)
	}
	if r.DescribeError != "" || r.ABIVersion != 1 || !slices.Equal(r.Manifest.PluginTypes, []string{"plain.example"}) {
		t.Errorf("described %+v", r)
	}
	if !slices.Equal(r.Capabilities, []string{abi.CapabilityPluginCall}) {
		t.Errorf("capabilities %q", r.Capabilities)
	}
	var imps []string
	for _, imp := range r.Imports {
		imps = append(imps, imp.Module+"."+imp.Name+" "+imp.Kind+" "+imp.Signature+" "+imp.Capability)
	}
	want := []string{
		"wasmhost.result_set function (i32, i32) -> (i32) ",
		"wasmhost.error_read function (i32, i32) -> (i32) ",
		"wasmhost.plugin_call function (i32, i32, i32, i32, i32, i32) -> (i32) plugin_call",
	}
	if !slices.Equal(imps, want) {
		t.Errorf("imports\n%q\nwant\n%q", imps, want)
	}
	var exps []string
	for _, e := range r.Exports {
		exps = append(exps, e.Name+" "+e.Kind+" "+e.Signature)
	}
	wantExp := []string{
		"memory memory min 1 pages, no max",
		"wasmhost_abi_version function () -> (i32)",
		"wasmhost_deregister function (i32) -> (i32)",
		"wasmhost_manifest function () -> (i32)",
		"wasmhost_register function (i32) -> (i32)",
		"wasmhost_validate function (i32) -> (i32)",
	}
	if !slices.Equal(exps, wantExp) {
		t.Errorf("exports\n%q\nwant\n%q", exps, wantExp)
	}
	if r.Size != int64(len(read("ungranted"))) || len(r.SHA256) != 64 {
		t.Errorf("size %d sha256 %q", r.Size, r.SHA256)
	}
	// The host's rewrite imports its yield function into every module: not the module's
	// import, not shown (a module that imports nothing is described so).
	nothing := []byte("\x00asm\x01\x00\x00\x00\x01\x04\x01\x60\x00\x00\x03\x02\x01\x00\x0a\x07\x01\x05\x00\x03\x40\x0b\x0b")
	if r, err := h.Inspect(ctx, "nothing.wasm", nothing); err != nil || len(r.Imports) != 0 {
		t.Errorf("a module of one function and no import: imports %+v, error %v", r.Imports, err)
	}
	if _, err := loadFile(h, ctx, fixture("ungranted")); !errors.Is(err, ErrNotGranted) {
		t.Errorf("LoadFile: %v, want ErrNotGranted", err)
	}

	// Modules whose description fails say why; bytes that are not WebAssembly are an error.
	for name, wantErr := range map[string]string{
		"abi2":           "",
		"badmanifest":    "manifest malformed",
		"nomanifesttype": "",
		"initloop":       "instantiating",
		"command":        "not instantiated: exports _start: it was built as a WASI command, not the reactor a handler must be; build it as a reactor: Go: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared",
		"trap":           "",
	} {
		r, err := h.Inspect(ctx, name, read(name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if (wantErr == "") != (r.DescribeError == "") || !strings.Contains(r.DescribeError, wantErr) {
			t.Errorf("%s: DescribeError %q, want %q", name, r.DescribeError, wantErr)
		}
	}
	if r, _ := h.Inspect(ctx, "abi2", read("abi2")); r.ABIVersion != 2 {
		t.Errorf("abi2: version %d", r.ABIVersion)
	}
	small, _ := newTestSandbox(t, Config{MemoryLimit: 64 << 10})
	if r, err := small.Inspect(ctx, "bigmem", read("bigmem")); err != nil || !strings.Contains(r.DescribeError, "not instantiated: its memory minimum of 2000 pages") || len(r.Exports) != 6 {
		t.Errorf("bigmem over the memory limit: %+v, %v", r, err)
	}
	for _, name := range []string{"notwasm", "truncated"} {
		if _, err := h.Inspect(ctx, name, read(name)); !errors.Is(err, ErrBadModule) {
			t.Errorf("%s: %v, want ErrBadModule", name, err)
		}
	}
}

func TestStore(t *testing.T) {
	h, _ := newTestSandbox(t, Config{})
	if s := h.Store("kv.example"); s != nil {
		t.Errorf("store before any call: %v", s)
	}
	m := mustLoad(t, h, "kv")
	defer m.Close(context.Background())
	p := registration.PluginInfo{Type: "kv.example", Name: "p"}
	if err := m.ValidatePlugin(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	s := h.Store("kv.example")
	if len(s) != 1 || string(s["k"]) != "v1" {
		t.Errorf("store %q", s)
	}
	s["k"][0] = 'x' // a copy
	if got := h.Store("kv.example"); string(got["k"]) != "v1" {
		t.Errorf("store changed through the snapshot: %q", got)
	}
}
