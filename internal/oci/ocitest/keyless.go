package ocitest

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	protobundle "github.com/sigstore/protobuf-specs/gen/pb-go/bundle/v1"
	protocommon "github.com/sigstore/protobuf-specs/gen/pb-go/common/v1"
	protodsse "github.com/sigstore/protobuf-specs/gen/pb-go/dsse"
	protorekor "github.com/sigstore/protobuf-specs/gen/pb-go/rekor/v1"
	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/testing/ca"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/wasmhost/wasmhost/internal/oci"
)

// Sigstore is a Sigstore of the test's own (a CA, a transparency log, a timestamp authority),
// for keyless signatures verified offline against its trusted root file.
type Sigstore struct {
	vs *ca.VirtualSigstore
	// TrustedRoot is the path of its trusted_root.json.
	TrustedRoot string
}

// NewSigstore makes a Sigstore and writes its trusted root under dir.
func NewSigstore(t testing.TB, dir string) *Sigstore {
	t.Helper()
	vs, err := ca.NewVirtualSigstore()
	if err != nil {
		t.Fatal(err)
	}
	// The virtual Sigstore keeps its logs' IDs as hex text; a trusted root file holds bytes.
	logs := map[string]*root.TransparencyLog{}
	for k, l := range vs.RekorLogs() {
		c := *l
		if c.ID, err = hex.DecodeString(string(l.ID)); err != nil {
			t.Fatal(err)
		}
		logs[k] = &c
	}
	tr, err := root.NewTrustedRoot(root.TrustedRootMediaType01, vs.FulcioCertificateAuthorities(), nil, vs.TimestampingAuthorities(), logs)
	if err != nil {
		t.Fatal(err)
	}
	b, err := tr.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	s := &Sigstore{vs: vs, TrustedRoot: filepath.Join(dir, "trusted_root.json")}
	if err := os.WriteFile(s.TrustedRoot, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return s
}

// SignKeyless signs d as cosign 3 signs keyless: a certificate issued to subject on the word of
// issuer, a DSSE statement of cosign's predicate over d, the log entry with its inclusion
// proof, in a bundle attached as SignBundle attaches one.
func (s *Sigstore) SignKeyless(t testing.TB, d name.Digest, subject, issuer string) {
	t.Helper()
	stmt, err := json.Marshal(map[string]any{
		"_type":         "https://in-toto.io/Statement/v1",
		"subject":       []any{map[string]any{"digest": map[string]string{"sha256": strings.TrimPrefix(d.DigestStr(), "sha256:")}}},
		"predicateType": oci.CosignSignPredicate,
		"predicate":     map[string]any{},
	})
	if err != nil {
		t.Fatal(err)
	}
	e, err := s.vs.AttestAtTime(subject, issuer, stmt, time.Now(), true)
	if err != nil {
		t.Fatal(err)
	}
	vc, err := e.VerificationContent()
	if err != nil {
		t.Fatal(err)
	}
	sc, err := e.SignatureContent()
	if err != nil {
		t.Fatal(err)
	}
	env := sc.(*bundle.Envelope).Envelope
	payload, err := base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := base64.StdEncoding.DecodeString(env.Signatures[0].Sig)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := e.TlogEntries()
	if err != nil {
		t.Fatal(err)
	}
	tsrs, err := e.Timestamps()
	if err != nil {
		t.Fatal(err)
	}
	pb := &protobundle.Bundle{
		MediaType: oci.MediaTypeBundle,
		VerificationMaterial: &protobundle.VerificationMaterial{
			Content:                   &protobundle.VerificationMaterial_Certificate{Certificate: &protocommon.X509Certificate{RawBytes: vc.Certificate().Raw}},
			TimestampVerificationData: &protobundle.TimestampVerificationData{},
		},
		Content: &protobundle.Bundle_DsseEnvelope{DsseEnvelope: &protodsse.Envelope{
			Payload: payload, PayloadType: env.PayloadType, Signatures: []*protodsse.Signature{{Sig: sig}},
		}},
	}
	for _, en := range entries {
		// The virtual log's entry leaves out its kind and version: the dsse entry it made.
		tle := proto.Clone(en.TransparencyLogEntry()).(*protorekor.TransparencyLogEntry)
		tle.KindVersion = &protorekor.KindVersion{Kind: "dsse", Version: "0.0.1"}
		pb.VerificationMaterial.TlogEntries = append(pb.VerificationMaterial.TlogEntries, tle)
	}
	for _, ts := range tsrs {
		pb.VerificationMaterial.TimestampVerificationData.Rfc3161Timestamps = append(pb.VerificationMaterial.TimestampVerificationData.Rfc3161Timestamps, &protocommon.RFC3161SignedTimestamp{SignedTimestamp: ts})
	}
	raw, err := protojson.Marshal(pb)
	if err != nil {
		t.Fatal(err)
	}
	attachBundle(t, d, raw, oci.CosignSignPredicate)
}
