package interop

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// waitTimeout bounds every wait on a condition in these tests. It is generous because the
// machine is small and shared; a passing test never waits for it.
const waitTimeout = 30 * time.Second

// dirs are the directories of one test, all under one short temp dir (unix socket paths are
// limited to 108 bytes).
type dirs struct {
	Root     string // the temp dir, removed when the test ends
	Sockets  string // where plugins create registration sockets (the daemon's --socket-dir)
	Handlers string // the daemon's --handler-dir
	State    string // the daemon's --state-dir
	Data     string // plugin-private data (the DRA helper's plugin data directory)
}

func newDirs(t *testing.T) dirs {
	t.Helper()
	root, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(root); err != nil {
			t.Errorf("remove %s: %v", root, err)
		}
	})
	d := dirs{
		Root:     root,
		Sockets:  filepath.Join(root, "s"),
		Handlers: filepath.Join(root, "h"),
		State:    filepath.Join(root, "st"),
		Data:     filepath.Join(root, "d"),
	}
	for _, p := range []string{d.Sockets, d.Handlers, d.Data} {
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(d.State, 0o700); err != nil {
		t.Fatal(err)
	}
	return d
}

// waitFor polls cond until it returns "" (done) or waitTimeout passes, then fails the test with
// the last reason cond gave. what names the condition in the failure.
func waitFor(t *testing.T, what string, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	tick := time.Millisecond
	for {
		why := cond()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: %s", waitTimeout, what, why)
		}
		time.Sleep(tick) // a poll interval, not a wait for something to happen
		tick = min(2*tick, 50*time.Millisecond)
	}
}

// isSocket reports "" if path is a unix socket, else what it is.
func isSocket(path string) string {
	fi, err := os.Lstat(path)
	if err != nil {
		return err.Error()
	}
	if fi.Mode().Type() != os.ModeSocket {
		return fmt.Sprintf("%s is %v, not a socket", path, fi.Mode().Type())
	}
	return ""
}

// isGone reports "" if nothing exists at path.
func isGone(path string) string {
	if _, err := os.Lstat(path); os.IsNotExist(err) {
		return ""
	}
	return path + " still exists"
}

// testLogger is a logr.Logger (what klog and the Kubernetes helpers log through) that writes to
// t.Log until the test's cleanup runs, and drops lines after that: the plugins under test log
// from their own goroutines, and t.Log after a test has ended panics.
func testLogger(t *testing.T, verbosity int) logr.Logger {
	var mu sync.Mutex
	done := false
	t.Cleanup(func() {
		mu.Lock()
		done = true
		mu.Unlock()
	})
	return funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			t.Log(strings.TrimSpace(prefix + " " + args))
		}
	}, funcr.Options{Verbosity: verbosity})
}
