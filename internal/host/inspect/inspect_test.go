package inspect

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/host/sandbox"
	"github.com/wasmhost/wasmhost/internal/logtest"
)

// fixture is a module of the host's testdata (internal/host/testdata).
func fixture(name string) string { return filepath.Join("..", "testdata", name+".wasm") }

// newTestSandbox returns a sandbox for cfg with the tests' defaults (a call timeout of 2 s, 2
// instances, the log captured) and the host's (sandbox.Config.WithDefaults); the test's end
// closes it. It describes the testdata fixtures in place.
func newTestSandbox(t testing.TB, cfg sandbox.Config) *sandbox.Sandbox {
	t.Helper()
	cfg.Logger = slog.New(&logtest.Logs{})
	cfg.CallTimeout, cfg.PoolSize = 2*time.Second, 2
	cfg, err := cfg.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("sandbox.New: %v", err)
	}
	t.Cleanup(func() {
		if err := sb.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return sb
}

func TestInspect(t *testing.T) {
	h := newTestSandbox(t, sandbox.Config{})
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
	r, err := Inspect(ctx, h, "ungranted.wasm", read("ungranted"))
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
	if r, err := Inspect(ctx, h, "nothing.wasm", nothing); err != nil || len(r.Imports) != 0 {
		t.Errorf("a module of one function and no import: imports %+v, error %v", r.Imports, err)
	}
	if _, err := h.Load(ctx, fixture("ungranted"), read("ungranted"), new(sandbox.Stats)); !errors.Is(err, sandbox.ErrNotGranted) {
		t.Errorf("Load: %v, want sandbox.ErrNotGranted", err)
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
		r, err := Inspect(ctx, h, name, read(name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if (wantErr == "") != (r.DescribeError == "") || !strings.Contains(r.DescribeError, wantErr) {
			t.Errorf("%s: DescribeError %q, want %q", name, r.DescribeError, wantErr)
		}
	}
	if r, _ := Inspect(ctx, h, "abi2", read("abi2")); r.ABIVersion != 2 {
		t.Errorf("abi2: version %d", r.ABIVersion)
	}
	small := newTestSandbox(t, sandbox.Config{MemoryLimit: 64 << 10})
	if r, err := Inspect(ctx, small, "bigmem", read("bigmem")); err != nil || !strings.Contains(r.DescribeError, "not instantiated: its memory minimum of 2000 pages") || len(r.Exports) != 6 {
		t.Errorf("bigmem over the memory limit: %+v, %v", r, err)
	}
	for _, name := range []string{"notwasm", "truncated"} {
		if _, err := Inspect(ctx, h, name, read(name)); !errors.Is(err, sandbox.ErrBadModule) {
			t.Errorf("%s: %v, want ErrBadModule", name, err)
		}
	}
}
