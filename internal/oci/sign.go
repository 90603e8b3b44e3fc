package oci

// Cosign signatures, in both formats cosign writes, verified offline against public keys:
//
//   - Sigstore bundles, cosign 3's default: an OCI artifact (artifactType
//     application/vnd.dev.sigstore.bundle.v0.3+json) whose subject is the signed manifest,
//     found through the OCI 1.1 referrers API, or the referrers tag schema (an index tagged
//     R:sha256-H) on registries without it. Its layer is the bundle: a DSSE envelope over an
//     in-toto statement whose subject is the manifest's digest and whose predicate type is
//     cosign's (https://sigstore.dev/cosign/sign/v1). sigstore-go verifies it.
//   - The legacy format (cosign sign --new-bundle-format=false, cosign 2): a layer of the image
//     tagged R:sha256-H.sig, whose content is cosign's "simple signing" payload naming the
//     digest, and whose annotation dev.cosignproject.cosign/signature holds the signature of
//     that content, base64; verified with sigstore's signature package. What Sign writes
//     `cosign verify --key --insecure-ignore-tlog` accepts.
//
// A transparency log entry or a timestamp in a bundle is not required: the key is what is
// trusted, as `cosign verify --key --insecure-ignore-tlog` does.

import (
	"bytes"
	"context"
	"crypto"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	sgbundle "github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/verify"
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

	// MediaTypeBundle is the artifact type and layer media type of a Sigstore bundle as cosign
	// 3 attaches it; older bundle versions (v0.1, v0.2) are read too.
	MediaTypeBundle = "application/vnd.dev.sigstore.bundle.v0.3+json"
	// CosignSignPredicate is the predicate type of the statement cosign signs for an image.
	CosignSignPredicate = "https://sigstore.dev/cosign/sign/v1"

	mediaTypeEmpty = "application/vnd.oci.empty.v1+json"

	maxSignatureLayers = 64
	maxPayloadBytes    = 64 << 10
	maxBundleBytes     = 256 << 10
)

// Signature formats (Signature.Format).
const (
	FormatSimpleSigning = "" // the legacy .sig tag: Payload and Signature
	FormatBundle        = "sigstore-bundle"
)

// Signature is one signature found for a manifest: a legacy one (the payload and its
// signature) or a Sigstore bundle.
type Signature struct {
	Format    string          `json:"format,omitempty"`
	Payload   []byte          `json:"payload,omitempty"`
	Signature []byte          `json:"signature,omitempty"`
	Bundle    json.RawMessage `json:"bundle,omitempty"`
}

// Key is a signer the operator trusts, and the plugin types whose handlers it may sign: a
// public key (Verifier), or a keyless identity (Identity, checked against Root): the subject and
// issuer of a short-lived certificate from the CA of an operator-provided trusted root, whose
// signature a transparency log of that root recorded (Sigstore bundles only).
type Key struct {
	Name        string // the key's file, or the identity, in messages
	Verifier    signature.Verifier
	Identity    *verify.CertificateIdentity
	Root        root.TrustedMaterial
	PluginTypes []string
}

// LoadIdentity reads a trusted root (trusted_root.json, as `cosign trusted-root create` writes
// it, or Sigstore's public-good one) and returns the keyless identity that trusts the
// certificates its CA issued to subject (exactly, or matching subjectRegExp) on the word of
// issuer (the OIDC issuer), whose signatures a transparency log of the root recorded. It is
// read once, offline.
func LoadIdentity(trustedRoot, issuer, subject, subjectRegExp string, pluginTypes []string) (Key, error) {
	tr, err := root.NewTrustedRootFromPath(trustedRoot)
	if err != nil {
		return Key{}, fmt.Errorf("oci: trusted root %s: %w", trustedRoot, err)
	}
	id, err := verify.NewShortCertificateIdentity(issuer, "", subject, subjectRegExp)
	if err != nil {
		return Key{}, fmt.Errorf("oci: identity %s%s (issuer %s): %w", subject, subjectRegExp, issuer, err)
	}
	return identityKey(tr, id, pluginTypes), nil
}

func identityKey(tm root.TrustedMaterial, id verify.CertificateIdentity, pluginTypes []string) Key {
	subject := id.SubjectAlternativeName.SubjectAlternativeName
	if subject == "" && id.SubjectAlternativeName.Regexp.String() != "" {
		subject = "~" + id.SubjectAlternativeName.Regexp.String()
	}
	name := fmt.Sprintf("identity %s (issuer %s)", subject, id.Issuer.Issuer)
	return Key{Name: name, Identity: &id, Root: tm, PluginTypes: slices.Clone(pluginTypes)}
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

// FetchSignatures returns the signatures stored for d, in both formats (none, without an
// error, when it has none).
func FetchSignatures(ctx context.Context, d name.Digest, o Options) ([]Signature, error) {
	legacy, err := fetchLegacy(ctx, d, o)
	if err != nil {
		return nil, BoundError(err)
	}
	bundles, err := fetchBundles(ctx, d, o, maxSignatureLayers-len(legacy))
	if err != nil {
		return nil, BoundError(err)
	}
	return append(bundles, legacy...), nil
}

// fetchLegacy reads the signatures of the tag sha256-<hex>.sig.
func fetchLegacy(ctx context.Context, d name.Digest, o Options) ([]Signature, error) {
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
		payload, err := fetchBlob(d.Context(), l, maxPayloadBytes, "a signature payload's 64 KiB", ropts)
		if err != nil {
			return nil, classify(tag.String(), err)
		}
		out = append(out, Signature{Payload: payload, Signature: raw})
	}
	return out, nil
}

// isBundleType reports whether an artifact or media type is a Sigstore bundle's.
func isBundleType(t string) bool {
	return strings.HasPrefix(t, "application/vnd.dev.sigstore.bundle") && strings.HasSuffix(t, "+json")
}

// fetchBundles reads at most max Sigstore bundles that refer to d: through the referrers API,
// or the referrers tag schema where the registry has no such API (go-containerregistry falls
// back by itself).
func fetchBundles(ctx context.Context, d name.Digest, o Options, max int) ([]Signature, error) {
	ropts := o.remote(ctx)
	idx, err := remote.Referrers(d, ropts...)
	if err != nil {
		err = classify(d.String()+" (referrers)", err)
		if errors.Is(err, ErrNotFound) {
			return nil, nil
		}
		return nil, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, classify(d.String()+" (referrers)", err)
	}
	var out []Signature
	fetched := 0
	for _, desc := range im.Manifests {
		// A referrers list may name thousands of artifacts: read a bounded number of them.
		if len(out) >= max || fetched == 2*maxSignatureLayers {
			break
		}
		// An SBOM, another kind of attestation: not a signature. Some registries give the
		// config's media type (the empty one) instead of the artifact type: the manifest says.
		if !isBundleType(desc.ArtifactType) && desc.ArtifactType != mediaTypeEmpty && desc.ArtifactType != "" {
			continue
		}
		ref := d.Context().Digest(desc.Digest.String())
		fetched++
		got, err := remote.Get(ref, ropts...)
		if err != nil {
			return nil, classify(ref.String(), err)
		}
		var m v1.Manifest
		if err := json.Unmarshal(got.Manifest, &m); err != nil {
			return nil, fmt.Errorf("%w: %s: manifest: %v", ErrBadArtifact, ref, err)
		}
		// The index says what refers to d; the manifest itself must say so too.
		if m.Subject == nil || m.Subject.Digest.String() != d.DigestStr() {
			continue
		}
		for _, l := range m.Layers {
			if !isBundleType(string(l.MediaType)) {
				continue
			}
			b, err := fetchBlob(d.Context(), l, maxBundleBytes, "a signature bundle's 256 KiB", ropts)
			if err != nil {
				return nil, classify(ref.String(), err)
			}
			out = append(out, Signature{Format: FormatBundle, Bundle: b})
			break
		}
	}
	return out, nil
}

// Verify returns the keys that signed d among keys (each at most once, in keys' order), and
// why each signature that verified with none of them was not taken.
func Verify(sigs []Signature, d name.Digest, keys []Key) (signedBy []Key, problems []string) {
	for i, s := range sigs {
		var verifiedBy []Key
		var problem string
		if s.Format == FormatBundle {
			verifiedBy, problem = verifyBundle(s.Bundle, d, keys)
		} else {
			verifiedBy, problem = verifySimpleSigning(s, d, keys)
		}
		if problem != "" {
			problems = append(problems, fmt.Sprintf("signature %d (%s): %s", i+1, formatName(s.Format), BoundText(problem, 512)))
			continue
		}
		for _, k := range verifiedBy {
			if !slices.ContainsFunc(signedBy, func(o Key) bool { return o.Name == k.Name }) {
				signedBy = append(signedBy, k)
			}
		}
	}
	return signedBy, problems
}

func formatName(f string) string {
	if f == FormatBundle {
		return "Sigstore bundle"
	}
	return "legacy .sig"
}

// verifySimpleSigning verifies a legacy signature.
func verifySimpleSigning(s Signature, d name.Digest, keys []Key) ([]Key, string) {
	var p simpleSigning
	if err := json.Unmarshal(s.Payload, &p); err != nil {
		return nil, fmt.Sprintf("payload is not cosign's simple signing: %v", err)
	}
	if p.Critical.Type != simpleSigningType {
		return nil, fmt.Sprintf("payload type %q, want %q", p.Critical.Type, simpleSigningType)
	}
	if p.Critical.Image.DockerManifestDigest != d.DigestStr() {
		return nil, fmt.Sprintf("signs %s, not %s", p.Critical.Image.DockerManifestDigest, d.DigestStr())
	}
	var by []Key
	for _, k := range keys {
		if k.Verifier == nil {
			continue // a keyless identity: bundles only
		}
		if k.Verifier.VerifySignature(bytes.NewReader(s.Signature), bytes.NewReader(s.Payload)) == nil {
			by = append(by, k)
		}
	}
	if len(by) == 0 {
		return nil, "verifies with none of the configured keys"
	}
	return by, ""
}

// verifyBundle verifies a Sigstore bundle with each key: the bundle's signature, that its
// statement's subject is d, and that the statement is cosign's signature of an image (not
// another attestation made with the same key).
func verifyBundle(raw []byte, d name.Digest, keys []Key) ([]Key, string) {
	var b sgbundle.Bundle
	if err := b.UnmarshalJSON(raw); err != nil {
		return nil, fmt.Sprintf("not a Sigstore bundle: %v", err)
	}
	return verifyEntity(&b, d, keys)
}

// verifyEntity verifies a signed entity (a bundle) with each key or identity.
func verifyEntity(e verify.SignedEntity, d name.Digest, keys []Key) ([]Key, string) {
	digest, err := hex.DecodeString(strings.TrimPrefix(d.DigestStr(), "sha256:"))
	if err != nil {
		return nil, fmt.Sprintf("digest %s: %v", d.DigestStr(), err)
	}
	var by []Key
	var last error
	for _, k := range keys {
		var v *verify.Verifier
		var policy verify.PolicyBuilder
		if k.Identity != nil {
			// Keyless: the certificate is short-lived, so a transparency log entry of the
			// root's must show it signed while the certificate was valid.
			v, err = verify.NewVerifier(k.Root, verify.WithTransparencyLog(1), verify.WithObserverTimestamps(1))
			policy = verify.NewPolicy(verify.WithArtifactDigest("sha256", digest), verify.WithCertificateIdentity(*k.Identity))
		} else {
			tm := root.NewTrustedPublicKeyMaterial(func(string) (root.TimeConstrainedVerifier, error) {
				return root.NewExpiringKey(k.Verifier, time.Time{}, time.Time{}), nil
			})
			v, err = verify.NewVerifier(tm, verify.WithNoObserverTimestamps())
			policy = verify.NewPolicy(verify.WithArtifactDigest("sha256", digest), verify.WithKey())
		}
		if err != nil {
			return nil, err.Error()
		}
		res, err := v.Verify(e, policy)
		if err != nil {
			last = err
			continue
		}
		if res.Statement == nil || res.Statement.GetPredicateType() != CosignSignPredicate {
			pt := "none"
			if res.Statement != nil {
				pt = res.Statement.GetPredicateType()
			}
			return nil, fmt.Sprintf("an attestation of predicate type %s, not cosign's signature (%s)", pt, CosignSignPredicate)
		}
		by = append(by, k)
	}
	if len(by) == 0 {
		if last != nil && !strings.Contains(last.Error(), "signature") {
			return nil, "verifies with none of the configured keys: " + last.Error()
		}
		return nil, "verifies with none of the configured keys"
	}
	return by, ""
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
		return nil, fmt.Errorf("oci: private key %s is encrypted: sign with `cosign sign --key %s --use-signing-config=false --tlog-upload=false REF@DIGEST` instead", path, path)
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
