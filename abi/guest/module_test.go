package guest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/abi/internal/fakehost"
)

// buildModule builds the Go package pkg for wasip1 as a reactor, the way the Makefile builds
// handlers, and returns the module's bytes.
func buildModule(t *testing.T, pkg string) []byte {
	t.Helper()
	if testing.Short() {
		t.Skip("builds a WebAssembly module with the Go toolchain")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command in PATH")
	}
	dir, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	out := filepath.Join(dir, "m.wasm")
	cmd := exec.Command(gobin, "build", "-buildmode=c-shared", "-trimpath", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	start := time.Now()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	took := time.Since(start)
	wasm, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d bytes, built in %v", pkg, len(wasm), took.Round(time.Millisecond))
	return wasm
}

// checkShape compiles wasm and checks that it exports exactly the ABI's exports with their
// signatures, and imports exactly wantImports from abi.ImportModule (with their signatures) and
// nothing but WASI besides.
func checkShape(t *testing.T, wasm []byte, wantImports []string) {
	t.Helper()
	ctx := t.Context()
	// The interpreter validates and decodes exactly as the compiler does, and compiles a Go
	// module in a fraction of the time (the compiler takes over 10 s under -race).
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(context.Background())
	start := time.Now()
	compiled, err := rt.CompileModule(ctx, wasm)
	if err != nil {
		t.Fatalf("compiling: %v", err)
	}
	t.Logf("wazero compile: %v", time.Since(start).Round(time.Millisecond))

	var exports []string
	for name, def := range compiled.ExportedFunctions() {
		exports = append(exports, name)
		sig, ok := abi.ExportSignatures[name]
		if !ok {
			continue
		}
		if !sameTypes(def.ParamTypes(), sig.Params) || !sameTypes(def.ResultTypes(), sig.Results) {
			t.Errorf("export %s has signature %v -> %v, want %v -> %v", name, def.ParamTypes(), def.ResultTypes(), sig.Params, sig.Results)
		}
	}
	wantExports := append([]string{abi.ExportInitialize}, abi.RequiredExports...)
	slices.Sort(exports)
	slices.Sort(wantExports)
	if !slices.Equal(exports, wantExports) {
		t.Errorf("function exports %q, want %q", exports, wantExports)
	}
	if _, ok := compiled.ExportedMemories()[abi.ExportMemory]; !ok || len(compiled.ExportedMemories()) != 1 {
		t.Errorf("memory exports %v, want only %q", compiled.ExportedMemories(), abi.ExportMemory)
	}

	var imports []string
	for _, def := range compiled.ImportedFunctions() {
		mod, name, _ := def.Import()
		switch mod {
		case "wasi_snapshot_preview1":
		case abi.ImportModule:
			imports = append(imports, name)
			sig, ok := abi.ImportSignatures[name]
			if !ok {
				t.Errorf("imports %s.%s, which the ABI does not define", mod, name)
			} else if !sameTypes(def.ParamTypes(), sig.Params) || !sameTypes(def.ResultTypes(), sig.Results) {
				t.Errorf("import %s has signature %v -> %v, want %v -> %v", name, def.ParamTypes(), def.ResultTypes(), sig.Params, sig.Results)
			}
		default:
			t.Errorf("imports %s.%s: only %s and WASI are allowed", mod, name, abi.ImportModule)
		}
	}
	if len(compiled.ImportedMemories()) != 0 {
		t.Errorf("imports a memory")
	}
	slices.Sort(imports)
	slices.Sort(wantImports)
	if !slices.Equal(imports, wantImports) {
		t.Errorf("%s imports %q, want %q", abi.ImportModule, imports, wantImports)
	}
}

func sameTypes[A, B ~byte](a []A, b []B) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if byte(a[i]) != byte(b[i]) {
			return false
		}
	}
	return true
}

func load(t *testing.T, wasm []byte) *fakehost.Module {
	t.Helper()
	m, err := fakehost.Load(t.Context(), wasm)
	if err != nil {
		t.Fatalf("loading: %v", err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return m
}

type call struct {
	export string
	plugin abi.PluginRequest
	status int32
	result string // a prefix of the result
}

func run(t *testing.T, m *fakehost.Module, calls []call) {
	t.Helper()
	for _, c := range calls {
		status, result, err := m.Call(t.Context(), c.export, c.plugin)
		if err != nil {
			t.Fatalf("%s(%s): %v\nguest output: %s", c.export, c.plugin.Name, err, m.Output())
		}
		if status != c.status || !strings.HasPrefix(result, c.result) || (c.result == "" && result != "") {
			t.Errorf("%s(%s) = %d %q, want %d %q", c.export, c.plugin.Name, status, result, c.status, c.result)
		}
	}
}

// TestExampleModule builds handlers-wasm/example and runs it: its shape, then the tutorial's
// behaviour under the fake host.
func TestExampleModule(t *testing.T) {
	wasm := buildModule(t, "github.com/wasmhost/wasmhost/handlers-wasm/example")
	checkShape(t, wasm, []string{abi.ImportRequestRead, abi.ImportResultSet, abi.ImportLog,
		abi.ImportPublish, abi.ImportKVGet, abi.ImportKVSet, abi.ImportKVDelete})

	m := load(t, wasm)
	man, _, err := m.Manifest(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if want := (abi.Manifest{PluginTypes: []string{"example.wasmhost.dev"}, Name: "example", Version: "0.1.0"}); !reflect.DeepEqual(man, want) {
		t.Errorf("manifest %+v, want %+v", man, want)
	}
	good := abi.PluginRequest{Type: "example.wasmhost.dev", Name: "demo", Endpoint: "/run/demo.sock", Versions: []string{"v0", "v1"}}
	old := abi.PluginRequest{Type: "example.wasmhost.dev", Name: "old", Versions: []string{"v0"}}
	run(t, m, []call{
		{abi.ExportValidate, good, abi.StatusOK, ""},
		{abi.ExportValidate, old, abi.StatusRejected, "plugin old supports versions [v0]; this handler needs v1"},
		{abi.ExportRegister, good, abi.StatusOK, ""},
	})
	if got, want := m.KV(), map[string]string{"plugin/demo": "/run/demo.sock"}; !reflect.DeepEqual(got, want) {
		t.Errorf("after register: kv %v, want %v", got, want)
	}
	if got, want := m.Published(), map[string]string{"endpoint": "/run/demo.sock"}; !reflect.DeepEqual(got, want) {
		t.Errorf("after register: published %v, want %v", got, want)
	}
	run(t, m, []call{{abi.ExportDeregister, good, abi.StatusOK, ""}})
	if got := m.KV(); len(got) != 0 {
		t.Errorf("after deregister: kv %v, want empty", got)
	}
	want := []fakehost.Log{
		{Level: abi.LogInfo, Msg: "registering demo at /run/demo.sock"},
		{Level: abi.LogInfo, Msg: "deregistering demo, registered at /run/demo.sock"},
	}
	if !reflect.DeepEqual(m.Logs(), want) {
		t.Errorf("logs %+v, want %+v", m.Logs(), want)
	}
}

// TestSDKModule builds testdata/sdkmod, which uses plugincall but neither Log nor KV.
func TestSDKModule(t *testing.T) {
	wasm := buildModule(t, "./testdata/sdkmod")
	checkShape(t, wasm, []string{abi.ImportRequestRead, abi.ImportResultSet, abi.ImportPublish,
		abi.ImportPluginCall, abi.ImportErrorRead})

	m := load(t, wasm)
	man, _, err := m.Manifest(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"sdk.test/a", "sdk.test/b"}; !reflect.DeepEqual(man.PluginTypes, want) {
		t.Errorf("plugin types %q, want %q", man.PluginTypes, want)
	}
	var methods []string
	m.PluginCall = func(method string, req []byte) ([]byte, error) {
		methods = append(methods, method)
		switch string(req) {
		case "big":
			return []byte(strings.Repeat("b", 100<<10)), nil
		case "down":
			return nil, errors.New("connection refused")
		}
		return append([]byte("echo:"), req...), nil
	}
	p := func(name string) abi.PluginRequest { return abi.PluginRequest{Name: name} }
	run(t, m, []call{
		{abi.ExportValidate, p("ok"), abi.StatusOK, ""},
		{abi.ExportValidate, p("reject"), abi.StatusRejected, "checked the versions\nversion 9 is not supported"},
		{abi.ExportValidate, p("fail"), abi.StatusError, "the handler is broken"},
		{abi.ExportValidate, p("panic"), abi.StatusError, "guest: handler panicked: runtime error: index out of range"},
		{abi.ExportValidate, p("ok"), abi.StatusOK, ""}, // the instance still works after a recovered panic
		{abi.ExportRegister, p("x"), abi.StatusOK, ""},
	})
	if got, want := m.Published(), map[string]string{"len": "6", "head": "echo:x"}; !reflect.DeepEqual(got, want) {
		t.Errorf("published %v, want %v", got, want)
	}
	run(t, m, []call{
		{abi.ExportRegister, p("big"), abi.StatusOK, ""},
		{abi.ExportRegister, p("down"), abi.StatusError, "plugincall: /test.Echo/Echo: guest: failed: connection refused"},
		{abi.ExportDeregister, p("x"), abi.StatusError, "guest: publish not: guest: denied"},
	})
	if got := m.Published()["len"]; got != "102400" {
		t.Errorf("published len %q after a 100 KiB response, want 102400", got)
	}
	// x, then big twice (the first buffer was too small), then down.
	if want := []string{"/test.Echo/Echo", "/test.Echo/Echo", "/test.Echo/Echo", "/test.Echo/Echo"}; !slices.Equal(methods, want) {
		t.Errorf("plugin calls %q, want %q", methods, want)
	}
}
