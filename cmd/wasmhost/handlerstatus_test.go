package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

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
