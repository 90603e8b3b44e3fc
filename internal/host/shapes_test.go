package host

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/wasmhost/wasmhost/internal/host/policy"
	"github.com/wasmhost/wasmhost/internal/host/sandbox/sandboxtest"
)

// TestFIFOsInTheDaemonsOwnFiles: a FIFO in place of a kept revision makes a rollback fail with a
// reason (it waited for a writer for ever); one in the compile cache: the sandbox's
// TestFIFOInTheCompileCache.
func TestFIFOsInTheDaemonsOwnFiles(t *testing.T) {
	rh := newRevHost(t, "", policy.RevisionConfig{})
	rh.run(t)
	v1 := rh.install(t, "rev_v1")
	rh.install(t, "rev_v2")
	kept := filepath.Join(rh.revs, v1+".wasm")
	if err := os.Remove(kept); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(kept, 0o600); err != nil {
		t.Fatal(err)
	}
	sandboxtest.NoHang(t, "rollback onto a FIFO", func() {
		_, err := rh.Rollback(context.Background(), revType, v1)
		sandboxtest.ErrContains(t, err, policy.ErrNoRevision, "not a regular file (a FIFO)")
	})
}
