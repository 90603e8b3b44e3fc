package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/wasmhost/wasmhost/admin/v1"
)

// TestHandlerTableSaysWhen: LAST-ERROR says how long ago the error was, and a file gone from
// the handler directory says so and that it is removed unless it is back.
func TestHandlerTableSaysWhen(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	refused := &adminv1.Handler{File: "/h/a.wasm", PluginTypes: []string{"x"},
		LastError: "host: bad module /h/a.wasm: plugin type x is already handled by /h/b.wasm", LastErrorAt: timestamppb.New(now.Add(-90 * time.Second))}
	gone := &adminv1.Handler{File: "/h/b.wasm", PluginTypes: []string{"x"}, GoneSince: timestamppb.New(now.Add(-3 * time.Second))}
	var out bytes.Buffer
	if err := writeHandlerTable(&out, []*adminv1.Handler{refused, gone}, true, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"90s ago: host: bad module /h/a.wasm: plugin type x is already handled by /h/b.wasm",
		"file gone 3s ago, removed unless back within 10s",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	v := newHandlerView(refused)
	if v.LastErrorAt == nil || !v.LastErrorAt.Equal(now.Add(-90*time.Second)) || v.GoneSince != nil {
		t.Errorf("json view %+v", v)
	}
}

// TestHandlerInspectSaysBinding: `handler inspect` says a module would not serve a plugin type
// the config binds to another module or file.
func TestHandlerInspectSaysBinding(t *testing.T) {
	dir, cache := handlerCmdDir(t)
	minimal := handlerCmdCopy(t, dir, "../../abi/testdata/minimal.wasm")
	for _, tc := range []struct{ binding, want string }{
		{"digest: sha256:" + strings.Repeat("ab", 32), "daemon    REFUSED: plugin type example.wasmhost.dev/minimal is bound to the module sha256:" + strings.Repeat("ab", 32)},
		{"file: other.wasm", "daemon    REFUSED: plugin type example.wasmhost.dev/minimal is bound to the handler file "},
		{"file: minimal.wasm", "daemon    ok: this daemon would load it\n"},
	} {
		cfg := filepath.Join(dir, "wasmhost.yaml")
		if err := os.WriteFile(cfg, []byte(configHeader+"handlers:\n  types:\n    example.wasmhost.dev/minimal:\n      "+tc.binding+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		out, _ := handlerCmdRun(t, "handler", "inspect", minimal, "--config", cfg, "--cache-dir", cache)
		handlerCmdWant(t, out, tc.want)
	}
}
