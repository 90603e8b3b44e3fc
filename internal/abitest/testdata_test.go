package abitest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/abitest/fakehost"
)

var plugin = abi.PluginRequest{
	Socket: "/run/plugins_registry/demo-reg.sock", Type: "example.wasmhost.dev/minimal",
	Name: "demo", Endpoint: "/run/demo.sock", Versions: []string{"v1"},
}

func loadTestdata(t *testing.T, name string) *fakehost.Module {
	t.Helper()
	wasm, err := os.ReadFile(filepath.Join(abiTestdata, name))
	if err != nil {
		t.Fatal(err)
	}
	m, err := fakehost.Load(t.Context(), wasm)
	if err != nil {
		t.Fatalf("loading %s: %v", name, err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return m
}

// TestMinimalWAT runs the specification's worked example, testdata/minimal.wat.
func TestMinimalWAT(t *testing.T) {
	ctx := t.Context()
	m := loadTestdata(t, "minimal.wasm")
	man, _, err := m.Manifest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := (abi.Manifest{PluginTypes: []string{"example.wasmhost.dev/minimal"}, Name: "minimal"}); !reflect.DeepEqual(man, want) {
		t.Errorf("manifest %+v, want %+v", man, want)
	}
	for _, export := range []string{abi.ExportValidate, abi.ExportRegister, abi.ExportDeregister} {
		status, result, err := m.Call(ctx, export, plugin)
		if err != nil || status != abi.StatusOK || result != "" {
			t.Errorf("%s: status %d, result %q, error %v; want StatusOK", export, status, result, err)
		}
	}
	if want := []fakehost.Log{{Level: abi.LogInfo, Msg: "registered"}}; !reflect.DeepEqual(m.Logs(), want) {
		t.Errorf("logs %+v, want %+v", m.Logs(), want)
	}
}

func TestRejectWAT(t *testing.T) {
	ctx := t.Context()
	m := loadTestdata(t, "reject.wasm")
	man, _, err := m.Manifest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"example.wasmhost.dev/reject"}; !reflect.DeepEqual(man.PluginTypes, want) {
		t.Errorf("plugin types %q, want %q", man.PluginTypes, want)
	}
	status, result, err := m.Call(ctx, abi.ExportValidate, plugin)
	if err != nil || status != abi.StatusRejected || result != "this handler refuses every plugin" {
		t.Errorf("validate: status %d, result %q, error %v; want StatusRejected with the reason", status, result, err)
	}
}

// TestTestdataUpToDate checks that each committed .wasm is what wat2wasm makes of its .wat.
func TestTestdataUpToDate(t *testing.T) {
	if _, err := exec.LookPath("wat2wasm"); err != nil {
		t.Skip("wat2wasm is not installed (Debian package wabt)")
	}
	wats, err := filepath.Glob(filepath.Join(abiTestdata, "*.wat"))
	if err != nil || len(wats) == 0 {
		t.Fatalf("no testdata/*.wat: %v", err)
	}
	dir, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for _, wat := range wats {
		name := filepath.Base(wat[:len(wat)-len(".wat")]) + ".wasm"
		out := filepath.Join(dir, name)
		if b, err := exec.Command("wat2wasm", wat, "-o", out).CombinedOutput(); err != nil {
			t.Fatalf("wat2wasm %s: %v\n%s", wat, err, b)
		}
		got, err1 := os.ReadFile(out)
		committed, err2 := os.ReadFile(filepath.Join(abiTestdata, name))
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if string(got) != string(committed) {
			t.Errorf("testdata/%s is out of date with %s: run abi/testdata/gen.sh", name, wat)
		}
	}
}
