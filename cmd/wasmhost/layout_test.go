package main

import (
	"go/build"
	"strings"
	"testing"
)

// TestCommandsLeaveTheWorkToPackages: the command line parses flags and prints; what it
// prints is made by packages (issue 31). It reaches the handlers' sandbox only through the
// tools' packages (handlercheck, handlerbench, harness, the conformance kit) and the daemon,
// never the host, the sandbox, registration, the reconciler or the watcher themselves.
func TestCommandsLeaveTheWorkToPackages(t *testing.T) {
	const module = "github.com/wasmhost/wasmhost/"
	bp, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(bp.Imports) == 0 {
		t.Fatal("cmd/wasmhost imports nothing")
	}
	for _, imp := range bp.Imports {
		rel, ok := strings.CutPrefix(imp, module)
		if !ok {
			continue
		}
		for _, stage := range []string{"internal/host", "internal/registration", "internal/reconciler", "internal/watcher"} {
			if rel == stage || strings.HasPrefix(rel, stage+"/") {
				t.Errorf("cmd/wasmhost imports %s: the work it does belongs in a package the command calls", rel)
			}
		}
	}
}
