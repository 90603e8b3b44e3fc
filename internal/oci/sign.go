package oci

// Cosign-compatible signatures, verified offline against public keys with sigstore's
// signature package: a signature of the manifest sha256:H of repository R is a layer of the
// image tagged R:sha256-H.sig, whose content is cosign's "simple signing" payload naming the
// digest, and whose annotation dev.cosignproject.cosign/signature holds the signature of that
// content, base64. What `cosign sign --key` writes (without a transparency log) is read here,
// and what Sign writes `cosign verify --key --insecure-ignore-tlog` accepts.

import (
	"bytes"
	"context"
	"crypto"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
)

const (
	// MediaTypeSimpleSigning is a cosign signature layer's media type.
	MediaTypeSimpleSigning = "application/vnd.dev.cosign.simplesigning.v1+json"
	// AnnotationSignature holds a cosign signature, base64.
	AnnotationSignature = "dev.cosignproject.cosign/signature"
	// simpleSigningType is the payload's critical.type.
	simpleSigningType = "cosign container image signature"

	maxSignatureLayers = 64
	maxPayloadBytes    = 64 << 10
)

// Signature is one signature found for a manifest: the payload and its signature.
type Signature struct {
	Payload   []byte `json:"payload"`
	Signature []byte `json:"signature"`
}

// Key is a public key the operator trusts, and the plugin types whose handlers it may sign.
type Key struct {
	Name        string // the key's file, in messages
	Verifier    signature.Verifier
	PluginTypes []string
}

// LoadKey reads a PEM public key (as `cosign generate-key-pair` writes cosign.pub).
func LoadKey(path string, pluginTypes []string) (Key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Key{}, fmt.Errorf("oci: public key: %w", err)
	}
	pub, err := cryptoutils.UnmarshalPEMToPublicKey(b)
	if err != nil {
		return Key{}, fmt.Errorf("oci: public key %s: %w", path, err)
	}
	v, err := signature.LoadVerifier(pub, crypto.SHA256)
	if err != nil {
		return Key{}, fmt.Errorf("oci: public key %s: %w", path, err)
	}
	return Key{Name: path, Verifier: v, PluginTypes: slices.Clone(pluginTypes)}, nil
}

// SignatureTag is the tag cosign keeps the signatures of manifest digest in.
func SignatureTag(d name.Digest) name.Tag {
	return d.Context().Tag(strings.Replace(d.DigestStr(), ":", "-", 1) + ".sig")
}

// simpleSigning is cosign's payload.
type simpleSigning struct {
	Critical struct {
		Identity struct {
			DockerReference string `json:"docker-reference"`
		} `json:"identity"`
		Image struct {
			DockerManifestDigest string `json:"docker-manifest-digest"`
		} `json:"image"`
		Type string `json:"type"`
	} `json:"critical"`
	Optional map[string]any `json:"optional"`
}

// FetchSignatures returns the signatures stored for d (none, without an error, when it has
// none).
func FetchSignatures(ctx context.Context, d name.Digest, o Options) ([]Signature, error) {
	ropts := o.remote(ctx)
	tag := SignatureTag(d)
	desc, err := remote.Get(tag, ropts...)
	if err != nil {
		err = classify(tag.String(), err)
		if errors.Is(err, ErrNotFound) {
			return nil, nil
		}
		return nil, err
	}
	var m v1.Manifest
	if err := json.Unmarshal(desc.Manifest, &m); err != nil {
		return nil, fmt.Errorf("%w: %s: manifest: %v", ErrBadArtifact, tag, err)
	}
	var out []Signature
	for _, l := range m.Layers {
		if len(out) == maxSignatureLayers {
			break
		}
		sig, ok := l.Annotations[AnnotationSignature]
		if !ok || l.MediaType != MediaTypeSimpleSigning {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(sig)
		if err != nil {
			continue // not a signature: it verifies nothing
		}
		payload, err := fetchBlob(d.Context(), l, maxPayloadBytes, ropts)
		if err != nil {
			return nil, classify(tag.String(), err)
		}
		out = append(out, Signature{Payload: payload, Signature: raw})
	}
	return out, nil
}

// Verify returns the keys that signed d among keys (each at most once, in keys' order), and
// why each signature that verified with none of them was not taken.
func Verify(sigs []Signature, d name.Digest, keys []Key) (signedBy []Key, problems []string) {
	for i, s := range sigs {
		var p simpleSigning
		if err := json.Unmarshal(s.Payload, &p); err != nil {
			problems = append(problems, fmt.Sprintf("signature %d: payload is not cosign's simple signing: %v", i+1, err))
			continue
		}
		if p.Critical.Type != simpleSigningType {
			problems = append(problems, fmt.Sprintf("signature %d: payload type %q, want %q", i+1, p.Critical.Type, simpleSigningType))
			continue
		}
		if p.Critical.Image.DockerManifestDigest != d.DigestStr() {
			problems = append(problems, fmt.Sprintf("signature %d: signs %s, not %s", i+1, p.Critical.Image.DockerManifestDigest, d.DigestStr()))
			continue
		}
		verified := false
		for _, k := range keys {
			if k.Verifier.VerifySignature(bytes.NewReader(s.Signature), bytes.NewReader(s.Payload)) == nil {
				verified = true
				if !slices.ContainsFunc(signedBy, func(o Key) bool { return o.Name == k.Name }) {
					signedBy = append(signedBy, k)
				}
			}
		}
		if !verified {
			problems = append(problems, fmt.Sprintf("signature %d: verifies with none of the configured keys", i+1))
		}
	}
	return signedBy, problems
}

// Sign signs the manifest d with signer and adds the signature to those stored for d, as
// `cosign sign --key` does.
func Sign(ctx context.Context, d name.Digest, signer signature.Signer, o Options) error {
	p := simpleSigning{}
	p.Critical.Identity.DockerReference = d.Context().Name()
	p.Critical.Image.DockerManifestDigest = d.DigestStr()
	p.Critical.Type = simpleSigningType
	payload, err := json.Marshal(p)
	if err != nil {
		return err
	}
	sig, err := signer.SignMessage(bytes.NewReader(payload))
	if err != nil {
		return fmt.Errorf("oci: signing: %w", err)
	}
	ropts := o.remote(ctx)
	tag := SignatureTag(d)
	var layers []v1.Descriptor
	if desc, err := remote.Get(tag, ropts...); err == nil {
		var m v1.Manifest
		if json.Unmarshal(desc.Manifest, &m) == nil {
			layers = m.Layers
		}
	} else if err := classify(tag.String(), err); !errors.Is(err, ErrNotFound) {
		return err
	}
	layer := static.NewLayer(payload, MediaTypeSimpleSigning)
	ld := descriptorOf(layer)
	ld.Annotations = map[string]string{AnnotationSignature: base64.StdEncoding.EncodeToString(sig)}
	layers = append(layers, ld)
	diffIDs := make([]string, 0, len(layers))
	for _, l := range layers {
		diffIDs = append(diffIDs, l.Digest.String())
	}
	cfg, err := json.Marshal(map[string]any{
		"architecture": "", "os": "", "config": map[string]any{},
		"rootfs": map[string]any{"type": "layers", "diff_ids": diffIDs},
	})
	if err != nil {
		return err
	}
	config := static.NewLayer(cfg, types.OCIConfigJSON)
	for _, l := range []v1.Layer{layer, config} {
		if err := remote.WriteLayer(d.Context(), l, ropts...); err != nil {
			return classify(tag.String(), err)
		}
	}
	raw, err := json.Marshal(v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1, Config: descriptorOf(config), Layers: layers})
	if err != nil {
		return err
	}
	if err := remote.Put(tag, rawManifest{raw, types.OCIManifestSchema1}, ropts...); err != nil {
		return classify(tag.String(), err)
	}
	return nil
}

// LoadSigner reads a PEM private key that is not encrypted (PKCS #8, EC or PKCS #1). Keys
// that `cosign generate-key-pair` writes are encrypted: sign with cosign itself then.
func LoadSigner(path string) (signature.Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("oci: private key: %w", err)
	}
	if bytes.Contains(b, []byte("ENCRYPTED")) {
		return nil, fmt.Errorf("oci: private key %s is encrypted: sign with `cosign sign --key %s REF@DIGEST` instead", path, path)
	}
	priv, err := cryptoutils.UnmarshalPEMToPrivateKey(b, cryptoutils.SkipPassword)
	if err != nil {
		return nil, fmt.Errorf("oci: private key %s: %w", path, err)
	}
	s, err := signature.LoadSigner(priv, crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("oci: private key %s: %w", path, err)
	}
	return s, nil
}
