package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/internal/oci"
	"github.com/wasmhost/wasmhost/internal/oci/ocitest"
)

func TestHandlerPushPull(t *testing.T) {
	reg := ocitest.Start(t)
	dir := t.TempDir()
	key := ocitest.NewKey(t, dir, "author")
	other := ocitest.NewKey(t, dir, "other")
	bin, err := os.ReadFile(filepath.Join("..", "..", "internal", "host", "testdata", "ok.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "ok.wasm")
	if err := os.WriteFile(file, bin, 0o644); err != nil {
		t.Fatal(err)
	}

	ref := reg.Ref("handlers/ok:v1")
	out, err := runRoot(t, "handler", "push", "--sign-key", key.PrivatePEM, file, ref)
	if err != nil {
		t.Fatalf("push: %v\n%s", err, out)
	}
	if !strings.Contains(out, "pinned: "+reg.Ref("handlers/ok@sha256:")) || !strings.Contains(out, "signed: with "+key.PrivatePEM) {
		t.Errorf("push said:\n%s", out)
	}
	pinned := strings.TrimSpace(strings.SplitN(strings.SplitN(out, "pinned: ", 2)[1], "\n", 2)[0])

	// Pulled by tag, verified with the author's key: the same bytes, the CNCF layout.
	got := filepath.Join(dir, "pulled.wasm")
	out, err = runRoot(t, "handler", "pull", "--key", key.PublicPEM, "-O", got, ref)
	if err != nil {
		t.Fatalf("pull: %v\n%s", err, out)
	}
	for _, want := range []string{"pinned: " + pinned, "(a tag: name the digest", "layout: " + oci.LayoutArtifact, "signatures: 1", "verified: signed with " + key.PublicPEM, "written: " + got} {
		if !strings.Contains(out, want) {
			t.Errorf("pull output lacks %q:\n%s", want, out)
		}
	}
	if b, _ := os.ReadFile(got); !bytes.Equal(b, bin) {
		t.Errorf("pulled %d bytes, pushed %d", len(b), len(bin))
	}

	// Another key does not verify it: exit 1, and why; nothing is written, and nothing is
	// left in the directory (a script that installs the file finds none).
	unverified := filepath.Join(dir, "unverified", "x.wasm")
	if err := os.MkdirAll(filepath.Dir(unverified), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err = runRoot(t, "handler", "pull", "--key", other.PublicPEM, "-O", unverified, pinned)
	if err == nil || !strings.Contains(out, "not verified: signature 1 (legacy .sig): verifies with none of the configured keys") || !strings.Contains(out, "not written: "+unverified) {
		t.Errorf("pull with another key: %v\n%s", err, out)
	}
	if left, _ := os.ReadDir(filepath.Dir(unverified)); len(left) != 0 {
		t.Errorf("an unverified pull left %v behind", left)
	}
	// Over an existing file, an unverified pull leaves it as it was.
	if err := os.WriteFile(unverified, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := runRoot(t, "handler", "pull", "--key", other.PublicPEM, "-O", unverified, pinned); err == nil {
		t.Errorf("pull with another key succeeded")
	}
	if b, _ := os.ReadFile(unverified); string(b) != "old" {
		t.Errorf("an unverified pull replaced the file: %q", b)
	}
	if left, _ := os.ReadDir(filepath.Dir(unverified)); len(left) != 1 {
		t.Errorf("an unverified pull left %v", left)
	}

	// Unsigned, and a file that is not WebAssembly.
	out, err = runRoot(t, "handler", "push", file, reg.Ref("handlers/unsigned:v1"))
	if err != nil || !strings.Contains(out, "signed: no") {
		t.Errorf("unsigned push: %v\n%s", err, out)
	}
	notWasm := filepath.Join(dir, "x.wasm")
	_ = os.WriteFile(notWasm, []byte("#!/bin/sh\n"), 0o644)
	if out, err := runRoot(t, "handler", "push", notWasm, reg.Ref("handlers/x:v1")); err == nil || !strings.Contains(out+err.Error(), "not a WebAssembly module") {
		t.Errorf("push of a shell script: %v\n%s", err, out)
	}
}
