// Package oci pulls handler modules from OCI registries and pushes them there, and verifies
// their cosign signatures offline against the operator's public keys.
//
// Three layouts are read: the CNCF WebAssembly artifact (a layer of media type application/wasm,
// config application/vnd.wasm.config.v0+json), the older wasm-to-oci layout (a layer of media
// type application/vnd.wasm.content.layer.v1+wasm, or Istio's
// application/vnd.module.wasm.content.layer.v1+wasm), and Istio's "compat" image (an ordinary
// image with a single tar layer holding the module, plugin.wasm). Push writes the CNCF layout.
//
// The registry client is go-containerregistry: credentials from the docker config file (the
// default keychain), TLS for every registry but loopback ones.
//
// This package is part of the wasmhost daemon, not a stable API.
package oci

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Media types of the layouts read.
const (
	// MediaTypeWasm is the layer of a CNCF WebAssembly OCI artifact: the module's bytes.
	MediaTypeWasm = "application/wasm"
	// MediaTypeWasmConfig is the config of a CNCF WebAssembly OCI artifact.
	MediaTypeWasmConfig = "application/vnd.wasm.config.v0+json"
	// MediaTypeWasmToOCILayer is the module layer of the older wasm-to-oci layout.
	MediaTypeWasmToOCILayer = "application/vnd.wasm.content.layer.v1+wasm"
	// MediaTypeIstioWasmLayer is the module layer of Istio's "oci" variant.
	MediaTypeIstioWasmLayer = "application/vnd.module.wasm.content.layer.v1+wasm"
)

// Layouts, as Pulled.Layout names them.
const (
	LayoutArtifact  = "wasm-artifact" // CNCF: application/wasm
	LayoutWasmToOCI = "wasm-to-oci"   // application/vnd.(module.)wasm.content.layer.v1+wasm
	LayoutCompat    = "compat-image"  // a single tar layer holding the module
)

// Sentinel errors. Callers decide with errors.Is.
var (
	// ErrUnreachable: the registry could not be reached or answered with a server error; a
	// later try may succeed.
	ErrUnreachable = errors.New("oci: registry unreachable")
	// ErrNotFound: the registry has no such manifest.
	ErrNotFound = errors.New("oci: not found")
	// ErrBadArtifact: what the reference names is not a handler module in a known layout, or
	// its content does not match its digest.
	ErrBadArtifact = errors.New("oci: not a handler module")
)

// Options are what every registry call takes. The zero value is usable.
type Options struct {
	// Keychain finds credentials. Defaults to authn.DefaultKeychain: the docker config file
	// ($DOCKER_CONFIG/config.json, ~/.docker/config.json) and its credential helpers.
	Keychain authn.Keychain
	// Transport defaults to go-containerregistry's default transport, refusing plain HTTP to
	// any registry that is not on a loopback address.
	Transport http.RoundTripper
	// MaxModuleBytes bounds a module (and a compat image's layer). Defaults to 64 MiB.
	MaxModuleBytes int64
}

func (o Options) remote(ctx context.Context) []remote.Option {
	kc := o.Keychain
	if kc == nil {
		kc = authn.DefaultKeychain
	}
	tr := o.Transport
	if tr == nil {
		tr = tlsUnlessLoopback{remote.DefaultTransport}
	}
	return []remote.Option{
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(kc),
		remote.WithTransport(boundManifests{tr}),
		remote.WithUserAgent("wasmhost"),
	}
}

func (o Options) maxBytes() int64 {
	if o.MaxModuleBytes > 0 {
		return o.MaxModuleBytes
	}
	return 64 << 20
}

// tlsUnlessLoopback refuses plain HTTP except to loopback addresses: go-containerregistry
// speaks HTTP to private (RFC 1918) and .local addresses too, which would send credentials in
// clear over a network.
type tlsUnlessLoopback struct{ next http.RoundTripper }

func (t tlsUnlessLoopback) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme == "http" && !isLoopback(req.URL.Hostname()) {
		return nil, fmt.Errorf("oci: refusing plain HTTP to %s: registries are reached over TLS (only loopback addresses may use HTTP)", req.URL.Host)
	}
	return t.next.RoundTrip(req)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Pulled is a module pulled from a registry and verified against its digests.
type Pulled struct {
	// Ref is the reference as given; Pinned names the manifest by digest (repository@sha256:…).
	Ref    string
	Pinned name.Digest
	// Resolved is true when Ref was a tag, resolved to Pinned now.
	Resolved bool
	// Layout is one of the Layout* constants.
	Layout string
	// Module is the module's bytes; ModuleSHA256 their sha256, hex.
	Module       []byte
	ModuleSHA256 string
}

// ParseReference parses a registry reference (registry/repository:tag or @sha256:…).
func ParseReference(ref string) (name.Reference, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("oci: reference %q: %w", ref, err)
	}
	return r, nil
}

// Pull fetches the module ref names: the manifest (checked against ref's digest when it has
// one), then the module's layer (checked against the manifest's digest of it). Content that
// does not match its digest is ErrIntegrity.
func Pull(ctx context.Context, ref string, o Options) (*Pulled, error) {
	p, err := pull(ctx, ref, o)
	return p, BoundError(err)
}

func pull(ctx context.Context, ref string, o Options) (*Pulled, error) {
	r, err := ParseReference(ref)
	if err != nil {
		return nil, err
	}
	ropts := o.remote(ctx)
	desc, err := remote.Get(r, ropts...)
	if err != nil {
		return nil, classify(ref, err)
	}
	p := &Pulled{Ref: ref, Pinned: r.Context().Digest(desc.Digest.String())}
	if d, ok := r.(name.Digest); ok {
		// go-containerregistry checks the manifest it read against the digest asked for;
		// say so here too, for whoever reads this without knowing it.
		if d.DigestStr() != desc.Digest.String() {
			return nil, fmt.Errorf("%w: %s: the registry answered manifest %s", ErrIntegrity, ref, desc.Digest)
		}
	} else {
		p.Resolved = true
	}
	if desc.MediaType.IsIndex() {
		return nil, fmt.Errorf("%w: %s is an image index (%s): name the manifest of the module by its digest", ErrBadArtifact, ref, desc.MediaType)
	}
	var m v1.Manifest
	if err := json.Unmarshal(desc.Manifest, &m); err != nil {
		return nil, fmt.Errorf("%w: %s: manifest: %v", ErrBadArtifact, ref, err)
	}
	layer, layout, err := pickLayer(&m)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadArtifact, ref, err)
	}
	p.Layout = layout
	blob, err := fetchBlob(r.Context(), layer, o.maxBytes(), "handlers.limits.maxModuleSize", ropts)
	if err != nil {
		return nil, classify(ref, err)
	}
	if layout == LayoutCompat {
		if p.Module, err = moduleFromTar(blob, o.maxBytes()); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrBadArtifact, ref, err)
		}
	} else {
		p.Module = blob
	}
	sum := sha256.Sum256(p.Module)
	p.ModuleSHA256 = hex.EncodeToString(sum[:])
	return p, nil
}

// pickLayer finds the module's layer in a manifest and names the layout.
func pickLayer(m *v1.Manifest) (v1.Descriptor, string, error) {
	for _, l := range m.Layers {
		switch string(l.MediaType) {
		case MediaTypeWasm:
			return l, LayoutArtifact, nil
		case MediaTypeWasmToOCILayer, MediaTypeIstioWasmLayer:
			return l, LayoutWasmToOCI, nil
		}
	}
	if len(m.Layers) == 1 {
		switch m.Layers[0].MediaType {
		case types.DockerLayer, types.OCILayer, types.OCIUncompressedLayer, types.DockerUncompressedLayer:
			return m.Layers[0], LayoutCompat, nil
		}
	}
	var mts []string
	for _, l := range m.Layers {
		mts = append(mts, string(l.MediaType))
	}
	return v1.Descriptor{}, "", fmt.Errorf("no module layer: want a layer of media type %s or %s, or a single-layer image holding plugin.wasm; the %d layers are [%s]",
		MediaTypeWasm, MediaTypeWasmToOCILayer, len(mts), listed(mts))
}

// fetchBlob reads a blob, at most max bytes, and checks it against its digest. limit names
// the bound in the error when the blob is over it (a key, or a documented constant).
func fetchBlob(repo name.Repository, d v1.Descriptor, max int64, limit string, ropts []remote.Option) ([]byte, error) {
	if d.Digest.Algorithm != "sha256" {
		return nil, fmt.Errorf("%w: layer digest %s: only sha256 is accepted", ErrBadArtifact, d.Digest)
	}
	if d.Size > max {
		return nil, fmt.Errorf("%w: layer of %d bytes over the limit of %d bytes (%s)", ErrBadArtifact, d.Size, max, limit)
	}
	l, err := remote.Layer(repo.Digest(d.Digest.String()), ropts...)
	if err != nil {
		return nil, err
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, max+1))
	if err != nil {
		if strings.Contains(err.Error(), "checksum") { // go-containerregistry's verifying reader
			return nil, fmt.Errorf("%w: layer %s: %v", ErrIntegrity, d.Digest, err)
		}
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%w: layer over the limit of %d bytes (%s)", ErrBadArtifact, max, limit)
	}
	sum := sha256.Sum256(b)
	if got := "sha256:" + hex.EncodeToString(sum[:]); got != d.Digest.String() {
		return nil, fmt.Errorf("%w: layer %s: its content has digest %s", ErrIntegrity, d.Digest, got)
	}
	return b, nil
}

// moduleFromTar finds the module in a compat image's layer: plugin.wasm if there is one,
// otherwise the only *.wasm file.
func moduleFromTar(blob []byte, max int64) ([]byte, error) {
	var r io.Reader = bytes.NewReader(blob)
	br := bufio.NewReader(r)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("layer: %v", err)
		}
		defer zr.Close()
		r = zr
	} else {
		r = br
	}
	tr := tar.NewReader(r)
	var found []byte
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("layer is not a tar archive: %v", err)
		}
		if h.Typeflag != tar.TypeReg || !strings.HasSuffix(h.Name, ".wasm") {
			continue
		}
		names = append(names, h.Name)
		base := path.Base(h.Name)
		if found != nil && base != "plugin.wasm" {
			continue
		}
		if h.Size > max {
			return nil, fmt.Errorf("%s: %d bytes over the limit of %d bytes (handlers.limits.maxModuleSize)", h.Name, h.Size, max)
		}
		b, err := io.ReadAll(io.LimitReader(tr, max+1))
		if err != nil {
			return nil, fmt.Errorf("layer: %s: %v", h.Name, err)
		}
		found = b
		if base == "plugin.wasm" {
			return found, nil
		}
	}
	switch {
	case len(names) == 0:
		return nil, errors.New("the image's layer holds no .wasm file (a compat image holds plugin.wasm)")
	case len(names) > 1:
		return nil, fmt.Errorf("the image's layer holds several .wasm files and no plugin.wasm: %s", strings.Join(names, ", "))
	}
	return found, nil
}

// classify wraps a registry error with ErrNotFound or ErrUnreachable when it is one.
func classify(ref string, err error) error {
	if errors.Is(err, ErrBadArtifact) || errors.Is(err, ErrIntegrity) {
		return err
	}
	if strings.Contains(err.Error(), "does not match requested digest") { // go-containerregistry's manifest check
		return fmt.Errorf("%w: %s: %v", ErrIntegrity, ref, err)
	}
	var te *transport.Error
	if errors.As(err, &te) {
		switch {
		case te.StatusCode == http.StatusNotFound:
			return fmt.Errorf("%w: %s: %v", ErrNotFound, ref, err)
		case te.StatusCode >= 500 || te.StatusCode == http.StatusTooManyRequests:
			return fmt.Errorf("%w: %s: %v", ErrUnreachable, ref, err)
		}
		for _, d := range te.Errors {
			if d.Code == transport.ManifestUnknownErrorCode || d.Code == transport.NameUnknownErrorCode || d.Code == transport.BlobUnknownErrorCode {
				return fmt.Errorf("%w: %s: %v", ErrNotFound, ref, err)
			}
		}
		return fmt.Errorf("oci: %s: %w", ref, err)
	}
	var ne net.Error
	var oe *net.OpError
	if errors.As(err, &ne) || errors.As(err, &oe) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: %s: %v", ErrUnreachable, ref, err)
	}
	return fmt.Errorf("oci: %s: %w", ref, err)
}

// Push writes bin as a CNCF WebAssembly artifact (config application/vnd.wasm.config.v0+json,
// one application/wasm layer) to ref, and returns it pinned by the manifest's digest.
func Push(ctx context.Context, bin []byte, ref string, o Options) (name.Digest, error) {
	r, err := ParseReference(ref)
	if err != nil {
		return name.Digest{}, err
	}
	ropts := o.remote(ctx)
	layer := static.NewLayer(bin, MediaTypeWasm)
	ld, _ := layer.Digest()
	cfg, err := json.Marshal(struct {
		Created      string   `json:"created"`
		Architecture string   `json:"architecture"`
		OS           string   `json:"os"`
		LayerDigests []string `json:"layerDigests"`
	}{time.Unix(0, 0).UTC().Format(time.RFC3339), "wasm", "wasip1", []string{ld.String()}})
	if err != nil {
		return name.Digest{}, err
	}
	config := static.NewLayer(cfg, MediaTypeWasmConfig)
	for _, l := range []v1.Layer{layer, config} {
		if err := remote.WriteLayer(r.Context(), l, ropts...); err != nil {
			return name.Digest{}, classify(ref, err)
		}
	}
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		Config:        descriptorOf(config),
		Layers:        []v1.Descriptor{descriptorOf(layer)},
	}
	m.Layers[0].Annotations = map[string]string{"org.opencontainers.image.title": "module.wasm"}
	raw, err := json.Marshal(m)
	if err != nil {
		return name.Digest{}, err
	}
	if err := remote.Put(r, rawManifest{raw, types.OCIManifestSchema1}, ropts...); err != nil {
		return name.Digest{}, classify(ref, err)
	}
	h, _, err := v1.SHA256(bytes.NewReader(raw))
	if err != nil {
		return name.Digest{}, err
	}
	return r.Context().Digest(h.String()), nil
}

func descriptorOf(l v1.Layer) v1.Descriptor {
	d, _ := l.Digest()
	n, _ := l.Size()
	mt, _ := l.MediaType()
	return v1.Descriptor{MediaType: mt, Digest: d, Size: n}
}

// rawManifest is a manifest to put as it is (remote.Taggable).
type rawManifest struct {
	raw []byte
	mt  types.MediaType
}

func (m rawManifest) RawManifest() ([]byte, error)        { return m.raw, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return m.mt, nil }
