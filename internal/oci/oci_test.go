package oci_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/internal/oci"
	"github.com/wasmhost/wasmhost/internal/oci/ocitest"
)

// module is the smallest WebAssembly module, with a custom section to tell modules apart.
func module(tag string) []byte {
	b := []byte("\x00asm\x01\x00\x00\x00")
	sec := append([]byte{byte(len(tag) + 1), byte(len(tag))}, tag...)
	return append(append(b, 0), sec...)
}

func TestPullEveryLayout(t *testing.T) {
	reg := ocitest.Start(t)
	ctx := context.Background()
	cases := []struct {
		layout string
		push   func(ref string, bin []byte) string
	}{
		{oci.LayoutArtifact, func(ref string, bin []byte) string { return ocitest.PushArtifact(t, ref, bin).String() }},
		{oci.LayoutWasmToOCI, func(ref string, bin []byte) string {
			return ocitest.PushWasmToOCI(t, ref, bin, oci.MediaTypeWasmToOCILayer).String()
		}},
		{oci.LayoutWasmToOCI, func(ref string, bin []byte) string {
			return ocitest.PushWasmToOCI(t, ref, bin, oci.MediaTypeIstioWasmLayer).String()
		}},
		{oci.LayoutCompat, func(ref string, bin []byte) string { return ocitest.PushCompat(t, ref, "plugin.wasm", bin).String() }},
	}
	for i, c := range cases {
		bin := module(c.layout + string(rune('a'+i)))
		tagRef := reg.Ref("handlers/" + strings.ReplaceAll(c.layout, "-", "") + ":v1")
		pinned := c.push(tagRef, bin)
		for _, ref := range []string{pinned, tagRef} {
			p, err := oci.Pull(ctx, ref, oci.Options{})
			if err != nil {
				t.Fatalf("%s: pull %s: %v", c.layout, ref, err)
			}
			if p.Layout != c.layout || !bytes.Equal(p.Module, bin) || p.Pinned.String() != pinned {
				t.Errorf("%s: pull %s: layout %s, pinned %s, %d bytes; want %s, %s, %d bytes", c.layout, ref, p.Layout, p.Pinned, len(p.Module), c.layout, pinned, len(bin))
			}
			if p.Resolved != (ref == tagRef) {
				t.Errorf("%s: pull %s: Resolved = %v", c.layout, ref, p.Resolved)
			}
		}
	}
}

func TestPullRefusals(t *testing.T) {
	reg := ocitest.Start(t)
	ctx := context.Background()
	bin := module("x")
	d := ocitest.PushArtifact(t, reg.Ref("h/ok:v1"), bin)

	if _, err := oci.Pull(ctx, reg.Ref("h/missing:v1"), oci.Options{}); !errors.Is(err, oci.ErrNotFound) {
		t.Errorf("missing tag: %v, want ErrNotFound", err)
	}
	compat := ocitest.PushCompat(t, reg.Ref("h/twowasm:v1"), "other.txt", bin)
	if _, err := oci.Pull(ctx, compat.String(), oci.Options{}); !errors.Is(err, oci.ErrBadArtifact) || !strings.Contains(err.Error(), "no .wasm file") {
		t.Errorf("image without a module: %v", err)
	}
	if _, err := oci.Pull(ctx, d.String(), oci.Options{MaxModuleBytes: 4}); !errors.Is(err, oci.ErrBadArtifact) || !strings.Contains(err.Error(), "over the limit") {
		t.Errorf("over the size limit: %v", err)
	}

	// A registry that serves other bytes than the digests name is caught.
	reg.Tamper(func(path string, b []byte) []byte {
		if bytes.Equal(b, bin) {
			return module("y")
		}
		return b
	})
	if _, err := oci.Pull(ctx, d.String(), oci.Options{}); !errors.Is(err, oci.ErrIntegrity) || !strings.Contains(err.Error(), "does not match its digest") {
		t.Errorf("tampered layer: %v, want a digest mismatch", err)
	}
	// A manifest is checked against the digest it was asked by: the same class of failure.
	reg.Tamper(func(path string, b []byte) []byte {
		if strings.Contains(path, "/manifests/") {
			return bytes.Replace(b, []byte("module.wasm"), []byte("modulX.wasm"), 1)
		}
		return b
	})
	if _, err := oci.Pull(ctx, d.String(), oci.Options{}); !errors.Is(err, oci.ErrIntegrity) || !strings.Contains(err.Error(), "does not match its digest") {
		t.Errorf("tampered manifest: %v, want a digest mismatch", err)
	}
	reg.Tamper(nil)

	// A manifest over the limit is refused while it is read, before it is parsed; one
	// that lists many layers gives an error of bounded length.
	huge := reg.Ref("h/huge:v1")
	ocitest.PushArtifact(t, huge, bin)
	reg.Tamper(func(path string, b []byte) []byte {
		if !strings.Contains(path, "/manifests/") {
			return b
		}
		return manyLayers(oci.MaxManifestBytes/100 + 1000)
	})
	if _, err := oci.Pull(ctx, huge, oci.Options{}); !errors.Is(err, oci.ErrBadArtifact) || !strings.Contains(err.Error(), "over the limit of") {
		t.Errorf("manifest over the limit: %v", err)
	}
	reg.Tamper(func(path string, b []byte) []byte {
		if !strings.Contains(path, "/manifests/") {
			return b
		}
		return manyLayers(20000)
	})
	_, err := oci.Pull(ctx, huge, oci.Options{})
	if !errors.Is(err, oci.ErrBadArtifact) || !strings.Contains(err.Error(), "and 19992 more") || len(err.Error()) > oci.MaxErrorText {
		t.Errorf("manifest of 20000 unknown layers: %d bytes of error: %.300s", len(err.Error()), err)
	}
	reg.Tamper(nil)

	reg.SetDown(true)
	if _, err := oci.Pull(ctx, d.String(), oci.Options{}); !errors.Is(err, oci.ErrUnreachable) {
		t.Errorf("registry down: %v, want ErrUnreachable", err)
	}
}

// manyLayers is an OCI manifest of n layers of an unknown media type, about 100 bytes each.
func manyLayers(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:` + strings.Repeat("0", 64) + `","size":2},"layers":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"mediaType":"application/x-unknown-%d","digest":"sha256:%064d","size":1}`, i, i)
	}
	b.WriteString("]}")
	return b.Bytes()
}

func TestPlainHTTPOnlyToLoopback(t *testing.T) {
	// 10.0.0.1 is private: go-containerregistry would speak HTTP to it. The request is refused
	// before anything is sent.
	_, err := oci.Pull(context.Background(), "10.0.0.1:5000/h/x:v1", oci.Options{})
	if err == nil || !strings.Contains(err.Error(), "refusing plain HTTP") {
		t.Fatalf("pull over HTTP from a private address: %v", err)
	}
	_ = http.MethodGet
}

func TestSignatures(t *testing.T) {
	reg := ocitest.Start(t)
	ctx := context.Background()
	dir := t.TempDir()
	good := ocitest.NewKey(t, dir, "good")
	other := ocitest.NewKey(t, dir, "other")
	d := ocitest.PushArtifact(t, reg.Ref("h/signed:v1"), module("s"))

	sigs, err := oci.FetchSignatures(ctx, d, oci.Options{})
	if err != nil || len(sigs) != 0 {
		t.Fatalf("unsigned: %d signatures, %v", len(sigs), err)
	}
	key, err := oci.LoadKey(good.PublicPEM, []string{"CSIPlugin"})
	if err != nil {
		t.Fatal(err)
	}
	ocitest.Sign(t, d, other)
	sigs, _ = oci.FetchSignatures(ctx, d, oci.Options{})
	if by, problems := oci.Verify(sigs, d, []oci.Key{key}); len(by) != 0 || len(problems) != 1 {
		t.Errorf("signed by another key: signed by %v, problems %q", by, problems)
	}
	ocitest.Sign(t, d, good)
	sigs, err = oci.FetchSignatures(ctx, d, oci.Options{})
	if err != nil || len(sigs) != 2 {
		t.Fatalf("two signatures: got %d, %v", len(sigs), err)
	}
	if by, _ := oci.Verify(sigs, d, []oci.Key{key}); len(by) != 1 || by[0].Name != good.PublicPEM {
		t.Errorf("signed by the good key: %v", by)
	}
	// A signature moved to another manifest signs nothing there.
	d2 := ocitest.PushArtifact(t, reg.Ref("h/signed:v2"), module("s2"))
	if by, problems := oci.Verify(sigs, d2, []oci.Key{key}); len(by) != 0 || !strings.Contains(strings.Join(problems, ";"), "not "+d2.DigestStr()) {
		t.Errorf("signature of another digest: %v %q", by, problems)
	}
	// The signer from a PEM file signs as well.
	s, err := oci.LoadSigner(good.PrivatePEM)
	if err != nil {
		t.Fatal(err)
	}
	if err := oci.Sign(ctx, d2, s, oci.Options{}); err != nil {
		t.Fatal(err)
	}
	sigs, _ = oci.FetchSignatures(ctx, d2, oci.Options{})
	if by, _ := oci.Verify(sigs, d2, []oci.Key{key}); len(by) != 1 {
		t.Errorf("signed with the PEM file: %v", by)
	}
}

// A signature bundle over its bound is refused by an error that names that bound, not the
// module's (handlers.limits.maxModuleSize does not govern signatures).
func TestSignatureOverItsBound(t *testing.T) {
	reg := ocitest.StartWithReferrers(t)
	d := ocitest.PushArtifact(t, reg.Ref("h/big:v1"), module("big"))
	ocitest.AttachBundle(t, d, bytes.Repeat([]byte("x"), 300<<10))
	_, err := oci.FetchSignatures(context.Background(), d, oci.Options{})
	if err == nil || !strings.Contains(err.Error(), "signature bundle") || strings.Contains(err.Error(), "maxModuleSize") {
		t.Fatalf("a 300 KiB bundle: %v, want a refusal naming the signature bundle's bound", err)
	}
	t.Log(err)
}

// Issue 22: cosign 3 signs with a Sigstore bundle attached through the referrers API (or the
// referrers tag schema where the registry has none); both are read, beside the legacy tag.
func TestBundleSignatures(t *testing.T) {
	for _, withReferrers := range []bool{true, false} {
		t.Run(fmt.Sprintf("referrersAPI=%v", withReferrers), func(t *testing.T) {
			reg := ocitest.Start(t)
			if withReferrers {
				reg = ocitest.StartWithReferrers(t)
			}
			ctx := context.Background()
			dir := t.TempDir()
			good, other := ocitest.NewKey(t, dir, "good"), ocitest.NewKey(t, dir, "other")
			key, err := oci.LoadKey(good.PublicPEM, []string{"CSIPlugin"})
			if err != nil {
				t.Fatal(err)
			}
			d := ocitest.PushArtifact(t, reg.Ref("h/bundled:v1"), module("b"))
			d2 := ocitest.PushArtifact(t, reg.Ref("h/bundled:v2"), module("b2"))

			ocitest.SignBundle(t, d, other)
			sigs, err := oci.FetchSignatures(ctx, d, oci.Options{})
			if err != nil || len(sigs) != 1 || sigs[0].Format != oci.FormatBundle {
				t.Fatalf("one bundle: %d signatures, %v", len(sigs), err)
			}
			if by, problems := oci.Verify(sigs, d, []oci.Key{key}); len(by) != 0 || len(problems) != 1 || !strings.Contains(problems[0], "verifies with none of the configured keys") {
				t.Errorf("bundle by another key: signed by %v, problems %q", by, problems)
			}
			ocitest.SignBundle(t, d, good)
			ocitest.Sign(t, d, other) // and a legacy one beside them
			sigs, err = oci.FetchSignatures(ctx, d, oci.Options{})
			if err != nil || len(sigs) != 3 {
				t.Fatalf("two bundles and a legacy signature: %d, %v", len(sigs), err)
			}
			if by, _ := oci.Verify(sigs, d, []oci.Key{key}); len(by) != 1 || by[0].Name != good.PublicPEM {
				t.Errorf("bundle by the good key: signed by %v", by)
			}
			// The bundles of d sign nothing for d2.
			if by, _ := oci.Verify(sigs, d2, []oci.Key{key}); len(by) != 0 {
				t.Errorf("d's bundles verify d2: %v", by)
			}
			// A bundle whose statement names another digest, or another predicate (an
			// attestation made with the same key), is not a signature of d.
			ocitest.SignBundleStatement(t, d2, good, strings.TrimPrefix(d.DigestStr(), "sha256:"), oci.CosignSignPredicate)
			ocitest.SignBundleStatement(t, d2, good, strings.TrimPrefix(d2.DigestStr(), "sha256:"), "https://spdx.dev/Document")
			sigs, err = oci.FetchSignatures(ctx, d2, oci.Options{})
			if err != nil || len(sigs) != 2 {
				t.Fatalf("d2: %d signatures, %v", len(sigs), err)
			}
			by, problems := oci.Verify(sigs, d2, []oci.Key{key})
			if len(by) != 0 || len(problems) != 2 || !strings.Contains(strings.Join(problems, ";"), "https://spdx.dev/Document") {
				t.Errorf("wrong subject and an attestation: signed by %v, problems %q", by, problems)
			}
		})
	}
}
