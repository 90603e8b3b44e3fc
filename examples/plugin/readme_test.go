package main

import (
	"os/exec"
	"testing"

	"github.com/wasmhost/wasmhost/internal/doctest"
)

// TestReadmeOutsideTheCheckout follows README.md word for word from a directory outside the
// repository, beside a checkout of it, as someone who wants the example plugin elsewhere
// would: it builds the plugin from the checkout and runs the binary.
func TestReadmeOutsideTheCheckout(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the example plugin")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command in PATH")
	}
	page := doctest.Parse(t, "README.md", "plugin")
	if len(page.Steps) < 2 {
		t.Fatalf("README.md shows %d commands, want the build and the run", len(page.Steps))
	}
	page.Run(t, doctest.Workspace(t, "../..", "plugin"))
}
