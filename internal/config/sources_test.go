package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/internal/config"
)

func TestSourcesAndTrust(t *testing.T) {
	dir := t.TempDir()
	pub := filepath.Join(dir, "platform.pub")
	if err := os.WriteFile(pub, []byte("-----BEGIN PUBLIC KEY-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	load := func(body string) error {
		p := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(p, []byte("apiVersion: wasmhost.dev/v1alpha1\nkind: WasmhostConfiguration\n"+body), 0o644); err != nil {
			t.Fatal(err)
		}
		c := config.Default()
		_, err := config.Check(p, &c)
		return err
	}
	good := `handlers:
  sources:
    - registry.example.com/wasmhost/csi@sha256:` + strings.Repeat("a", 64) + `
    - registry.example.com/wasmhost/example:v1
  trust:
    keys:
      - publicKey: ` + pub + `
        pluginTypes: [CSIPlugin]
    allowUnsigned: [example.wasmhost.dev]
`
	if err := load(good); err != nil {
		t.Fatalf("valid sources: %v", err)
	}
	for body, want := range map[string]string{
		"handlers:\n  sources: [\"not a ref!\"]\n  trust: {allowUnsigned: [x]}\n":                                                            "handlers.sources[0]: \"not a ref!\" is not a registry reference",
		"handlers:\n  sources: [r.example.com/a:v1, r.example.com/a:v2]\n  trust: {allowUnsigned: [x]}\n":                                    "handlers.sources[1]: r.example.com/a:v2 names the repository of r.example.com/a:v1 too",
		"handlers:\n  sources: [r.example.com/a:v1]\n":                                                                                       "handlers.trust: handlers.sources is set, but no key or identity is trusted",
		"handlers:\n  trust:\n    keys: [{publicKey: /nonexistent.pub}]\n":                                                                   "handlers.trust.keys[0].pluginTypes: must name the plugin types",
		"handlers:\n  trust:\n    identities: [{issuer: https://i, trustedRoot: /nonexistent.json, pluginTypes: [T]}]\n":                     "handlers.trust.identities[0].subject: give the signer's subject, or subjectRegExp",
		"handlers:\n  trust:\n    identities: [{issuer: https://i, subjectRegExp: '(', trustedRoot: /nonexistent.json, pluginTypes: [T]}]\n": "handlers.trust.identities[0].subjectRegExp: error parsing regexp",
		"handlers:\n  trust:\n    identities: [{issuer: https://i, subject: me, trustedRoot: /nonexistent.json, pluginTypes: [T]}]\n":        "handlers.trust.identities[0].trustedRoot: stat /nonexistent.json",
		"handlers:\n  trust:\n    identities: [{subject: me, trustedRoot: /nonexistent.json, pluginTypes: [T]}]\n":                           "handlers.trust.identities[0].issuer: must name the OIDC issuer",
	} {
		err := load(body)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", body, err, want)
		}
	}
}
