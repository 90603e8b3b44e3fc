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
	for _, want := range []string{"pinned: " + pinned, "(a tag: name the digest", "layout: " + oci.LayoutArtifact, "signatures: 1", "verified: signed with " + key.PublicPEM} {
		if !strings.Contains(out, want) {
			t.Errorf("pull output lacks %q:\n%s", want, out)
		}
	}
	if b, _ := os.ReadFile(got); !bytes.Equal(b, bin) {
		t.Errorf("pulled %d bytes, pushed %d", len(b), len(bin))
	}

	// Another key does not verify it: exit 1, and why.
	out, err = runRoot(t, "handler", "pull", "--key", other.PublicPEM, "-O", got, pinned)
	if err == nil || !strings.Contains(out, "not verified: signature 1: verifies with none of the configured keys") {
		t.Errorf("pull with another key: %v\n%s", err, out)
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
