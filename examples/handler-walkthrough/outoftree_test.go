//go:build !wasip1

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// outOfTreeSection is the README's section on a handler in a module of its own.
const outOfTreeSection = "## A handler in a module of your own"

// TestWalkthroughOutOfTree does what the README's section "A handler in a module of your own"
// says, word for word, as an author outside this repository would: in a new directory under
// /tmp, next to a checkout of this repository (a symbolic link to it), it writes the files the
// section shows (go.mod, conformance_test.go) and the ones it says to copy (main.go,
// main_test.go), runs the section's commands, and checks their output as shown. It also checks
// that go mod tidy left the go.mod as written (it only adds), that the handler's build needs no
// module but the contract, and that nothing was written into this repository.
func TestWalkthroughOutOfTree(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a handler, the conformance kit and the wasmhost command in a module outside the repository")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command in PATH")
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	files, cmds := outOfTreeSteps(t, string(readme))
	for _, name := range []string{"go.mod", "conformance_test.go"} {
		if _, ok := files[name]; !ok {
			t.Fatalf("the README's section %q shows no sensors/%s", outOfTreeSection, name)
		}
	}
	if len(cmds) == 0 {
		t.Fatalf("the README's section %q shows no commands", outOfTreeSection)
	}

	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	// What the commands must not change in the checkout.
	guarded := []string{"go.mod", "go.sum", "abi/go.mod", "abi/go.sum"}
	before := make(map[string][]byte)
	for _, f := range guarded {
		before[f], _ = os.ReadFile(filepath.Join(repo, f))
	}

	work, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	if err := os.Symlink(repo, filepath.Join(work, "wasmhost")); err != nil { // the checkout
		t.Fatal(err)
	}
	dir := filepath.Join(work, "sensors")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"main.go", "main_test.go"} { // "copy main.go, and main_test.go"
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = string(b)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	for _, c := range cmds {
		env := append(os.Environ(), "GOWORK=off") // no go.work of the developer's
		if c.line == "go mod tidy" {
			env = append(env, "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -mod=mod"))
		}
		cmd := exec.CommandContext(t.Context(), "sh", "-c", c.line)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("$ %s: %v\n%s", c.line, err, out)
		}
		t.Logf("$ %s\n%s", c.line, out)
		if missing := missingLines(string(out), c.want); missing != "" {
			t.Errorf("$ %s: no line starting %q in its output (the README shows %q)\n%s", c.line, missing, c.want, out)
		}
		if c.line == "go mod tidy" {
			tidied, err := os.ReadFile(filepath.Join(dir, "go.mod"))
			if err != nil {
				t.Fatal(err)
			}
			if missing := notSubsequence(strings.Split(files["go.mod"], "\n"), strings.Split(string(tidied), "\n")); missing != "" {
				t.Errorf("go mod tidy changed the README's go.mod (its line %q is gone): the README should show a go.mod that tidy only adds to\n%s", missing, tidied)
			}
		}
	}

	// The handler's build, for wasip1, needs the contract module and nothing else.
	cmd := exec.CommandContext(t.Context(), "go", "list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", ".")
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "GOWORK=off", "GOOS=wasip1", "GOARCH=wasm")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	mods := slices.Compact(slices.Sorted(slices.Values(strings.Fields(string(out)))))
	if want := []string{"example.com/sensors", "github.com/wasmhost/wasmhost/abi"}; !slices.Equal(mods, want) {
		t.Errorf("the handler's build (wasip1) uses modules %q, want only %q", mods, want)
	}

	for _, f := range guarded {
		if after, _ := os.ReadFile(filepath.Join(repo, f)); !bytes.Equal(before[f], after) {
			t.Errorf("%s of the repository changed", f)
		}
	}
}

// step is a command of the README, and the lines of its output the README shows.
type step struct {
	line string
	want []string
}

// fileIntro introduces a file's content in the section: "`sensors/go.mod`:".
var fileIntro = regexp.MustCompile("^`sensors/([^`/]+)`:$")

// outOfTreeSteps returns the files and the commands the README's section shows: a code block
// after a line "`sensors/NAME`:" is the file NAME, and the lines of a console block that start
// with "$ " are commands, each followed by the output shown for it ("..." stands for lines
// left out, "…" at the end of a line for the rest of it).
func outOfTreeSteps(t *testing.T, readme string) (map[string]string, []step) {
	t.Helper()
	i := strings.Index(readme, "\n"+outOfTreeSection+"\n")
	if i < 0 {
		t.Fatalf("README.md has no section %q", outOfTreeSection)
	}
	section := readme[i+1:]
	if j := strings.Index(section[len(outOfTreeSection):], "\n## "); j >= 0 {
		section = section[:len(outOfTreeSection)+j]
	}
	files := make(map[string]string)
	var cmds []step
	lines := strings.Split(section, "\n")
	intro := ""
	for k := 0; k < len(lines); k++ {
		line := lines[k]
		if !strings.HasPrefix(line, "```") {
			if strings.TrimSpace(line) != "" {
				intro = line
			}
			continue
		}
		lang := strings.TrimPrefix(line, "```")
		var block []string
		for k++; k < len(lines) && lines[k] != "```"; k++ {
			block = append(block, lines[k])
		}
		switch m := fileIntro.FindStringSubmatch(intro); {
		case m != nil:
			files[m[1]] = strings.Join(block, "\n") + "\n"
		case lang == "console":
			for _, l := range block {
				switch {
				case strings.HasPrefix(l, "$ "):
					cmds = append(cmds, step{line: strings.TrimPrefix(l, "$ ")})
				case len(cmds) > 0 && l != "..." && l != "":
					cmds[len(cmds)-1].want = append(cmds[len(cmds)-1].want, strings.TrimSuffix(l, "…"))
				}
			}
		}
		intro = ""
	}
	return files, cmds
}

// missingLines returns the first of want that does not start a line of out, in order, or "".
func missingLines(out string, want []string) string {
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

// notSubsequence returns the first line of want that is not in got, in order, or "".
func notSubsequence(want, got []string) string {
	for _, w := range want {
		k := slices.Index(got, w)
		if k < 0 {
			return w
		}
		got = got[k+1:]
	}
	return ""
}
