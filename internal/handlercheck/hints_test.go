package handlercheck

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/internal/host/sandbox"
)

// TestNotWasmHint: a file that is not a module is told apart by what it seems to be, and a
// module is not taken for something else.
func TestNotWasmHint(t *testing.T) {
	for in, want := range map[string]string{
		"":                          "the file is empty",
		"\x7fELF\x02\x01":           "native executable",
		"(module (func))":           "WebAssembly text",
		"\x00asm\x02\x00\x00\x00":   "unsupported binary version",
		"\x00asm\x01\x00\x00\x00":   "",
		"#!/bin/sh\necho handler\n": "",
	} {
		got := NotWasmHint([]byte(in))
		if want == "" && got != "" || !strings.Contains(got, want) {
			t.Errorf("NotWasmHint(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestLoadHints: each refusal an author can fix gets its fix, naming the file, the plugin types
// and the capabilities; a refusal with no known fix gets none.
func TestLoadHints(t *testing.T) {
	grant := LoadHints(fmt.Errorf("load: %w", sandbox.ErrNotGranted), "/h/m.wasm", []string{"CSIPlugin"}, []string{"plugin_call"})
	if len(grant) != 1 || !strings.Contains(grant[0], "handlers.types.CSIPlugin.capabilities: [plugin_call]") {
		t.Errorf("not granted: %q", grant)
	}
	insecure := LoadHints(fmt.Errorf("load: %w", sandbox.ErrInsecure), "/h/m.wasm", nil, nil)
	if len(insecure) != 1 || !strings.Contains(insecure[0], "chmod go-w /h/m.wasm") {
		t.Errorf("insecure: %q", insecure)
	}
	abort := LoadHints(errors.New("module[env] not instantiated"), "/h/m.wasm", nil, nil)
	if len(abort) != 1 || !strings.Contains(abort[0], "--use abort=") {
		t.Errorf("AssemblyScript abort: %q", abort)
	}
	if other := LoadHints(errors.New("wasm trap: unreachable"), "/h/m.wasm", nil, nil); len(other) != 0 {
		t.Errorf("a trap: %q, want no hint", other)
	}
}

// TestReadModule refuses what the daemon would not read as a handler, naming the file.
func TestReadModule(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadModule(dir); err == nil || !strings.Contains(err.Error(), dir+" is not a regular file") {
		t.Errorf("a directory: %v", err)
	}
	big := filepath.Join(dir, "big.wasm")
	if err := os.WriteFile(big, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, MaxModuleSize+1); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadModule(big); err == nil || !strings.Contains(err.Error(), big+": 67108865 bytes, over the daemon's limit of 64 MiB") {
		t.Errorf("a file over the limit: %v", err)
	}
}
