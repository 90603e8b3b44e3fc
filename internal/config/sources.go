package config

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/wasmhost/wasmhost/internal/oci"
)

// TrustConfig is the signature policy of handlers.sources: the public keys trusted, each for
// the plugin types whose handlers it may sign, and the plugin types whose handlers may come
// unsigned. It applies to modules pulled from registries; the files of handlerDir are trusted
// by their permissions, as before.
type TrustConfig struct {
	// Keys are PEM public keys (cosign.pub) and the plugin types each may sign. Defaults to none.
	Keys []TrustKey `yaml:"keys"`
	// Identities are keyless signers: the subject and OIDC issuer of a short-lived certificate
	// from the CA of an operator-provided trusted root, whose signature (a Sigstore bundle) a
	// transparency log of that root recorded; verified offline. Defaults to none.
	Identities []TrustIdentity `yaml:"identities"`
	// AllowUnsigned are plugin types whose handlers may be unsigned, or signed by no key of
	// Keys. Defaults to none: every module pulled must be signed.
	AllowUnsigned []string `yaml:"allowUnsigned"`
}

// TrustIdentity is one trusted keyless signer.
type TrustIdentity struct {
	// Issuer is the OIDC issuer the certificate names, exactly (e.g.
	// https://token.actions.githubusercontent.com).
	Issuer string `yaml:"issuer"`
	// Subject is the certificate's subject (its SAN: an email, a workflow's URI), exactly; or
	// SubjectRegExp, a regular expression it must match. One of the two.
	Subject       string `yaml:"subject"`
	SubjectRegExp string `yaml:"subjectRegExp"`
	// TrustedRoot is the path of a Sigstore trusted root (trusted_root.json): the CAs and
	// transparency logs trusted. Read at start, offline.
	TrustedRoot string `yaml:"trustedRoot"`
	// PluginTypes are the plugin types whose handlers this identity may sign.
	PluginTypes []string `yaml:"pluginTypes"`
}

// TrustKey is one trusted public key.
type TrustKey struct {
	// PublicKey is the path of a PEM public key, as `cosign generate-key-pair` writes cosign.pub.
	PublicKey string `yaml:"publicKey"`
	// PluginTypes are the plugin types whose handlers this key may sign.
	PluginTypes []string `yaml:"pluginTypes"`
}

// PullConfig is how handlers.sources are pulled.
type PullConfig struct {
	// Timeout bounds what each attempt at one source fetches from the registry: its manifest,
	// its layer and its signatures (not the compile that reads its plugin types).
	// Defaults to 30s; it must be shorter than FirstWait, so that a registry that hangs is
	// tried again within the wait.
	Timeout Duration `yaml:"timeout"`
	// FirstWait bounds how long /readyz, and the plugins of a type no handler serves yet, wait
	// at start for the sources that serve nothing yet: pulled and loaded, or refused (plugins
	// of the types served already register at once). Past it those plugins are told no
	// handler serves their type, and a source pulled later serves from then on. Defaults to 1m.
	FirstWait Duration `yaml:"firstWait"`
	// Parallel bounds the sources pulled at once. Defaults to 4.
	Parallel int `yaml:"-"` // a constant, not a key (was parallel; docs/configuration.md, "Constants")
	// Retry is the first wait before a source whose registry could not be reached is tried
	// again; it doubles up to 5m, each wait shortened by a random part of at most half so
	// that a fleet does not come back to a registry all at once. Defaults to 10s.
	Retry Duration `yaml:"-"` // a constant, not a key (was retry; docs/configuration.md, "Constants")
}

// DefaultPull is handlers.pull's defaults.
func DefaultPull() PullConfig {
	return PullConfig{Timeout: Duration(oci.DefaultPullTimeout), FirstWait: Duration(time.Minute), Parallel: oci.DefaultMaxParallel, Retry: Duration(oci.DefaultRetry)}
}

// validateSources checks handlers.sources, handlers.trust and handlers.pull.
func (h *HandlersConfig) validateSources(bad func(key, format string, args ...any)) {
	repos := map[string]string{}
	for i, ref := range h.Sources {
		key := fmt.Sprintf("handlers.sources[%d]", i)
		r, err := name.ParseReference(ref)
		if err != nil {
			bad(key, "%q is not a registry reference (registry/repository@sha256:… or :tag): %v", ref, err)
			continue
		}
		repo := r.Context().String()
		if other, dup := repos[repo]; dup {
			bad(key, "%s names the repository of %s too: serve one revision of a handler", ref, other)
		}
		repos[repo] = ref
	}
	for i, k := range h.Trust.Keys {
		key := fmt.Sprintf("handlers.trust.keys[%d]", i)
		if k.PublicKey == "" {
			bad(key+".publicKey", "must name a PEM public key file")
		} else if _, err := os.Stat(k.PublicKey); err != nil {
			bad(key+".publicKey", "%v", err)
		}
		if len(k.PluginTypes) == 0 {
			bad(key+".pluginTypes", "must name the plugin types whose handlers the key may sign")
		}
		if slices.Contains(k.PluginTypes, "") {
			bad(key+".pluginTypes", "a plugin type must not be empty")
		}
	}
	p := h.Pull
	if p.Timeout <= 0 {
		bad("handlers.pull.timeout", "must be positive")
	}
	if p.FirstWait < 0 {
		bad("handlers.pull.firstWait", "must not be negative")
	}
	if p.Timeout > 0 && p.FirstWait > 0 && p.Timeout >= p.FirstWait {
		bad("handlers.pull.timeout", "%s is not shorter than handlers.pull.firstWait (%s): a registry that hangs would hold the first wait without a second try", p.Timeout, p.FirstWait)
	}
	for i, id := range h.Trust.Identities {
		key := fmt.Sprintf("handlers.trust.identities[%d]", i)
		if id.Issuer == "" {
			bad(key+".issuer", "must name the OIDC issuer of the signer's certificates")
		}
		if (id.Subject == "") == (id.SubjectRegExp == "") {
			bad(key+".subject", "give the signer's subject, or subjectRegExp, not both")
		} else if id.SubjectRegExp != "" {
			if _, err := regexp.Compile(id.SubjectRegExp); err != nil {
				bad(key+".subjectRegExp", "%v", err)
			}
		}
		if id.TrustedRoot == "" {
			bad(key+".trustedRoot", "must name a Sigstore trusted root file (trusted_root.json)")
		} else if _, err := os.Stat(id.TrustedRoot); err != nil {
			bad(key+".trustedRoot", "%v", err)
		}
		if len(id.PluginTypes) == 0 {
			bad(key+".pluginTypes", "must name the plugin types whose handlers the identity may sign")
		}
	}
	if len(h.Sources) > 0 && len(h.Trust.Keys) == 0 && len(h.Trust.Identities) == 0 && len(h.Trust.AllowUnsigned) == 0 {
		bad("handlers.trust", "handlers.sources is set, but no key or identity is trusted (handlers.trust.keys, .identities) and no plugin type allows unsigned handlers (handlers.trust.allowUnsigned): every source would be refused")
	}
}

// absoluteKeyPaths makes the public key paths absolute.
func (h *HandlersConfig) absoluteKeyPaths() error {
	for i := range h.Trust.Keys {
		p := &h.Trust.Keys[i].PublicKey
		if *p == "" {
			continue
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return fmt.Errorf("config: %s: %w", *p, err)
		}
		*p = abs
	}
	for i := range h.Trust.Identities {
		p := &h.Trust.Identities[i].TrustedRoot
		if *p == "" {
			continue
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return fmt.Errorf("config: %s: %w", *p, err)
		}
		*p = abs
	}
	return nil
}
