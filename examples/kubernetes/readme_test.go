// Package kubernetes holds the manifests of examples/kubernetes; its test runs the README's
// commands that edit them, word for word. (The manifests themselves are decoded and checked in
// test/interop, which has the Kubernetes API types.)
package kubernetes

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeSedCommands runs the README's two sed commands that put a registry of your own
// into the manifests, word for word, on a copy of them, with the README's own example
// registry ($REGISTRY from its export line, $HANDLERS as crane push prints it), and checks
// every image and the handlers' reference: each is the registry's, once (not
// registry.example.com/you/you/...), and the handlers' is the digest pushed.
func TestReadmeSedCommands(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^export REGISTRY=(\S+)$`).FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md has no line export REGISTRY=...")
	}
	registry := string(m[1])
	seds := regexp.MustCompile(`(?m)^sed -i .*examples/kubernetes/.*$`).FindAll(readme, -1)
	if len(seds) != 2 {
		t.Fatalf("README.md shows %d sed commands on examples/kubernetes, want its two:\n%s", len(seds), seds)
	}

	work, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(work, "examples", "kubernetes"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, "examples", "kubernetes", f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	handlers := registry + "/wasmhost-handlers@sha256:" + strings.Repeat("ab", 32)
	for _, sed := range seds {
		cmd := exec.Command("sh", "-c", string(sed))
		cmd.Dir, cmd.Env = work, append(os.Environ(), "REGISTRY="+registry, "HANDLERS="+handlers)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("$ %s: %v\n%s", sed, err, out)
		}
	}

	refs := regexp.MustCompile(`(?m)^\s*(?:-\s+|image:\s+|reference:\s+)(\S*(?:registry|example\.com)\S*)$`)
	var sawHandlers, images int
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(work, "examples", "kubernetes", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range refs.FindAllSubmatch(b, -1) {
			ref := string(r[1])
			if !strings.HasPrefix(ref, registry+"/wasmhost") || strings.Contains(strings.TrimPrefix(ref, registry), "/you/") {
				t.Errorf("%s: %s after the README's sed commands, want a reference under %s/", f, ref, registry)
			}
			if strings.Contains(ref, "wasmhost-handlers@") {
				sawHandlers++
				if ref != handlers {
					t.Errorf("%s: handlers image %s, want the one pushed, %s", f, ref, handlers)
				}
			}
			images++
		}
	}
	if sawHandlers != 1 || images < 5 {
		t.Errorf("found %d references (%d to the handlers image); want the DaemonSets', the example plugin's and the sources'", images, sawHandlers)
	}
}
