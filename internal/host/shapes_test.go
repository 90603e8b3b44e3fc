package host

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// noHang fails the test if f has not returned within a minute: a call that does not stop is
// reported instead of hanging the run. The bound is no timing assertion: the calls it waits on
// have deadlines a hundred times shorter.
func noHang(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("%s: still running after a minute", what)
	}
}

// TestFIFOsInTheDaemonsOwnFiles: a FIFO in place of a kept revision makes a rollback fail with a
// reason (it waited for a writer for ever); one in the compile cache: the sandbox's
// TestFIFOInTheCompileCache.
func TestFIFOsInTheDaemonsOwnFiles(t *testing.T) {
	rh := newRevHost(t, "", RevisionConfig{})
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
	noHang(t, "rollback onto a FIFO", func() {
		_, err := rh.Rollback(context.Background(), revType, v1)
		errContains(t, err, ErrNoRevision, "not a regular file (a FIFO)")
	})
}
