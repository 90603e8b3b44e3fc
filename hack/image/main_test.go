package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// imageNamed reads the image named tag from the layout at dir.
func imageNamed(t *testing.T, dir, tag string) v1.Image {
	t.Helper()
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var found []v1.Hash
	for _, d := range m.Manifests {
		if d.Annotations["org.opencontainers.image.ref.name"] == tag {
			found = append(found, d.Digest)
		}
	}
	if len(found) != 1 {
		t.Fatalf("layout %s: %d images named %q, want 1", dir, len(found), tag)
	}
	img, err := idx.Image(found[0])
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// files reads every regular file of the image's single layer, with its mode.
func files(t *testing.T, img v1.Image) (map[string][]byte, map[string]int64) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v; want one", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	data, modes := map[string][]byte{}, map[string]int64{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		modes[h.Name] = h.Mode
		if h.Typeflag == tar.TypeReg {
			data[h.Name], _ = io.ReadAll(tr)
		}
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s owned by %d:%d, want root", h.Name, h.Uid, h.Gid)
		}
	}
	return data, modes
}

func TestDaemonImage(t *testing.T) {
	dir := t.TempDir()
	bin := append([]byte("\x7fELF"), bytes.Repeat([]byte{7}, 1000)...)
	binPath, ca := filepath.Join(dir, "wasmhost"), filepath.Join(dir, "ca.crt")
	_ = os.WriteFile(binPath, bin, 0o755)
	_ = os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\n"), 0o644)
	out := filepath.Join(dir, "layout")
	o := options{Out: out, Tag: "dev", Binary: binPath, CACerts: ca, Arch: "amd64", Version: "v1.2.3", Created: time.Unix(0, 0).UTC()}
	if err := build(o); err != nil {
		t.Fatal(err)
	}
	// Built again, the layout holds one image of that name, the same one: reproducible.
	first, _ := imageNamed(t, out, "dev").Digest()
	if err := build(o); err != nil {
		t.Fatal(err)
	}
	img := imageNamed(t, out, "dev")
	if again, _ := img.Digest(); again != first {
		t.Errorf("two builds of the same inputs: %s then %s", first, again)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != "65532:65532" || !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/wasmhost"}) || !slices.Equal(c.Cmd, []string{"run"}) {
		t.Errorf("config: user %q, entrypoint %q, cmd %q", c.User, c.Entrypoint, c.Cmd)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" || c.Labels["org.opencontainers.image.version"] != "v1.2.3" {
		t.Errorf("platform %s/%s, labels %v", cf.OS, cf.Architecture, c.Labels)
	}
	data, modes := files(t, img)
	if !bytes.Equal(data["usr/local/bin/wasmhost"], bin) || modes["usr/local/bin/wasmhost"] != 0o755 {
		t.Errorf("the binary: %d bytes, mode %o", len(data["usr/local/bin/wasmhost"]), modes["usr/local/bin/wasmhost"])
	}
	for _, f := range []string{"etc/passwd", "etc/group", "etc/ssl/certs/ca-certificates.crt"} {
		if data[f] == nil {
			t.Errorf("%s missing", f)
		}
	}
	if !bytes.Contains(data["etc/passwd"], []byte("nonroot:x:65532:65532:")) {
		t.Errorf("/etc/passwd does not name the image's user:\n%s", data["etc/passwd"])
	}
	if modes["tmp/"] != 0o1777 {
		t.Errorf("/tmp mode %o", modes["tmp/"])
	}

	// Another program in the same kind of image (the example plugin): no "run" argument.
	if err := build(options{Out: out, Tag: "plugin", Binary: binPath, Name: "example-plugin", Arch: "amd64"}); err != nil {
		t.Fatal(err)
	}
	if cf, _ := imageNamed(t, out, "plugin").ConfigFile(); !slices.Equal(cf.Config.Entrypoint, []string{"/usr/local/bin/example-plugin"}) || len(cf.Config.Cmd) != 0 {
		t.Errorf("example plugin image: entrypoint %q, cmd %q", cf.Config.Entrypoint, cf.Config.Cmd)
	}

	if err := build(options{Out: out, Binary: filepath.Join(dir, "ca.crt")}); err == nil {
		t.Error("a file that is not an ELF binary was taken for the daemon")
	}
}

func TestHandlersImage(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	for _, n := range []string{"csi.wasm", "dra.wasm"} {
		p := filepath.Join(dir, n)
		_ = os.WriteFile(p, []byte("\x00asm\x01\x00\x00\x00"+n), 0o644)
		paths = append(paths, p)
	}
	out := filepath.Join(dir, "layout")
	if err := build(options{Out: out, Tag: "handlers", Handlers: paths, Arch: "amd64"}); err != nil {
		t.Fatal(err)
	}
	data, modes := files(t, imageNamed(t, out, "handlers"))
	if len(data) != 2 || modes["csi.wasm"] != 0o644 || !bytes.HasSuffix(data["dra.wasm"], []byte("dra.wasm")) {
		t.Errorf("handlers image holds %v", modes)
	}
}
