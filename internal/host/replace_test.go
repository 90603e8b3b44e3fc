package host

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/host/policy"
	"github.com/wasmhost/wasmhost/internal/host/sandbox/sandboxtest"
	"github.com/wasmhost/wasmhost/internal/limits"
	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/testwait"
)

// tool returns the path of a command the test drives, or skips the test when it is not
// installed (outside CI: in CI every tool must be there).
func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not installed (CI is set: every tool must be)", name)
		}
		t.Skipf("%s is not installed", name)
	}
	return p
}

func run(t *testing.T, dir string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(tool(t, name), args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// atomicWrite does what the kubelet's atomic writer does to a ConfigMap or Secret volume: each
// key is a symlink name -> ..data/name, ..data a symlink to a timestamped directory; an update
// writes a new timestamped directory, points ..data_tmp at it, renames ..data_tmp over ..data
// and removes the old directory.
func atomicWrite(t *testing.T, dir, name, src string) {
	t.Helper()
	ts := "..2026_11_23_" + time.Now().Format("15_04_05.000000000")
	if err := os.Mkdir(filepath.Join(dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	sandboxtest.CopyFile(t, src, filepath.Join(dir, ts, name), 0o644)
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	if err := os.Symlink(ts, filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, name)); err != nil {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRunEveryWayOfReplacing drives each way an operator or a tool replaces a handler file,
// with the real tools, against a handler serving plugins: the plugin type never leaves the
// registry (so the reconciler deregisters nothing), nothing is logged as an error, no removal
// is pending, and the new revision serves behind the same registered handler.
func TestRunEveryWayOfReplacing(t *testing.T) {
	abs := func(name string) string {
		p, err := filepath.Abs(fixture(name))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	// The fixtures are copied to 0644 sources: the tools keep the mode of what they copy, and
	// a checkout may have made them group-writable.
	srcDir := sandboxtest.TempDir(t)
	v1, v2 := filepath.Join(srcDir, "v1.wasm"), filepath.Join(srcDir, "v2.wasm")
	sandboxtest.CopyFile(t, abs("reload_v1"), v1, 0o644)
	sandboxtest.CopyFile(t, abs("reload_v2"), v2, 0o644)
	touchPast := func(p string) {
		past := time.Now().Add(-time.Hour)
		if err := os.Chtimes(p, past, past); err != nil {
			t.Fatal(err)
		}
	}
	touchPast(v1)
	touchPast(v2)

	cases := []struct {
		name string
		// setup puts version 1 in dir as the pattern keeps it; replace puts version 2.
		setup   func(t *testing.T, dir string)
		replace func(t *testing.T, dir string)
		// handlers is the directory the host follows, when not dir itself.
		handlers func(base string) string
	}{
		{
			name:    "cp in place",
			replace: func(t *testing.T, dir string) { run(t, dir, "cp", v2, "reload.wasm") },
		},
		{
			name:    "install -m 0644 (unlink and create)",
			replace: func(t *testing.T, dir string) { run(t, dir, "install", "-m", "0644", v2, "reload.wasm") },
		},
		{
			name: "cp to a temporary name, mv over",
			replace: func(t *testing.T, dir string) {
				run(t, dir, "cp", v2, "reload.wasm.new")
				run(t, dir, "mv", "reload.wasm.new", "reload.wasm")
			},
		},
		{
			name: "mv from another directory",
			replace: func(t *testing.T, dir string) {
				tmp := filepath.Join(filepath.Dir(dir), "staged.wasm")
				run(t, dir, "cp", "-p", v2, tmp)
				run(t, dir, "mv", tmp, "reload.wasm")
			},
		},
		{
			name:    "rsync (a dot-file, then rename)",
			replace: func(t *testing.T, dir string) { run(t, dir, "rsync", v2, "reload.wasm") },
		},
		{
			name:    "rsync -a --delay-updates",
			replace: func(t *testing.T, dir string) { run(t, dir, "rsync", "-a", "--delay-updates", v2, "reload.wasm") },
		},
		{
			name: "editor: backup by rename, write anew, drop the backup",
			replace: func(t *testing.T, dir string) {
				run(t, dir, "mv", "reload.wasm", "reload.wasm~")
				run(t, dir, "cp", v2, "reload.wasm")
				run(t, dir, "rm", "reload.wasm~")
			},
		},
		{
			name:  "ConfigMap volume (the atomic writer)",
			setup: func(t *testing.T, dir string) { atomicWrite(t, dir, "reload.wasm", v1) },
			replace: func(t *testing.T, dir string) {
				atomicWrite(t, dir, "reload.wasm", v2)
			},
		},
		{
			name: "directory deleted and made again (rm -rf, mkdir, cp)",
			replace: func(t *testing.T, dir string) {
				run(t, filepath.Dir(dir), "rm", "-rf", dir)
				run(t, filepath.Dir(dir), "mkdir", "-m", "0755", dir)
				run(t, dir, "cp", v2, "reload.wasm")
			},
		},
		{
			name: "directory swapped for another (an image volume that changes)",
			replace: func(t *testing.T, dir string) {
				next := dir + ".next"
				run(t, filepath.Dir(dir), "mkdir", "-m", "0755", next)
				run(t, next, "cp", "-p", v2, "reload.wasm")
				run(t, filepath.Dir(dir), "mv", dir, dir+".old")
				run(t, filepath.Dir(dir), "mv", next, dir)
				run(t, filepath.Dir(dir), "rm", "-rf", dir+".old")
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			base := sandboxtest.TempDir(t)
			dir := filepath.Join(base, "h")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if tc.setup != nil {
				tc.setup(t, dir)
			} else {
				run(t, dir, "cp", "-p", v1, "reload.wasm")
			}
			h, logs := newStrictHost(t, Config{HandlerDir: dir, RemovalGrace: time.Hour})
			startRun(t, h)
			ctx := context.Background()
			hd := handlerFor(t, h.Registry(), "reload.example")
			// Plugins registered through it.
			for _, p := range []string{"p1", "p2"} {
				if err := hd.ValidatePlugin(ctx, sandboxtest.Info("reload.example", p)); err != nil {
					t.Fatal(err)
				}
				if _, err := hd.RegisterPlugin(ctx, sandboxtest.Info("reload.example", p)); err != nil {
					t.Fatal(err)
				}
			}

			tc.replace(t, dir)

			testwait.Until(t, "version 2 to serve", func() bool { return isV2(hd.ValidatePlugin(ctx, sandboxtest.Info("reload.example", "p3"))) })
			testwait.Until(t, "the status to show version 2 serving, nothing gone", func() bool {
				st := h.Handlers()
				return len(st) == 1 && st[0].Serving && st[0].GoneSince.IsZero() && st[0].File == filepath.Join(dir, "reload.wasm") &&
					st[0].SHA256 == sandboxtest.FileSHA256(t, v2)
			})
			if now, ok := h.Registry().Get("reload.example"); !ok || now != hd {
				t.Error("the plugin type's handler changed in the registry: its plugins would be deregistered")
			}
			if gone := hd.(*policy.TypeHandler).Gone(); gone != "" {
				t.Errorf("the plugin type's handler was retired: %s", gone)
			}
			if n := logs.Count("retired"); n != 0 {
				t.Errorf("%d plugin type retirements logged", n)
			}
			for _, p := range []string{"p1", "p2"} {
				if err := hd.DeRegisterPlugin(ctx, sandboxtest.Info("reload.example", p)); err != nil {
					t.Errorf("DeRegisterPlugin(%s) through the new revision: %v", p, err)
				}
			}
			logs.NoErrors(t)
		})
	}
}

// TestRunInstallNewFileNoFalseError installs new handler files with install(1), which creates
// the file and then writes it: a file caught half-written is never refused.
func TestRunInstallNewFileNoFalseError(t *testing.T) {
	tool(t, "install")
	dir := sandboxtest.TempDir(t)
	h, logs := newStrictHost(t, Config{HandlerDir: dir, RemovalGrace: time.Millisecond})
	startRun(t, h)
	src := filepath.Join(sandboxtest.TempDir(t), "min.wasm")
	sandboxtest.CopyFile(t, fixture("min"), src, 0o644)
	for i := range 10 {
		name := "min" + string(rune('a'+i)) + ".wasm"
		if i > 0 {
			// Each file its own type would need its own fixture: the earlier one goes first.
			if err := os.Remove(filepath.Join(dir, "min"+string(rune('a'+i-1))+".wasm")); err != nil {
				t.Fatal(err)
			}
			testwait.Until(t, "the previous file to be removed", func() bool { return len(h.Handlers()) == 0 })
		}
		run(t, dir, "install", "-m", "0644", src, name)
		testwait.Until(t, name+" to serve", func() bool {
			s, ok := status(h, filepath.Join(dir, name))
			return ok && s.Serving
		})
		if s, _ := status(h, filepath.Join(dir, name)); s.LastError != "" {
			t.Errorf("%s: last error %q", name, s.LastError)
		}
	}
	logs.NoErrors(t)
}

// TestRunRemovalGrace: a file removed keeps serving, shown gone, until it has stayed gone for
// the removal grace; a handler directory deleted counts as the removal of all its files, those
// unlinked before it went included.
func TestRunRemovalGrace(t *testing.T) {
	base := sandboxtest.TempDir(t)
	dir := filepath.Join(base, "h")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sandboxtest.CopyFile(t, fixture("reload_v1"), filepath.Join(dir, "reload.wasm"), 0o644)
	sandboxtest.CopyFile(t, fixture("min"), filepath.Join(dir, "min.wasm"), 0o644)
	const grace = 300 * time.Millisecond
	h, logs := newStrictHost(t, Config{HandlerDir: dir, RemovalGrace: grace})
	startRun(t, h)
	ctx := context.Background()
	hd := handlerFor(t, h.Registry(), "reload.example")

	removed := time.Now()
	if err := os.Remove(filepath.Join(dir, "reload.wasm")); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the file to be shown gone", func() bool {
		s, _ := status(h, filepath.Join(dir, "reload.wasm"))
		return !s.GoneSince.IsZero()
	})
	if s, _ := status(h, filepath.Join(dir, "reload.wasm")); !s.Serving || !h.Registry().Has("reload.example") {
		if time.Since(removed) < grace {
			t.Errorf("removed before its grace ended: %+v", s)
		}
	}
	testwait.Until(t, "the type to leave the registry", func() bool { return !h.Registry().Has("reload.example") })
	if took := time.Since(removed); took < grace {
		t.Errorf("removed %v after the file went, before the grace of %v", took, grace)
	}
	if err := hd.DeRegisterPlugin(ctx, sandboxtest.Info("reload.example", "p")); err != nil {
		t.Errorf("the retired handler no longer deregisters: %v", err)
	}

	// rm -rf: min.wasm is unlinked before the directory goes; it is removed like the rest,
	// once the grace has passed, and not before.
	removed = time.Now()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "min.example to leave the registry", func() bool { return !h.Registry().Has("min.example") })
	if took := time.Since(removed); took < grace {
		t.Errorf("a file of the deleted directory was removed %v after, before the grace of %v", took, grace)
	}
	testwait.Until(t, "the removal's log line", func() bool { _, ok := logs.Find("handler file removed"); return ok })
	logs.NoErrors(t)
}

// TestRunTypeOwnership: without a binding, a plugin type stays with the file serving it (a
// newcomer is refused, and shown so) and at start goes to the first file by name, refused the
// same way; a binding to a file or a digest decides whatever the names and the order.
func TestRunTypeOwnership(t *testing.T) {
	t.Run("no binding: the incumbent keeps it, at run time and at start", func(t *testing.T) {
		dir := sandboxtest.TempDir(t)
		sandboxtest.CopyFile(t, fixture("reload_v1"), filepath.Join(dir, "csi.wasm"), 0o644)
		h, _ := newStrictHost(t, Config{HandlerDir: dir})
		stop := startRun(t, h)
		handlerFor(t, h.Registry(), "reload.example")
		installFile(t, fixture("reload_v2"), filepath.Join(dir, "a.wasm"))
		want := "plugin type reload.example is already handled by " + filepath.Join(dir, "csi.wasm")
		testwait.Until(t, "a.wasm to be refused", func() bool {
			s, _ := status(h, filepath.Join(dir, "a.wasm"))
			return strings.Contains(s.LastError, want)
		})
		if s, _ := status(h, filepath.Join(dir, "csi.wasm")); !s.Serving {
			t.Errorf("csi.wasm lost the type to a newcomer: %+v", s)
		}
		stop()

		// At start with nothing remembered (no revision store), the first by name takes it;
		// the other is refused with the same words.
		h2, _ := newStrictHost(t, Config{HandlerDir: dir})
		startRun(t, h2)
		want = "plugin type reload.example is already handled by " + filepath.Join(dir, "a.wasm")
		if s, _ := status(h2, filepath.Join(dir, "csi.wasm")); s.Serving || !strings.Contains(s.LastError, want) {
			t.Errorf("csi.wasm at start: %+v, want refused with %q", s, want)
		}
	})
	t.Run("with the revision store: a restart keeps the incumbent", func(t *testing.T) {
		dir, revDir := sandboxtest.TempDir(t), filepath.Join(sandboxtest.TempDir(t), "revisions")
		run := func() *Host {
			h, _ := newStrictHost(t, Config{HandlerDir: dir})
			if err := h.ConfigureRevisions(policy.RevisionConfig{Dir: revDir}); err != nil {
				t.Fatal(err)
			}
			stop := startRun(t, h)
			t.Cleanup(func() { stop(); h.Close(context.Background()) })
			return h
		}
		sandboxtest.CopyFile(t, fixture("reload_v1"), filepath.Join(dir, "csi.wasm"), 0o644)
		h := run()
		handlerFor(t, h.Registry(), "reload.example")
		installFile(t, fixture("reload_v2"), filepath.Join(dir, "a.wasm"))
		want := "plugin type reload.example is already handled by " + filepath.Join(dir, "csi.wasm")
		testwait.Until(t, "a.wasm to be refused", func() bool {
			s, _ := status(h, filepath.Join(dir, "a.wasm"))
			return strings.Contains(s.LastError, want)
		})
		if err := h.Close(context.Background()); err != nil {
			t.Fatal(err)
		}

		// Restarted: csi.wasm served the type, so it keeps it, though a.wasm comes first by
		// name; a.wasm is refused with the same words.
		h2 := run()
		if s, _ := status(h2, filepath.Join(dir, "csi.wasm")); !s.Serving {
			t.Errorf("csi.wasm after the restart: %+v, want serving", s)
		}
		if s, _ := status(h2, filepath.Join(dir, "a.wasm")); s.Serving || !strings.Contains(s.LastError, want) {
			t.Errorf("a.wasm after the restart: %+v, want refused with %q", s, want)
		}
	})
	t.Run("bound to a file", func(t *testing.T) {
		dir := sandboxtest.TempDir(t)
		sandboxtest.CopyFile(t, fixture("reload_v2"), filepath.Join(dir, "a.wasm"), 0o644)
		sandboxtest.CopyFile(t, fixture("reload_v1"), filepath.Join(dir, "csi.wasm"), 0o644)
		h, _ := newStrictHost(t, Config{HandlerDir: dir, Bindings: map[string]policy.Binding{
			"reload.example": {File: filepath.Join(dir, "csi.wasm")},
		}})
		startRun(t, h)
		if s, _ := status(h, filepath.Join(dir, "csi.wasm")); !s.Serving {
			t.Errorf("the bound file does not serve: %+v", s)
		}
		s, _ := status(h, filepath.Join(dir, "a.wasm"))
		if s.Serving || !strings.Contains(s.LastError, "bound to the handler file "+filepath.Join(dir, "csi.wasm")) {
			t.Errorf("a.wasm: %+v", s)
		}
		// Counted as refused by the binding, not as a conflict between files.
		if r := h.Refusals(); r[RefusedNotBound] != 1 || r[RefusedConflict] != 0 {
			t.Errorf("refusals %v, want one %s and no %s", r, RefusedNotBound, RefusedConflict)
		}
	})
	t.Run("bound to a digest", func(t *testing.T) {
		dir := sandboxtest.TempDir(t)
		sandboxtest.CopyFile(t, fixture("reload_v1"), filepath.Join(dir, "a.wasm"), 0o644)
		h, _ := newStrictHost(t, Config{HandlerDir: dir, Bindings: map[string]policy.Binding{
			"reload.example": {Digest: "sha256:" + sandboxtest.FileSHA256(t, fixture("reload_v2"))},
		}})
		startRun(t, h)
		if s, _ := status(h, filepath.Join(dir, "a.wasm")); s.Serving || !strings.Contains(s.LastError, "bound to the module sha256:") {
			t.Errorf("a module of another digest: %+v", s)
		}
		installFile(t, fixture("reload_v2"), filepath.Join(dir, "a.wasm"))
		testwait.Until(t, "the module of the bound digest to serve", func() bool {
			s, _ := status(h, filepath.Join(dir, "a.wasm"))
			return s.Serving
		})
	})
	t.Run("two hosts on one registry", func(t *testing.T) {
		reg := registration.NewRegistry()
		dir1, dir2 := sandboxtest.TempDir(t), sandboxtest.TempDir(t)
		sandboxtest.CopyFile(t, fixture("reload_v1"), filepath.Join(dir1, "reload.wasm"), 0o644)
		h1, _ := newStrictHost(t, Config{HandlerDir: dir1, Registry: reg})
		startRun(t, h1)
		hd := handlerFor(t, reg, "reload.example")
		sandboxtest.CopyFile(t, fixture("reload_v2"), filepath.Join(dir2, "reload.wasm"), 0o644)
		h2, _ := newStrictHost(t, Config{HandlerDir: dir2, Registry: reg})
		startRun(t, h2)
		s, _ := status(h2, filepath.Join(dir2, "reload.wasm"))
		if s.Serving || !strings.Contains(s.LastError, "already handled by "+filepath.Join(dir1, "reload.wasm")) {
			t.Errorf("the second host's file: %+v", s)
		}
		if r := h2.Refusals(); r[RefusedConflict] != 1 || r[RefusedNotBound] != 0 {
			t.Errorf("refusals %v, want one %s", r, RefusedConflict)
		}
		if now, _ := reg.Get("reload.example"); now != hd {
			t.Error("the second host displaced the first's handler")
		}
	})
}

// TestRunLastErrorIsPast: a refused update shows its error and when; the next revision that
// loads clears it, and so does the file getting the serving bytes back.
func TestRunLastErrorIsPast(t *testing.T) {
	dir := sandboxtest.TempDir(t)
	path := filepath.Join(dir, "reload.wasm")
	sandboxtest.CopyFile(t, fixture("reload_v1"), path, 0o644)
	h, _ := newStrictHost(t, Config{HandlerDir: dir})
	startRun(t, h)
	ctx := context.Background()
	hd := handlerFor(t, h.Registry(), "reload.example")

	refused := func() {
		t.Helper()
		before := time.Now()
		installFile(t, fixture("notwasm"), path)
		testwait.Until(t, "the broken update to be refused", func() bool {
			s, _ := status(h, path)
			return strings.Contains(s.LastError, "not valid WebAssembly")
		})
		if s, _ := status(h, path); s.LastErrorAt.Before(before) || !s.Serving {
			t.Errorf("refused update: %+v", s)
		}
	}
	refused()
	installFile(t, fixture("reload_v2"), path)
	testwait.Until(t, "version 2", func() bool { return isV2(hd.ValidatePlugin(ctx, sandboxtest.Info("reload.example", "p"))) })
	// Cleared as the new revision is installed (a moment after it starts serving).
	testwait.Until(t, "the error of the refused update to be cleared by the next revision", func() bool {
		s, _ := status(h, path)
		return s.LastError == "" && s.LastErrorAt.IsZero()
	})

	refused()
	installFile(t, fixture("reload_v2"), path) // the bytes serving
	testwait.Until(t, "the refusal to be cleared", func() bool { s, _ := status(h, path); return s.LastError == "" })
}

// TestRunTogetherFirstByName: files that arrive together (a directory swapped for another, an
// image volume that changes) and declare one plugin type go by name, as at start.
func TestRunTogetherFirstByName(t *testing.T) {
	base := sandboxtest.TempDir(t)
	dir := filepath.Join(base, "h")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	h, _ := newStrictHost(t, Config{HandlerDir: dir, RemovalGrace: time.Hour})
	startRun(t, h)
	next := filepath.Join(base, "next")
	if err := os.Mkdir(next, 0o755); err != nil {
		t.Fatal(err)
	}
	// b.wasm first, by time: the name decides, not the order.
	sandboxtest.CopyFile(t, fixture("reload_v1"), filepath.Join(next, "b.wasm"), 0o644)
	sandboxtest.CopyFile(t, fixture("reload_v2"), filepath.Join(next, "a.wasm"), 0o644)
	if err := os.Rename(dir, dir+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, dir); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "both files to be tried", func() bool {
		a, _ := status(h, filepath.Join(dir, "a.wasm"))
		b, _ := status(h, filepath.Join(dir, "b.wasm"))
		return (a.Serving || a.LastError != "") && (b.Serving || b.LastError != "")
	})
	if a, _ := status(h, filepath.Join(dir, "a.wasm")); !a.Serving {
		t.Errorf("a.wasm, first by name, does not serve: %+v", a)
	}
	if b, _ := status(h, filepath.Join(dir, "b.wasm")); b.Serving || !strings.Contains(b.LastError, "already handled by "+filepath.Join(dir, "a.wasm")) {
		t.Errorf("b.wasm: %+v", b)
	}
}

// TestRunRenamedIsReplaced: a handler file renamed, or replaced by a file of another name (a
// versioned name), hands its plugin types over behind the same registered handler: nothing is
// retired, the new file serves.
func TestRunRenamedIsReplaced(t *testing.T) {
	cases := []struct {
		name    string
		replace func(t *testing.T, dir string)
		// conflict: the new file is there before the old one goes, and is refused meanwhile.
		conflict bool
	}{
		{name: "mv to another name", replace: func(t *testing.T, dir string) { run(t, dir, "mv", "h-v1.wasm", "h-v2.wasm") }},
		{name: "rm the old, cp the new", replace: func(t *testing.T, dir string) {
			run(t, dir, "rm", "h-v1.wasm")
			sandboxtest.CopyFile(t, fixture("reload_v2"), filepath.Join(dir, "h-v2.wasm"), 0o644)
		}},
		{name: "cp the new, rm the old", conflict: true, replace: func(t *testing.T, dir string) {
			sandboxtest.CopyFile(t, fixture("reload_v2"), filepath.Join(dir, "h-v2.wasm"), 0o644)
			run(t, dir, "rm", "h-v1.wasm")
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := sandboxtest.TempDir(t)
			sandboxtest.CopyFile(t, fixture("reload_v1"), filepath.Join(dir, "h-v1.wasm"), 0o644)
			h, logs := newStrictHost(t, Config{HandlerDir: dir, RemovalGrace: time.Hour})
			startRun(t, h)
			hd := handlerFor(t, h.Registry(), "reload.example")

			tc.replace(t, dir)

			testwait.Until(t, "h-v2.wasm to serve alone", func() bool {
				st := h.Handlers()
				return len(st) == 1 && st[0].File == filepath.Join(dir, "h-v2.wasm") && st[0].Serving && st[0].LastError == ""
			})
			if now, _ := h.Registry().Get("reload.example"); now != hd {
				t.Error("the plugin type's handler changed in the registry")
			}
			if gone := hd.(*policy.TypeHandler).Gone(); gone != "" {
				t.Errorf("retired: %s", gone)
			}
			if n := logs.Count("retired"); n != 0 {
				t.Errorf("%d retirements logged", n)
			}
			testwait.Until(t, "the hand-over's log line", func() bool { _, ok := logs.Find("plugin type handed over"); return ok })
			if !tc.conflict {
				logs.NoErrors(t)
			}
		})
	}
}

// TestRunCompileBusyRetried: a file refused for now because abandoned compiles are still
// running is tried again a second later by itself, without another event.
func TestRunCompileBusyRetried(t *testing.T) {
	dir := sandboxtest.TempDir(t)
	h, logs := newStrictHost(t, Config{HandlerDir: dir, Limits: limits.Handler{CompileTimeout: limits.Duration(50 * time.Millisecond), MaxNesting: 1 << 30}})
	startRun(t, h)
	sandboxtest.WriteFile(t, filepath.Join(dir, "slow.wasm"), sandboxtest.BombModule(6000, 1, 0x03))
	testwait.Until(t, "the slow compile to be abandoned", func() bool { n, _ := h.AbandonedCompiles(); return n == 1 })
	sandboxtest.CopyFile(t, fixture("ok"), filepath.Join(dir, "ok.wasm"), 0o644)
	handlerFor(t, h.Registry(), "ok.example")
	if logs.Count("not loaded for now") == 0 {
		t.Log("the abandoned compile ended before ok.wasm was read: nothing was retried")
	}
}
