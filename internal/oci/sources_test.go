package oci_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/oci"
	"github.com/wasmhost/wasmhost/internal/oci/ocitest"
)

// typesOf stands in for the host's inspection: module(tag) declares the plugin type tag.
func typesOf(_ context.Context, _ string, bin []byte) ([]string, error) {
	i := bytes.LastIndexByte(bin, 0)
	if i < 0 || i+2 >= len(bin) {
		return nil, errors.New("not a test module")
	}
	return []string{string(bin[i+3:])}, nil
}

type sourcesEnv struct {
	reg        *ocitest.Registry
	dir, store string
	keys       []oci.Key
	good, bad  ocitest.Key
}

func newSourcesEnv(t *testing.T) *sourcesEnv {
	e := &sourcesEnv{reg: ocitest.Start(t)}
	tmp := t.TempDir()
	e.dir, e.store = filepath.Join(tmp, "handlers-oci"), filepath.Join(tmp, "oci")
	e.good, e.bad = ocitest.NewKey(t, tmp, "good"), ocitest.NewKey(t, tmp, "bad")
	k, err := oci.LoadKey(e.good.PublicPEM, []string{"signed.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	e.keys = []oci.Key{k}
	return e
}

func (e *sourcesEnv) sources(t *testing.T, refs ...string) *oci.Sources {
	t.Helper()
	s, err := oci.NewSources(oci.SourcesConfig{
		Refs: refs, Dir: e.dir, StoreDir: e.store, Keys: e.keys,
		AllowUnsigned: []string{"open.example.com"}, PluginTypes: typesOf,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Prepare(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func served(t *testing.T, st oci.SourceStatus) []byte {
	t.Helper()
	b, err := os.ReadFile(st.File)
	if err != nil {
		return nil
	}
	return b
}

func TestSourcesPolicy(t *testing.T) {
	e := newSourcesEnv(t)
	signed := ocitest.PushArtifact(t, e.reg.Ref("h/signed:v1"), module("signed.example.com"))
	ocitest.Sign(t, signed, e.good)
	unsigned := ocitest.PushWasmToOCI(t, e.reg.Ref("h/unsigned:v1"), module("signed.example.com"), oci.MediaTypeIstioWasmLayer)
	open := ocitest.PushCompat(t, e.reg.Ref("h/open:v1"), "plugin.wasm", module("open.example.com"))
	wrong := ocitest.PushArtifact(t, e.reg.Ref("h/wrong:v1"), module("signed.example.com"))
	ocitest.Sign(t, wrong, e.bad)
	other := ocitest.PushArtifact(t, e.reg.Ref("h/other:v1"), module("other.example.com"))
	ocitest.Sign(t, other, e.good)

	s := e.sources(t, signed.String(), unsigned.String(), open.String(), wrong.String(), other.String())
	if retry := s.Sync(context.Background()); retry {
		t.Errorf("Sync wants a retry; every source was reachable")
	}
	want := map[string]string{ // ref → "" (serves) or what the error says
		signed.String():   "",
		open.String():     "",
		unsigned.String(): "unsigned, and",
		wrong.String():    "no signature verifies with a configured key",
		other.String():    "which may not sign handlers of other.example.com",
	}
	for _, st := range s.Statuses() {
		w := want[st.Ref]
		if w == "" {
			if st.Error != "" || served(t, st) == nil || st.Pinned != st.Ref {
				t.Errorf("%s: error %q, pinned %q, file served %v; want it served", st.Ref, st.Error, st.Pinned, served(t, st) != nil)
			}
			continue
		}
		if !strings.Contains(st.Error, w) || served(t, st) != nil {
			t.Errorf("%s: error %q, file served %v; want refused: %q", st.Ref, st.Error, served(t, st) != nil, w)
		}
	}
	if st := s.Status(signed.Context().String()); len(st.SignedBy) != 1 || st.SignedBy[0] != e.good.PublicPEM {
		t.Errorf("signed source: signed by %v", st.SignedBy)
	}
}

func TestSourcesLastGoodPull(t *testing.T) {
	e := newSourcesEnv(t)
	bin := module("open.example.com")
	tag := e.reg.Ref("h/open:stable")
	v1 := ocitest.PushArtifact(t, tag, bin)
	s := e.sources(t, tag)
	s.Sync(context.Background())
	st := s.Status(v1.Context().String())
	if st.Pinned != v1.String() || !bytes.Equal(served(t, st), bin) {
		t.Fatalf("tag: pinned %q, want %s; %v", st.Pinned, v1, st)
	}

	// The tag moves and the registry goes down: a restart serves the pinned revision from the
	// store without the network, and has nothing to pull (a tag is resolved once).
	ocitest.PushArtifact(t, tag, module("open.example.com.v2"))
	e.reg.SetDown(true)
	s = e.sources(t, tag)
	if st := s.Status(v1.Context().String()); st.Pinned != v1.String() || !bytes.Equal(served(t, st), bin) || st.Error != "" {
		t.Fatalf("restart with the registry down: %+v", st)
	}
	if retry := s.Sync(context.Background()); retry {
		t.Errorf("a pinned tag was pulled again")
	}

	// A new revision configured while the registry is down: the old one keeps serving.
	v3 := e.reg.Ref("h/open@sha256:" + strings.Repeat("ab", 32))
	s = e.sources(t, v3)
	if retry := s.Sync(context.Background()); !retry {
		t.Errorf("registry down: Sync does not want a retry")
	}
	st = s.Status(v1.Context().String())
	if st.Pinned != v1.String() || !bytes.Equal(served(t, st), bin) || !strings.Contains(st.Error, "unreachable") {
		t.Errorf("new revision, registry down: %+v", st)
	}
	e.reg.SetDown(false)

	// A stored module changed on disk is discarded, and pulled again.
	mods, _ := filepath.Glob(filepath.Join(e.store, "modules", "*.wasm"))
	if len(mods) != 1 {
		t.Fatalf("store holds %v", mods)
	}
	if err := os.WriteFile(mods[0], module("evil"), 0o600); err != nil {
		t.Fatal(err)
	}
	s = e.sources(t, v1.String())
	if st := s.Status(v1.Context().String()); served(t, st) != nil || !strings.Contains(st.Error, "changed on disk, discarded") {
		t.Errorf("tampered store: %+v", st)
	}
	s.Sync(context.Background())
	if st := s.Status(v1.Context().String()); !bytes.Equal(served(t, st), bin) || st.Error != "" {
		t.Errorf("pulled again after the tampered store: %+v", st)
	}

	// A source taken out of the configuration: its file goes.
	e.sources(t)
	if left, _ := filepath.Glob(filepath.Join(e.dir, "*.wasm")); len(left) != 0 {
		t.Errorf("files left after the sources were removed: %v", left)
	}
}

func TestSourcesOneRevisionPerRepository(t *testing.T) {
	_, err := oci.NewSources(oci.SourcesConfig{Refs: []string{"r.example.com/h/a:v1", "r.example.com/h/a:v2"}, Dir: "d", StoreDir: "s", PluginTypes: typesOf})
	if err == nil || !strings.Contains(err.Error(), "name one repository") {
		t.Errorf("two revisions of one repository: %v", err)
	}
}

// A registry that serves other bytes than a digest names is refused, named as such, and not
// tried again as an outage would be; PullNow tries it again at once.
func TestSourcesIntegrityRefusedAndPullNow(t *testing.T) {
	e := newSourcesEnv(t)
	bin := module("open.example.com")
	d := ocitest.PushArtifact(t, e.reg.Ref("h/open:v1"), bin)
	for _, what := range []string{"/blobs/", "/manifests/"} {
		e.reg.Tamper(func(path string, b []byte) []byte {
			if strings.Contains(path, what) {
				return append(bytes.Clone(b), ' ')
			}
			return b
		})
		s := e.sources(t, d.String())
		if retry := s.Sync(context.Background()); retry {
			t.Errorf("tampered %s: Sync wants a retry, as for an outage", what)
		}
		st := s.Status(d.Context().String())
		if !st.Refused || st.Reason != oci.ReasonIntegrity || !strings.Contains(st.Error, "does not match its digest") || served(t, st) != nil {
			t.Errorf("tampered %s: %+v", what, st)
		}
	}

	// The registry serves the right bytes again: PullNow takes them at once.
	s := e.sources(t, d.String())
	s.Sync(context.Background())
	if st := s.Status(d.Context().String()); !st.Refused {
		t.Fatalf("still tampered: %+v", st)
	}
	e.reg.Tamper(nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	if err := s.PullNow(ctx); err != nil {
		t.Fatal(err)
	}
	if st := s.Status(d.Context().String()); st.Error != "" || !bytes.Equal(served(t, st), bin) {
		t.Errorf("after PullNow: %+v", st)
	}
}

// PullNow pulls a source that was refused, once what refused it is fixed (here: signed).
func TestSourcesPullNowAfterSigning(t *testing.T) {
	e := newSourcesEnv(t)
	d := ocitest.PushArtifact(t, e.reg.Ref("h/signed:v1"), module("signed.example.com"))
	s := e.sources(t, d.String())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	<-s.Synced()
	if st := s.Status(d.Context().String()); !st.Refused || st.Reason != oci.ReasonPolicy {
		t.Fatalf("unsigned: %+v", st)
	}
	ocitest.Sign(t, d, e.good)
	if err := s.PullNow(ctx); err != nil {
		t.Fatal(err)
	}
	if st := s.Status(d.Context().String()); st.Error != "" || st.Pinned != d.String() || served(t, st) == nil {
		t.Errorf("signed, after PullNow: %+v", st)
	}
}

// A registry that stalls in the middle of a layer holds its own source, not the others: they
// are pulled in parallel, each within its own timeout.
func TestSourcesStalledRegistryHoldsOnlyItsSource(t *testing.T) {
	e := newSourcesEnv(t)
	stalled := ocitest.PushArtifact(t, e.reg.Ref("a/stalled:v1"), module("open.example.com"))
	healthy := ocitest.PushArtifact(t, e.reg.Ref("b/healthy:v1"), module("open.example.com"))
	release := e.reg.Hold(func(path string) bool { return strings.HasPrefix(path, "/v2/a/stalled/blobs/") })
	defer release()
	s, err := oci.NewSources(oci.SourcesConfig{
		Refs: []string{stalled.String(), healthy.String()}, Dir: e.dir, StoreDir: e.store,
		AllowUnsigned: []string{"open.example.com"}, PluginTypes: typesOf,
		PullTimeout: time.Hour, // the healthy source must not wait for it
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Prepare(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	for {
		st := s.Status(healthy.Context().String())
		if st.Pinned == healthy.String() {
			break
		}
		select {
		case <-s.Synced():
			t.Fatalf("the first pass ended before the healthy source was served: %+v", st)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if st := s.Status(stalled.Context().String()); st.Pinned != "" {
		t.Errorf("the stalled source serves: %+v", st)
	}
}

// A pull that does not finish within its timeout is an outage, named so, and tried again.
func TestSourcesPullTimeout(t *testing.T) {
	e := newSourcesEnv(t)
	d := ocitest.PushArtifact(t, e.reg.Ref("h/slow:v1"), module("open.example.com"))
	release := e.reg.Hold(func(path string) bool { return strings.Contains(path, "/blobs/") })
	defer release()
	s, err := oci.NewSources(oci.SourcesConfig{
		Refs: []string{d.String()}, Dir: e.dir, StoreDir: e.store,
		AllowUnsigned: []string{"open.example.com"}, PluginTypes: typesOf, PullTimeout: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Prepare(context.Background()); err != nil {
		t.Fatal(err)
	}
	if retry := s.Sync(context.Background()); !retry {
		t.Errorf("a pull that timed out is not tried again")
	}
	if st := s.Status(d.Context().String()); st.Refused || st.Reason != oci.ReasonUnreachable {
		t.Errorf("timed out: %+v", st)
	}
}

// A source signed the way cosign 3 signs by default (a Sigstore bundle) is admitted, and served
// again after a restart from the signatures kept in the store.
func TestSourcesBundleSigned(t *testing.T) {
	e := newSourcesEnv(t)
	d := ocitest.PushArtifact(t, e.reg.Ref("h/bundled:v1"), module("signed.example.com"))
	ocitest.SignBundle(t, d, e.good)
	s := e.sources(t, d.String())
	s.Sync(context.Background())
	if st := s.Status(d.Context().String()); st.Error != "" || served(t, st) == nil || len(st.SignedBy) != 1 {
		t.Fatalf("bundle-signed: %+v", st)
	}
	e.reg.SetDown(true)
	s = e.sources(t, d.String())
	if st := s.Status(d.Context().String()); st.Error != "" || served(t, st) == nil || len(st.SignedBy) != 1 {
		t.Errorf("restart with the registry down: %+v", st)
	}
}
