package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/internal/admin"
	"github.com/wasmhost/wasmhost/internal/admin/admintest"
	"github.com/wasmhost/wasmhost/internal/session"
)

// TestCaptureAllLongNames: `plugins capture --all` writes every session it can, whatever the
// plugins are named: a name too long for the file system is shortened and stays apart from
// another sharing its first 240 bytes; a file it cannot write is named, the sessions after it
// are written, and the command fails at the end.
func TestCaptureAllLongNames(t *testing.T) {
	prefix := strings.Repeat("p", 240)
	names := []string{strings.Repeat("a", 250), prefix + ".one", prefix + ".two", "blocked", "../../x", "z.example"}
	var sessions []*session.Session
	for _, n := range names {
		sessions = append(sessions, &session.Session{
			APIVersion: session.APIVersion, Kind: session.Kind,
			Plugin: session.Plugin{Socket: "/r/" + n[:min(len(n), 20)] + ".sock", Type: "CSIPlugin", Name: n},
			Calls:  []session.Call{{Export: session.Validate, Result: session.Result{Status: session.StatusOK}}},
		})
	}
	// The last one's recording stopped at a bound: it is written, and said to be truncated.
	sessions[len(sessions)-1].Truncated = &session.Truncated{Exchanges: 7, Bytes: 420_000}
	_, sock := clientTestServerWith(t, &admintest.Source{}, func(c *admin.Config) {
		c.Capture = func([]string) ([]*session.Session, []string) { return sessions, nil }
	})
	dir := t.TempDir()
	// A directory in the way of one file: the file system refuses it.
	if err := os.Mkdir(filepath.Join(dir, "CSIPlugin-blocked.yaml"), 0o700); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := runClient(t.Context(), "plugins", "capture", "--all", "-o", dir, "--admin-socket", sock)
	if err == nil || !strings.Contains(err.Error(), "1 of the 6 sessions were not written") {
		t.Errorf("capture --all: err %v, want 1 of 6 not written", err)
	}
	if !strings.Contains(errOut, "not written: the session of CSIPlugin blocked (/r/blocked.sock)") {
		t.Errorf("stderr does not name the session not written:\n%s", errOut)
	}
	if !strings.Contains(errOut, "CSIPlugin-z.example.yaml: truncated at the capture's bounds, 7 host calls (420000 bytes) left out: a replay refuses it") {
		t.Errorf("stderr does not say the truncated session is:\n%s", errOut)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	got := map[string]bool{}
	for _, f := range files {
		if fi, err := os.Stat(f); err != nil || fi.IsDir() {
			continue
		}
		if len(filepath.Base(f)) > 255 || !strings.Contains(out, f+"\t") {
			t.Errorf("%s: %d bytes, printed %v", filepath.Base(f), len(filepath.Base(f)), strings.Contains(out, f))
		}
		s, err := session.Load(f)
		if err != nil {
			t.Fatal(err)
		}
		got[s.Plugin.Name] = true
	}
	for _, n := range names {
		if got[n] == (n == "blocked") {
			t.Errorf("the session of %.20s… written: %v", n, got[n])
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != len(names) {
		t.Errorf("%d entries in the directory, want %d (no file elsewhere)", len(entries), len(names))
	}
}

// TestReplayRefusesTruncated: handler test --replay, handler diff and handler bench --replay
// refuse a session whose recording stopped at a bound, naming the file and the call, rather
// than report departures that are not there.
func TestReplayRefusesTruncated(t *testing.T) {
	dir, cache := handlerCmdDir(t)
	wasm := handlerCmdCopy(t, dir, filepath.Join("..", "..", "internal", "host", "testdata", "kvread.wasm"))
	sess := filepath.Join(dir, "s.yaml")
	s := &session.Session{
		Plugin: session.Plugin{Socket: "/r/p.sock", Type: "kvread.example", Name: "p"},
		Calls: []session.Call{{Export: session.Validate, Result: session.Result{Status: session.StatusOK},
			Exchanges: []session.Exchange{{Fn: session.KVGet, Key: "v", Code: -1}},
			Truncated: &session.Truncated{Exchanges: 4967, Bytes: 298_000_000}}},
	}
	if err := session.Save(sess, s); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"handler", "test", wasm, "--replay", sess, "--cache-dir", cache},
		{"handler", "diff", wasm, wasm, sess, "--cache-dir", cache},
		{"handler", "bench", wasm, "--replay", sess, "--duration", "10ms"},
	} {
		out, err := handlerCmdRun(t, args...)
		if err == nil || !strings.Contains(err.Error(), "session "+sess+": session: truncated: calls[0] (validate)") ||
			!strings.Contains(err.Error(), "4967 host calls") || strings.Contains(out, "departs") {
			t.Errorf("%s: %v\n%s", args[1], err, out)
		}
	}
}
