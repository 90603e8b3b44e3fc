package main

// handler push and handler pull: a handler module to and from an OCI registry, for authors and
// for operators who want to look at what a node would pull.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/spf13/cobra"

	"github.com/wasmhost/wasmhost/internal/handlercheck"
	"github.com/wasmhost/wasmhost/internal/oci"
)

func newHandlerPushCmd() *cobra.Command {
	var signKey string
	cmd := &cobra.Command{
		Use:   "push FILE.wasm REF",
		Short: "Push a handler module to an OCI registry (CNCF WebAssembly artifact), optionally signed",
		Long: `Push a handler module to an OCI registry as a CNCF WebAssembly artifact (config
application/vnd.wasm.config.v0+json, one application/wasm layer), and print the reference
pinned by digest: that is what goes into handlers.sources.

With --sign-key, sign the pushed manifest as cosign does (a signature in the tag
sha256-<hex>.sig), with a PEM private key that is not encrypted. A key that cosign encrypted
signs with cosign itself (cosign 3 writes a Sigstore bundle, which the daemon reads too):
cosign sign --key cosign.key --use-signing-config=false --tlog-upload=false REF@DIGEST.

Credentials come from the docker config file (docker login, crane auth login, and their
credential helpers); registries are reached over TLS, loopback ones over plain HTTP.`,
		Example: `  wasmhost handler push handlers-wasm/csi.wasm registry.example.com/wasmhost/csi:v1
  wasmhost handler push --sign-key platform.key csi.wasm registry.example.com/wasmhost/csi:v1`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runHandlerPush(cmd, args[0], args[1], signKey)
		},
	}
	cmd.Flags().StringVar(&signKey, "sign-key", "", "sign the pushed module with this PEM private key (not encrypted)")
	return cmd
}

func runHandlerPush(cmd *cobra.Command, file, ref, signKey string) error {
	bin, err := handlercheck.ReadModule(file)
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(bin, []byte("\x00asm")) {
		hint := handlercheck.NotWasmHint(bin)
		if hint == "" {
			hint = "it does not start with the WebAssembly magic number"
		}
		return fmt.Errorf("%s is not a WebAssembly module: %s", file, hint)
	}
	// Read the key before pushing: a push that cannot be signed is not wanted.
	ctx := cmd.Context()
	var signer signature.Signer
	if signKey != "" {
		if signer, err = oci.LoadSigner(signKey); err != nil {
			return err
		}
	}
	pinned, err := oci.Push(ctx, bin, ref, oci.Options{})
	if err != nil {
		return err
	}
	sigTag := ""
	if signer != nil {
		if err := oci.Sign(ctx, pinned, signer, oci.Options{}); err != nil {
			return fmt.Errorf("pushed %s, but signing it failed: %w", pinned, err)
		}
		sigTag = oci.SignatureTag(pinned).String()
	}
	printPushed(cmd.OutOrStdout(), file, ref, pinned.String(), sigTag, signKey)
	return nil
}

func printPushed(out io.Writer, file, ref, pinned, sigTag, key string) {
	fmt.Fprintf(out, "pushed %s to %s\n", file, ref)
	fmt.Fprintf(out, "pinned: %s\n", pinned)
	if sigTag != "" {
		fmt.Fprintf(out, "signed: with %s, in %s\n", key, sigTag)
	} else {
		fmt.Fprintln(out, "signed: no (a daemon serves it only for plugin types in handlers.trust.allowUnsigned)")
	}
	fmt.Fprintf(out, "\nIn the daemon's config:\n\nhandlers:\n  sources:\n    - %s\n", pinned)
}

// keylessFlags are handler pull's keyless identity, named as cosign verify names them.
type keylessFlags struct {
	identity, identityRegExp, issuer, trustedRoot string
}

func (k keylessFlags) load() (*oci.Key, error) {
	if k.identity == "" && k.identityRegExp == "" && k.issuer == "" && k.trustedRoot == "" {
		return nil, nil
	}
	if (k.identity == "") == (k.identityRegExp == "") || k.issuer == "" || k.trustedRoot == "" {
		return nil, errors.New("a keyless identity needs --certificate-identity (or --certificate-identity-regexp), --certificate-oidc-issuer and --trusted-root")
	}
	key, err := oci.LoadIdentity(k.trustedRoot, k.issuer, k.identity, k.identityRegExp, nil)
	return &key, err
}

func newHandlerPullCmd() *cobra.Command {
	var output string
	var keyless keylessFlags
	var keys []string
	cmd := &cobra.Command{
		Use:   "pull REF",
		Short: "Pull a handler module from an OCI registry, check its digest and signatures",
		Long: `Pull a handler module as the daemon does (the CNCF WebAssembly artifact, the older
wasm-to-oci layout, or Istio's compat image), check it against its digests, say which layout it came in, its pinned reference and its
signatures, and write it to a file.

Signatures are read in both formats cosign writes: Sigstore bundles (cosign 3's default,
attached through the OCI referrers API or its tag fallback) and the legacy tag sha256-<hex>.sig.
With --key (repeatable), verify them against these PEM public keys, offline, as the
daemon does (or keyless, a bundle's certificate against --certificate-identity and
--certificate-oidc-issuer, with a transparency log entry, all from the --trusted-root file),
before anything is written: when none verifies, nothing is written and the exit
status is 1. The file is written through a temporary file in its directory and renamed, so a
script never finds a part of a module, or an unverified one, under its name.`,
		Example: `  wasmhost handler pull registry.example.com/wasmhost/csi:v1
  wasmhost handler pull --key platform.pub -O csi.wasm registry.example.com/wasmhost/csi@sha256:…
  wasmhost handler inspect csi.wasm`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := keyless.load()
			if err != nil {
				return err
			}
			return runHandlerPull(cmd, args[0], output, keys, id)
		},
	}
	cmd.Flags().StringVarP(&output, "output-file", "O", "", "where to write the module (default: the repository's last element .wasm, here)")
	cmd.Flags().StringArrayVar(&keys, "key", nil, "a PEM public key (cosign.pub) to verify the signatures with; repeatable")
	cmd.Flags().StringVar(&keyless.identity, "certificate-identity", "", "keyless: the signer's certificate subject (an email, a workflow URI)")
	cmd.Flags().StringVar(&keyless.identityRegExp, "certificate-identity-regexp", "", "keyless: a regular expression the signer's certificate subject matches")
	cmd.Flags().StringVar(&keyless.issuer, "certificate-oidc-issuer", "", "keyless: the OIDC issuer of the signer's certificate")
	cmd.Flags().StringVar(&keyless.trustedRoot, "trusted-root", "", "keyless: a Sigstore trusted root file (trusted_root.json), read offline")
	return cmd
}

func runHandlerPull(cmd *cobra.Command, ref, output string, keyFiles []string, identity *oci.Key) error {
	ctx := cmd.Context()
	// The keys first: a pull that cannot be verified as asked is not wanted.
	var keys []oci.Key
	for _, f := range keyFiles {
		k, err := oci.LoadKey(f, nil)
		if err != nil {
			return err
		}
		keys = append(keys, k)
	}
	if identity != nil {
		keys = append(keys, *identity)
	}
	p, err := oci.Pull(ctx, ref, oci.Options{})
	if err != nil {
		return err
	}
	sigs, err := oci.FetchSignatures(ctx, p.Pinned, oci.Options{})
	if err != nil {
		return fmt.Errorf("pulled %s, but reading its signatures failed (nothing written): %w", p.Pinned, err)
	}
	if output == "" {
		output = filepath.Base(p.Pinned.Context().RepositoryStr()) + ".wasm"
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "pulled %s\n", ref)
	fmt.Fprintf(out, "pinned: %s\n", p.Pinned)
	if p.Resolved {
		fmt.Fprintln(out, "        (a tag: name the digest in handlers.sources)")
	}
	fmt.Fprintf(out, "layout: %s\n", p.Layout)
	fmt.Fprintf(out, "sha256: %s (%d bytes)\n", p.ModuleSHA256, len(p.Module))
	nb := 0
	for _, s := range sigs {
		if s.Format == oci.FormatBundle {
			nb++
		}
	}
	bundles := "Sigstore bundles"
	if nb == 1 {
		bundles = "Sigstore bundle"
	}
	fmt.Fprintf(out, "signatures: %d (%d %s referring to it, %d in %s)\n", len(sigs), nb, bundles, len(sigs)-nb, oci.SignatureTag(p.Pinned))
	if len(keys) > 0 {
		signedBy, problems := oci.Verify(sigs, p.Pinned, keys)
		for _, k := range signedBy {
			fmt.Fprintf(out, "verified: signed with %s\n", k.Name)
		}
		if len(signedBy) == 0 {
			why := "it has no signature"
			if len(problems) > 0 {
				why = strings.Join(problems, "; ")
			}
			fmt.Fprintf(out, "not verified: %s\n", why)
			fmt.Fprintf(out, "not written: %s\n", output)
			return errors.New("no signature verifies with the keys given; nothing written")
		}
	}
	if err := writeFileAtomic(output, p.Module); err != nil {
		return err
	}
	fmt.Fprintf(out, "written: %s\n", output)
	return nil
}

// writeFileAtomic writes b to path through a temporary file in path's directory, renamed over
// path only once it is complete: path holds the old content or the new, never a part.
func writeFileAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // gone after the rename; left by nothing else
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
