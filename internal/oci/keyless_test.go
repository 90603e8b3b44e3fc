package oci

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/testing/ca"
)

// Keyless: a bundle signed with a short-lived certificate of a CA the operator's trusted root
// names, recorded by its transparency log, verifies for the identity (subject and issuer) it
// was issued to, offline; another identity, another root, another digest or another predicate
// does not.
func TestKeylessIdentity(t *testing.T) {
	vs, err := ca.NewVirtualSigstore()
	if err != nil {
		t.Fatal(err)
	}
	// The operator's trusted root file, as LoadIdentity reads it. (The virtual Sigstore keeps
	// its logs' IDs as hex text; a trusted root file holds the bytes.)
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
	rootFile := filepath.Join(t.TempDir(), "trusted_root.json")
	if err := os.WriteFile(rootFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	const issuer, subject = "https://token.actions.githubusercontent.com", "https://github.com/example/handlers/.github/workflows/release.yml@refs/heads/main"
	id, err := LoadIdentity(rootFile, issuer, subject, "", []string{"CSIPlugin"})
	if err != nil {
		t.Fatal(err)
	}
	byRegexp, err := LoadIdentity(rootFile, issuer, "", `^https://github\.com/example/handlers/`, []string{"CSIPlugin"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := LoadIdentity(rootFile, issuer, "https://github.com/someone/else/.github/workflows/x.yml@refs/heads/main", "", []string{"CSIPlugin"})
	if err != nil {
		t.Fatal(err)
	}
	d, err := name.NewDigest("registry.example.com/h/csi@sha256:" + strings.Repeat("ab", 32))
	if err != nil {
		t.Fatal(err)
	}
	statement := func(subjectHex, predicate string) []byte {
		b, _ := json.Marshal(map[string]any{
			"_type":         "https://in-toto.io/Statement/v1",
			"subject":       []any{map[string]any{"digest": map[string]string{"sha256": subjectHex}}},
			"predicateType": predicate,
			"predicate":     map[string]any{},
		})
		return b
	}
	signed, err := vs.Attest(subject, issuer, statement(strings.Repeat("ab", 32), CosignSignPredicate))
	if err != nil {
		t.Fatal(err)
	}
	if by, problem := verifyEntity(signed, d, []Key{other, id}); len(by) != 1 || by[0].Name != id.Name || problem != "" {
		t.Errorf("signed by the identity: %v, %q", by, problem)
	}
	if by, problem := verifyEntity(signed, d, []Key{byRegexp}); len(by) != 1 || problem != "" {
		t.Errorf("signed by an identity matching the regexp: %v, %q", by, problem)
	}
	if by, problem := verifyEntity(signed, d, []Key{other}); len(by) != 0 || problem == "" {
		t.Errorf("another identity: %v, %q", by, problem)
	}
	// Another root (another CA, another log): nothing verifies.
	vs2, err := ca.NewVirtualSigstore()
	if err != nil {
		t.Fatal(err)
	}
	if by, _ := verifyEntity(signed, d, []Key{identityKey(vs2, *id.Identity, nil)}); len(by) != 0 {
		t.Errorf("a certificate of another root: %v", by)
	}
	otherDigest, err := vs.Attest(subject, issuer, statement(strings.Repeat("cd", 32), CosignSignPredicate))
	if err != nil {
		t.Fatal(err)
	}
	if by, _ := verifyEntity(otherDigest, d, []Key{id}); len(by) != 0 {
		t.Errorf("a signature of another digest: %v", by)
	}
	attestation, err := vs.Attest(subject, issuer, statement(strings.Repeat("ab", 32), "https://spdx.dev/Document"))
	if err != nil {
		t.Fatal(err)
	}
	if by, problem := verifyEntity(attestation, d, []Key{id}); len(by) != 0 || !strings.Contains(problem, "https://spdx.dev/Document") {
		t.Errorf("an attestation: %v, %q", by, problem)
	}
	if _, err := LoadIdentity(filepath.Join(t.TempDir(), "missing.json"), issuer, subject, "", nil); err == nil {
		t.Error("a missing trusted root loaded")
	}
}
