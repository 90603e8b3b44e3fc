// Package doctest runs what a walkthrough (a markdown page) shows, word for word: the files it
// shows in full, and the commands of its console blocks, whose output must have the lines
// shown. The walkthroughs of the handler SDKs (examples/handler-*) are tested with it from a
// directory outside the repository, as an author would follow them.
package doctest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Step is a command of a console block, and the lines of its output the page shows.
type Step struct {
	Line string   // the command, without "$ "
	Want []string // each must start a line of the output, in this order
}

// Page is what a page shows: the files introduced by a line "`DIR/NAME`:" right before a code
// block, and the commands of its console blocks ("$ " lines, each followed by the output shown
// for it: "..." stands for lines left out, "…" at the end of a line for the rest of it).
type Page struct {
	Files map[string]string // by NAME
	Steps []Step
}

// Parse reads the page at path. dir is the directory its files are shown in ("widget" for
// "`widget/widget.c`:").
func Parse(t testing.TB, path, dir string) Page {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	intro := regexp.MustCompile("^`" + regexp.QuoteMeta(dir) + "/([^`/]+)`:$")
	p := Page{Files: map[string]string{}}
	lines := strings.Split(string(b), "\n")
	last := ""
	for k := 0; k < len(lines); k++ {
		line := lines[k]
		if !strings.HasPrefix(line, "```") {
			if strings.TrimSpace(line) != "" {
				last = line
			}
			continue
		}
		lang := strings.TrimPrefix(line, "```")
		var block []string
		for k++; k < len(lines) && lines[k] != "```"; k++ {
			block = append(block, lines[k])
		}
		switch m := intro.FindStringSubmatch(last); {
		case m != nil:
			p.Files[m[1]] = strings.Join(block, "\n") + "\n"
		case lang == "console":
			for _, l := range block {
				switch {
				case strings.HasPrefix(l, "$ "):
					p.Steps = append(p.Steps, Step{Line: strings.TrimPrefix(l, "$ ")})
				case len(p.Steps) > 0 && l != "..." && l != "":
					s := &p.Steps[len(p.Steps)-1]
					s.Want = append(s.Want, strings.TrimSuffix(l, "…"))
				}
			}
		}
		last = ""
	}
	return p
}

// Run writes the page's files into dir and runs its commands there with sh, in order, with
// env added to this process's environment; it fails t at the first command that fails and
// reports every output line that is not as shown.
func (p Page) Run(t testing.TB, dir string, env ...string) {
	t.Helper()
	for name, content := range p.Files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	base := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "PWD=") })
	for _, s := range p.Steps {
		cmd := exec.CommandContext(t.Context(), "sh", "-c", s.Line)
		cmd.Dir, cmd.Env = dir, append(append(base, "PWD="+dir), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("$ %s: %v\n%s", s.Line, err, out)
		}
		t.Logf("$ %s\n%s", s.Line, out)
		if missing := missingLine(string(out), s.Want); missing != "" {
			t.Errorf("$ %s: no line starting %q in its output (the page shows %q)\n%s", s.Line, missing, s.Want, out)
		}
	}
}

// missingLine returns the first of want that does not start a line of out, in order, or "".
func missingLine(out string, want []string) string {
	got := strings.Split(out, "\n")
	for _, w := range want {
		k := slices.IndexFunc(got, func(g string) bool { return strings.HasPrefix(g, w) })
		if k < 0 {
			return w
		}
		got = got[k+1:]
	}
	return ""
}

// Workspace makes the layout the SDK walkthroughs start from, in a new directory under /tmp
// that t removes: a checkout of this repository as wasmhost/ (a symbolic link to repo), and an
// empty directory dir/ beside it for the handler, which it returns.
func Workspace(t testing.TB, repo, dir string) string {
	t.Helper()
	repo, err := filepath.Abs(repo)
	if err != nil {
		t.Fatal(err)
	}
	work, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	if err := os.Symlink(repo, filepath.Join(work, "wasmhost")); err != nil {
		t.Fatal(err)
	}
	d := filepath.Join(work, dir)
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// Tool returns the path of a command the page needs, or skips t when it is not installed; in
// CI (CI set in the environment) it fails t instead, since CI installs every toolchain.
func Tool(t testing.TB, name, install string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is not installed, and CI must run this test (install %s)", name, install)
	}
	t.Skipf("%s is not installed (%s)", name, install)
	return ""
}

// PathFirst returns a PATH= entry for Run's env that finds tool (by its base name) before
// anything else in PATH: a directory of t's with a link to it, then PATH.
func PathFirst(t testing.TB, tool string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Symlink(tool, filepath.Join(dir, filepath.Base(tool))); err != nil {
		t.Fatal(err)
	}
	return "PATH=" + dir + string(os.PathListSeparator) + os.Getenv("PATH")
}
