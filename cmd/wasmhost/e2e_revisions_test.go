package main

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
	"github.com/wasmhost/wasmhost/internal/state"
)

// TestE2EHandlersHistoryRollbackShadow goes through the revision commands as an operator:
// a plugin registered by v1 keeps showing what v1 published after v4 replaces the file;
// `handlers history` lists both; `handlers rollback` pins the type to v1 and `handlers` shows
// the pin; `unpin` ends it; `shadow` names a candidate and `--clear` ends it.
func TestE2EHandlersHistoryRollbackShadow(t *testing.T) {
	dirs := newE2EDirs(t, "/tmp")
	sums := map[string]string{}
	read := func(v string) []byte {
		b, err := os.ReadFile(filepath.Join("..", "..", "internal", "host", "testdata", v+".wasm"))
		if err != nil {
			t.Fatal(err)
		}
		s := sha256.Sum256(b)
		sums[v] = hex.EncodeToString(s[:])
		return b
	}
	drop := func(v string) {
		tmp := filepath.Join(dirs.Handler, ".rev.tmp")
		if err := os.WriteFile(tmp, read(v), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dirs.Handler, "rev.wasm")); err != nil {
			t.Fatal(err)
		}
	}
	candidate := filepath.Join(dirs.Base, "next.wasm")
	if err := os.WriteFile(candidate, read("rev_v3"), 0o644); err != nil {
		t.Fatal(err)
	}
	drop("rev_v1")
	rd := startDaemon(t, e2eConfig(dirs), testLog(t), nil)
	sock := rd.d.AdminSocket()
	cli := func(args ...string) string {
		t.Helper()
		out, errOut, err := runClient(t.Context(), append(args, "--admin-socket", sock)...)
		if err != nil {
			t.Fatalf("wasmhost %s: %v\n%s", strings.Join(args, " "), err, errOut)
		}
		return out
	}

	p := registrationtest.Serve(t, filepath.Join(dirs.Socket, "a.sock"), pluginInfo("rev.example", "a"), registrationtest.Options{})
	wantNotification(t, p, true, "")
	drop("rev_v4")
	waitFor(t, "v4 in the file", func() bool {
		h, ok := rd.d.State().HandlerOf("rev.example")
		return ok && h.SHA256 == sums["rev_v4"]
	})
	waitFor(t, "a registered", func() bool {
		v, ok := rd.d.State().Plugin(p.Path())
		return ok && v.State == state.StateRegistered
	})
	if out := cli("plugins", "-o", "wide"); !strings.Contains(out, "revision=v1") || !strings.Contains(out, sums["rev_v1"][:12]) {
		t.Errorf("plugins -o wide after v4 replaced v1: the plugin should show what v1 published, and v1:\n%s", out)
	}

	out := cli("handlers", "history", "rev.example")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[1], sums["rev_v4"][:12]) || !strings.Contains(lines[1], "4.0.0") ||
		!strings.Contains(lines[1], "serving, in rev.wasm") || !strings.HasPrefix(lines[2], sums["rev_v1"][:12]) ||
		!strings.Contains(lines[2], "1.0.0") {
		t.Errorf("handlers history:\n%s", out)
	}
	if out := cli("handlers", "rollback", "rev.example"); !strings.Contains(out, "served by revision "+sums["rev_v1"][:12]+" (rev 1.0.0)") {
		t.Errorf("handlers rollback: %s", out)
	}
	out = cli("handlers")
	if !strings.Contains(out, "rev.example(pinned)") || !strings.Contains(out, "PINNED  rev.example serves "+sums["rev_v1"][:12]) ||
		!strings.Contains(out, "rev ") || !strings.Contains(out, "4.0.0") {
		t.Errorf("handlers after a rollback:\n%s", out)
	}
	if out := cli("handlers", "history", "rev.example"); !strings.Contains(out, "serving (pinned)") || !strings.Contains(out, "PINNED") {
		t.Errorf("handlers history after a rollback:\n%s", out)
	}
	cli("handlers", "unpin", "rev.example")
	if out := cli("handlers"); strings.Contains(out, "pinned") {
		t.Errorf("handlers after unpin:\n%s", out)
	}

	if out := cli("handlers", "shadow", "rev.example", candidate); !strings.Contains(out, "shadowed by "+sums["rev_v3"][:12]+" (rev 3.0.0)") {
		t.Errorf("handlers shadow: %s", out)
	}
	if out := cli("handlers", "history", "rev.example", "-o", "json"); !strings.Contains(out, `"shadow": {`) || !strings.Contains(out, sums["rev_v3"]) {
		t.Errorf("history -o json with a shadow:\n%s", out)
	}
	cli("handlers", "shadow", "rev.example", "--clear")
	if out := cli("handlers"); strings.Contains(out, "SHADOW") {
		t.Errorf("handlers after the shadow was cleared:\n%s", out)
	}

	_, _, err := runClient(t.Context(), "handlers", "history", "nosuch.example", "--admin-socket", sock)
	if err == nil || !strings.Contains(err.Error(), "NotFound") || !strings.Contains(err.Error(), "nosuch.example") {
		t.Errorf("history of an unknown type: %v", err)
	}
	_, _, err = runClient(t.Context(), "handlers", "rollback", "rev.example", "abcdef0123", "--admin-socket", sock)
	if err == nil || !strings.Contains(err.Error(), "rev.example") || !strings.Contains(err.Error(), "abcdef0123") {
		t.Errorf("rollback to an unknown digest: %v", err)
	}
}
