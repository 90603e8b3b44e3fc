package abitest

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/abi/guest/guesttest"
	"github.com/wasmhost/wasmhost/conformance"
	"github.com/wasmhost/wasmhost/internal/abitest/fakehost"
)

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

// TestExampleModule builds the Go SDK's example handler (examples/handler-go) and runs it: its shape, then the tutorial's
// behaviour under the fake host.
func TestExampleModule(t *testing.T) {
	wasm := guesttest.BuildBytes(t, "github.com/wasmhost/wasmhost/examples/handler-go")
	conformance.CheckShape(t, wasm, []string{abi.ImportRequestRead, abi.ImportResultSet, abi.ImportLog,
		abi.ImportPublish, abi.ImportKVGet, abi.ImportKVSet, abi.ImportKVDelete, abi.ImportErrorRead})

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
	wasm := guesttest.BuildBytes(t, "./testdata/sdkmod")
	conformance.CheckShape(t, wasm, []string{abi.ImportRequestRead, abi.ImportResultSet, abi.ImportPublish,
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
