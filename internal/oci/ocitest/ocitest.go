// Package ocitest gives tests an OCI registry on loopback (go-containerregistry's in-memory
// registry), the layouts in which handler modules are published, and signing keys.
package ocitest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"

	"github.com/wasmhost/wasmhost/internal/oci"
)

// Registry is an OCI registry serving on 127.0.0.1 until the test ends.
type Registry struct {
	// Host is host:port, the first part of a reference.
	Host string
	srv  *httptest.Server
	// Down, while true, answers every request with 503.
	down atomicBool
	// Tamper, if set, rewrites the blobs and manifests served.
	tamper atomic.Pointer[func(path string, b []byte) []byte]
	// hold, if set, names the requests to hold until released.
	hold atomic.Pointer[holdReq]
}

type holdReq struct {
	match   func(path string) bool
	release chan struct{}
}

// Start starts a registry (without the referrers API: StartWithReferrers).
func Start(t testing.TB) *Registry {
	return start(t)
}

func start(t testing.TB, opts ...registry.Option) *Registry {
	t.Helper()
	r := &Registry{}
	inner := registry.New(append([]registry.Option{registry.Logger(log.New(io.Discard, "", 0))}, opts...)...)
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.down.get() {
			http.Error(w, "down for the test", http.StatusServiceUnavailable)
			return
		}
		if h := r.hold.Load(); h != nil && h.match(req.URL.Path) {
			select {
			case <-h.release:
			case <-req.Context().Done():
			}
			return
		}
		if f := r.tamper.Load(); f != nil && req.Method == http.MethodGet && (strings.Contains(req.URL.Path, "/blobs/") || strings.Contains(req.URL.Path, "/manifests/")) {
			rec := httptest.NewRecorder()
			inner.ServeHTTP(rec, req)
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			b := (*f)(req.URL.Path, rec.Body.Bytes())
			w.Header().Del("Content-Length")
			w.WriteHeader(rec.Code)
			_, _ = w.Write(b)
			return
		}
		inner.ServeHTTP(w, req)
	}))
	t.Cleanup(func() {
		if h := r.hold.Swap(nil); h != nil {
			close(h.release)
		}
		r.srv.CloseClientConnections()
		r.srv.Close()
	})
	r.Host = strings.TrimPrefix(r.srv.URL, "http://")
	return r
}

// SetDown makes the registry answer 503 to everything (true) or serve again (false).
func (r *Registry) SetDown(down bool) { r.down.set(down) }

// Tamper makes the registry serve f(path, content) instead of each blob and manifest (the
// path says which: /v2/<repo>/blobs/… or /v2/<repo>/manifests/…); nil stops it.
func (r *Registry) Tamper(f func(path string, b []byte) []byte) {
	if f == nil {
		r.tamper.Store(nil)
		return
	}
	r.tamper.Store(&f)
}

// Hold makes the registry stall every request whose path match accepts (it answers nothing
// until release is called, or the test ends): a registry that hangs in the middle of a pull.
func (r *Registry) Hold(match func(path string) bool) (release func()) {
	h := &holdReq{match: match, release: make(chan struct{})}
	r.hold.Store(h)
	var once sync.Once
	return func() {
		once.Do(func() {
			if r.hold.CompareAndSwap(h, nil) {
				close(h.release)
			}
		})
	}
}

// Ref is Host/repo plus suffix (":tag" or "@sha256:…").
func (r *Registry) Ref(repoAndSuffix string) string { return r.Host + "/" + repoAndSuffix }

// PushArtifact pushes bin as a CNCF WebAssembly artifact and returns its digest reference.
func PushArtifact(t testing.TB, ref string, bin []byte) name.Digest {
	t.Helper()
	d, err := oci.Push(context.Background(), bin, ref, oci.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// PushWasmToOCI pushes bin in the older wasm-to-oci layout (config
// application/vnd.wasm.config.v1+json, layer layerType, e.g. oci.MediaTypeIstioWasmLayer).
func PushWasmToOCI(t testing.TB, ref string, bin []byte, layerType string) name.Digest {
	t.Helper()
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, "application/vnd.wasm.config.v1+json")
	img, err := mutate.Append(img, mutate.Addendum{Layer: static.NewLayer(bin, types.MediaType(layerType))})
	if err != nil {
		t.Fatal(err)
	}
	return write(t, ref, img)
}

// PushCompat pushes bin as Istio's compat image: an image whose single tar+gzip layer holds
// file (plugin.wasm).
func PushCompat(t testing.TB, ref, file string, bin []byte) name.Digest {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Name: file, Mode: 0o644, Size: int64(len(bin)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	_, _ = tw.Write(bin)
	_ = tw.Close()
	_ = zw.Close()
	b := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{Layer: layer})
	if err != nil {
		t.Fatal(err)
	}
	img = mutate.Annotations(img, map[string]string{"module.wasm.image/variant": "compat"}).(v1.Image)
	return write(t, ref, img)
}

func write(t testing.TB, ref string, img v1.Image) name.Digest {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
	h, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return r.Context().Digest(h.String())
}

// Key is a signing key made for a test, with its public half in a PEM file.
type Key struct {
	Signer     signature.Signer
	PublicPEM  string // path of the public key
	PrivatePEM string // path of the private key, not encrypted
}

// NewKey generates an ECDSA P-256 key (cosign's kind) and writes both halves under dir.
func NewKey(t testing.TB, dir, name string) Key {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := signature.LoadECDSASignerVerifier(priv, crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := cryptoutils.MarshalPublicKeyToPEM(priv.Public())
	if err != nil {
		t.Fatal(err)
	}
	privPEM, err := cryptoutils.MarshalPrivateKeyToPEM(priv)
	if err != nil {
		t.Fatal(err)
	}
	k := Key{Signer: s, PublicPEM: filepath.Join(dir, name+".pub"), PrivatePEM: filepath.Join(dir, name+".key")}
	if err := os.WriteFile(k.PublicPEM, pub, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(k.PrivatePEM, privPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return k
}

// Sign signs d with k.
func Sign(t testing.TB, d name.Digest, k Key) {
	t.Helper()
	if err := oci.Sign(context.Background(), d, k.Signer, oci.Options{}); err != nil {
		t.Fatal(err)
	}
}

type atomicBool struct{ v atomic.Bool }

func (b *atomicBool) get() bool  { return b.v.Load() }
func (b *atomicBool) set(v bool) { b.v.Store(v) }

// StartWithReferrers starts a registry that serves the OCI 1.1 referrers API (Start's does
// not: clients fall back to the referrers tag schema there).
func StartWithReferrers(t testing.TB) *Registry {
	return start(t, registry.WithReferrersSupport(true))
}

// SignBundle signs d with k as cosign 3 does by default: a Sigstore bundle (a DSSE envelope
// over an in-toto statement of predicate type https://sigstore.dev/cosign/sign/v1 whose
// subject is d), attached as an OCI artifact whose subject is d (the referrers API, or the
// referrers tag schema where the registry has none).
func SignBundle(t testing.TB, d name.Digest, k Key) {
	t.Helper()
	SignBundleStatement(t, d, k, strings.TrimPrefix(d.DigestStr(), "sha256:"), oci.CosignSignPredicate)
}

// SignBundleStatement is SignBundle with the statement's subject digest (hex) and predicate
// type given: a bundle that signs something else, or is another kind of attestation.
func SignBundleStatement(t testing.TB, d name.Digest, k Key, subjectHex, predicateType string) {
	t.Helper()
	stmt, err := json.Marshal(map[string]any{
		"_type":         "https://in-toto.io/Statement/v1",
		"subject":       []any{map[string]any{"digest": map[string]string{"sha256": subjectHex}}},
		"predicateType": predicateType,
		"predicate":     map[string]any{},
	})
	if err != nil {
		t.Fatal(err)
	}
	const payloadType = "application/vnd.in-toto+json"
	// DSSE's pre-authentication encoding is what is signed.
	pae := fmt.Sprintf("DSSEv1 %d %s %d %s", len(payloadType), payloadType, len(stmt), stmt)
	sig, err := k.Signer.SignMessage(strings.NewReader(pae))
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := json.Marshal(map[string]any{
		"mediaType":            oci.MediaTypeBundle,
		"verificationMaterial": map[string]any{"publicKey": map[string]string{"hint": "test"}},
		"dsseEnvelope": map[string]any{
			"payload":     base64.StdEncoding.EncodeToString(stmt),
			"payloadType": payloadType,
			"signatures":  []any{map[string]string{"sig": base64.StdEncoding.EncodeToString(sig)}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	attachBundle(t, d, bundle, predicateType)
}

// AttachBundle attaches bundle, any bytes, to d as cosign 3 attaches a Sigstore bundle: a
// registry that serves a bundle too large or malformed.
func AttachBundle(t testing.TB, d name.Digest, bundle []byte) {
	t.Helper()
	attachBundle(t, d, bundle, oci.CosignSignPredicate)
}

// attachBundle attaches a bundle to d as cosign 3 does: an artifact whose subject is d.
func attachBundle(t testing.TB, d name.Digest, bundle []byte, predicateType string) {
	t.Helper()
	ctx := context.Background()
	subject, err := remote.Get(d)
	if err != nil {
		t.Fatal(err)
	}
	layer := static.NewLayer(bundle, types.MediaType(oci.MediaTypeBundle))
	config := static.NewLayer([]byte("{}"), "application/vnd.oci.empty.v1+json")
	for _, l := range []v1.Layer{layer, config} {
		if err := remote.WriteLayer(d.Context(), l, remote.WithContext(ctx)); err != nil {
			t.Fatal(err)
		}
	}
	desc := func(l v1.Layer) v1.Descriptor {
		dg, _ := l.Digest()
		n, _ := l.Size()
		mt, _ := l.MediaType()
		return v1.Descriptor{MediaType: mt, Digest: dg, Size: n}
	}
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  oci.MediaTypeBundle,
		Config:        desc(config),
		Layers:        []v1.Descriptor{desc(layer)},
		Subject:       &v1.Descriptor{MediaType: subject.MediaType, Digest: subject.Digest, Size: subject.Size},
		Annotations:   map[string]string{"dev.sigstore.bundle.content": "dsse-envelope", "dev.sigstore.bundle.predicateType": predicateType},
	}
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	h, _, _ := v1.SHA256(bytes.NewReader(raw))
	if err := remote.Put(d.Context().Digest(h.String()), rawManifest(raw)); err != nil {
		t.Fatal(err)
	}
}

// rawManifest is an OCI manifest to put as it is.
type rawManifest []byte

func (m rawManifest) RawManifest() ([]byte, error)        { return m, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
