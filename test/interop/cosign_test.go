package interop

// cosign v3, the real binary, signs handler modules pushed with wasmhost handler push, in both
// formats it writes: the Sigstore bundle (its default, attached through the OCI 1.1 referrers
// API, or the referrers tag schema on a registry without it) and the legacy .sig tag. wasmhost
// handler pull and a daemon serving handlers.sources verify them offline against the key; and
// cosign verifies what wasmhost handler push --sign-key writes.
//
// The commands are the ones docs/configuration.md gives an operator (cosignSignArgs).

import (
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
)

// cosignVersion is the cosign hack/cosign builds (go install …/cosign/v3/cmd/cosign@v3.1.3),
// which make test-interop (so make test) and CI run before these tests.
const cosignVersion = "v3.1.3"

// cosignBinary returns the cosign binary: $WASMHOST_COSIGN (make test-interop sets it), or
// the one hack/cosign builds into ~/.cache/wasmhost/cosign-v3.1.3/. Without it the test skips
// (go test alone does not build it), and fails in CI.
func cosignBinary(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("WASMHOST_COSIGN")
	if bin == "" {
		home, _ := os.UserHomeDir()
		bin = filepath.Join(home, ".cache", "wasmhost", "cosign-"+cosignVersion, "cosign")
	}
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("cosign %s is required in CI (make test builds it with hack/cosign): %v", cosignVersion, err)
		}
		t.Skipf("cosign %s not built (make test-interop builds it, or hack/cosign alone): %v", cosignVersion, err)
	}
	return bin
}

// TestCosignBuiltAtTheTestedVersion: hack/cosign, which make test and CI run, builds the
// cosign these tests are written for.
func TestCosignBuiltAtTheTestedVersion(t *testing.T) {
	b, err := os.ReadFile("../../hack/cosign")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "\nversion="+cosignVersion+" ") {
		t.Errorf("hack/cosign does not build cosign %s, the version these tests are written for", cosignVersion)
	}
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mk), "hack/cosign") {
		t.Error("make test-interop does not build cosign with hack/cosign: the cosign tests would skip")
	}
}

// cosignSignArgs is how docs/configuration.md signs a pushed handler offline with a key: a
// Sigstore bundle (cosign 3's default), or with legacy the .sig tag cosign 2 wrote.
func cosignSignArgs(key, ref string, legacy bool) []string {
	args := []string{"sign", "--key", key, "--use-signing-config=false", "--tlog-upload=false"}
	if legacy {
		args = append(args, "--new-bundle-format=false")
	}
	return append(args, ref)
}

// run runs a command in dir with the environment cosign needs here (no password on the test
// key, no terminal), and returns its output.
func run(t *testing.T, dir, bin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "COSIGN_PASSWORD=", "HOME="+dir)
	cmd.Stdin = nil
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// startRegistry serves an OCI registry on loopback until the test ends.
func startRegistry(t *testing.T, referrers bool) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0)), registry.WithReferrersSupport(referrers)))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func TestCosignSignaturesVerified(t *testing.T) {
	cosign := cosignBinary(t)
	wasmhost := daemonBinary(t)
	example := handlerWasm(t, "example")
	d := newDirs(t)
	if out, err := run(t, d.Data, cosign, "generate-key-pair"); err != nil {
		t.Fatalf("cosign generate-key-pair: %v\n%s", err, out)
	}
	if out, err := run(t, d.Data, cosign, "generate-key-pair", "--output-key-prefix", "other"); err != nil {
		t.Fatalf("cosign generate-key-pair: %v\n%s", err, out)
	}
	key, pub, otherPub := filepath.Join(d.Data, "cosign.key"), filepath.Join(d.Data, "cosign.pub"), filepath.Join(d.Data, "other.pub")

	var served string // a reference signed with a bundle, for the daemon below
	registries := map[bool]string{true: startRegistry(t, true), false: startRegistry(t, false)}
	for i, c := range []struct {
		name              string
		referrers, legacy bool
	}{
		{"bundle, referrers API", true, false},
		{"bundle, referrers tag schema", false, false},
		{"legacy .sig tag", false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			repo := fmt.Sprintf("%s/wasmhost/example%d", registries[c.referrers], i)
			out, err := run(t, d.Data, wasmhost, "handler", "push", example, repo+":v1")
			if err != nil {
				t.Fatalf("handler push: %v\n%s", err, out)
			}
			pinned := strings.TrimSpace(strings.SplitN(strings.SplitN(out, "pinned: ", 2)[1], "\n", 2)[0])
			if out, err := run(t, d.Data, cosign, cosignSignArgs(key, pinned, c.legacy)...); err != nil {
				t.Fatalf("cosign %s: %v\n%s", strings.Join(cosignSignArgs(key, pinned, c.legacy), " "), err, out)
			}

			file := filepath.Join(d.Data, "pulled.wasm")
			out, err = run(t, d.Data, wasmhost, "handler", "pull", "--key", pub, "-O", file, pinned)
			want := "(1 Sigstore bundle referring to it, 0 in "
			if c.legacy {
				want = "(0 Sigstore bundles referring to it, 1 in "
			}
			if err != nil || !strings.Contains(out, "verified: signed with "+pub) || !strings.Contains(out, want) {
				t.Fatalf("handler pull --key cosign.pub: %v\n%s", err, out)
			}
			os.Remove(file)
			out, err = run(t, d.Data, wasmhost, "handler", "pull", "--key", otherPub, "-O", file, pinned)
			if err == nil || !strings.Contains(out, "verifies with none of the configured keys") {
				t.Errorf("handler pull --key other.pub: %v\n%s", err, out)
			}
			if _, err := os.Stat(file); err == nil {
				t.Errorf("handler pull wrote %s though no signature verified", file)
			}
			if !c.legacy && c.referrers {
				served = pinned
			}
		})
	}

	// wasmhost handler push --sign-key writes what cosign verifies (the legacy format).
	t.Run("wasmhost signs, cosign verifies", func(t *testing.T) {
		reg := registries[false]
		plainKey := filepath.Join(d.Data, "plain.key")
		// cosign's keys are encrypted: a PEM key that is not, as handler push reads.
		if _, err := exec.LookPath("openssl"); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("openssl is required in CI (.ci/run installs it): %v", err)
			}
			t.Skipf("openssl: %v", err)
		}
		if out, err := exec.Command("openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", plainKey).CombinedOutput(); err != nil {
			t.Fatalf("openssl: %v\n%s", err, out)
		}
		plainPub := filepath.Join(d.Data, "plain.pub")
		if out, err := exec.Command("openssl", "ec", "-in", plainKey, "-pubout", "-out", plainPub).CombinedOutput(); err != nil {
			t.Fatalf("openssl: %v\n%s", err, out)
		}
		out, err := run(t, d.Data, wasmhost, "handler", "push", "--sign-key", plainKey, example, reg+"/wasmhost/example:v1")
		if err != nil {
			t.Fatalf("handler push --sign-key: %v\n%s", err, out)
		}
		pinned := strings.TrimSpace(strings.SplitN(strings.SplitN(out, "pinned: ", 2)[1], "\n", 2)[0])
		if out, err := run(t, d.Data, cosign, "verify", "--key", plainPub, "--insecure-ignore-tlog", pinned); err != nil {
			t.Errorf("cosign verify: %v\n%s", err, out)
		}
	})

	// A daemon told to serve the bundle-signed module, trusting the key for its type, serves it.
	if served == "" {
		t.Fatal("no bundle-signed reference to serve")
	}
	cfg := "apiVersion: wasmhost.dev/v1alpha1\nkind: WasmhostConfiguration\nhandlers:\n  sources: [" + served + "]\n" +
		"  trust:\n    keys:\n      - publicKey: " + pub + "\n        pluginTypes: [example.wasmhost.dev]\n"
	dm := startDaemon(t, d, daemonOptions{Config: cfg})
	r := dm.waitLog(t, "the signed source pulled", func(r logRecord) bool { return r.str("msg") == "handler source pulled" })
	if by, _ := r["signed_by"].([]any); len(by) != 1 || by[0] != pub {
		t.Errorf("pulled, signed by %v; want %s", r["signed_by"], pub)
	}
	dm.waitLog(t, "the pulled handler serving", func(r logRecord) bool {
		return r.str("msg") == "handler serving" && r.str("handler_source") == "oci"
	})
}
