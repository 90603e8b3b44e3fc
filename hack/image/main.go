// Command image builds wasmhost's container images into an OCI image layout directory, with no
// container engine and no registry: `make image` (the daemon) and `make handlers-image` (the
// shipped handlers, for a Kubernetes image volume) run it.
//
// The daemon's image is one layer: the static binary (CGO_ENABLED=0) at
// /usr/local/bin/wasmhost, the CA certificates of the build machine (so that handlers.sources
// reaches registries over TLS), /etc/passwd and /etc/group naming root and nonroot (65532),
// and the directories the daemon uses. It runs as 65532 by default; the DaemonSet runs it as
// root with every capability dropped, since plugin sockets are root's (see
// examples/kubernetes/daemonset.yaml).
//
// The handlers' image holds the .wasm files at its root and nothing else: mounted as an image
// volume, it is a handler directory.
//
// Push a layout with any OCI tool, e.g. `crane push bin/image registry.example.com/wasmhost:dev`
// or `skopeo copy oci:bin/image:dev docker://registry.example.com/wasmhost:dev`. The image's
// descriptor in the layout names its platform (linux and --arch).
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// options say what to build.
type options struct {
	Out      string   // the OCI layout directory (made, or appended to)
	Tag      string   // org.opencontainers.image.ref.name of the image in the layout
	Binary   string   // the daemon's static binary: builds the daemon's image
	Name     string   // the binary's name in /usr/local/bin; defaults to wasmhost
	Handlers []string // .wasm files: builds a handlers image
	CACerts  string   // a CA bundle to include in the daemon's image ("" or missing: none)
	Arch     string   // the image's architecture
	Version  string   // org.opencontainers.image.version
	Created  time.Time
}

const nonRoot = "65532:65532"

func main() {
	var o options
	var handlers string
	flag.StringVar(&o.Out, "out", "bin/image", "OCI image layout directory to write")
	flag.StringVar(&o.Tag, "tag", "dev", "the image's name in the layout (org.opencontainers.image.ref.name)")
	flag.StringVar(&o.Binary, "binary", "", "the static wasmhost binary (linux, CGO_ENABLED=0): build the daemon's image")
	flag.StringVar(&o.Name, "name", "wasmhost", "the binary's name in /usr/local/bin (another program, e.g. the example plugin, in the same kind of image)")
	flag.StringVar(&handlers, "handlers", "", "comma-separated .wasm files: build a handlers image for an image volume")
	flag.StringVar(&o.CACerts, "ca-certs", "/etc/ssl/certs/ca-certificates.crt", "CA bundle for the daemon's image")
	flag.StringVar(&o.Arch, "arch", runtime.GOARCH, "the image's architecture (the binary's GOARCH)")
	flag.StringVar(&o.Version, "version", "dev", "the image's version label")
	flag.Parse()
	if handlers != "" {
		o.Handlers = strings.Split(handlers, ",")
	}
	o.Created = time.Unix(0, 0).UTC()
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		var sec int64
		if _, err := fmt.Sscan(s, &sec); err == nil {
			o.Created = time.Unix(sec, 0).UTC()
		}
	}
	if err := build(o); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	fmt.Printf("wrote %s (image %q) to the OCI layout %s\n", map[bool]string{true: "the handlers image", false: "the daemon's image"}[o.Binary == ""], o.Tag, o.Out)
}

// entry is one file or directory of a layer.
type entry struct {
	name string
	mode int64
	dir  bool
	data []byte
}

func build(o options) error {
	if (o.Binary == "") == (len(o.Handlers) == 0) {
		return errors.New("give --binary (the daemon's image) or --handlers (a handlers image)")
	}
	var entries []entry
	cfg := v1.Config{
		Labels: map[string]string{
			"org.opencontainers.image.title":   "wasmhost",
			"org.opencontainers.image.version": o.Version,
			"org.opencontainers.image.source":  "https://github.com/wasmhost/wasmhost",
		},
	}
	if o.Binary != "" {
		bin, err := os.ReadFile(o.Binary)
		if err != nil {
			return err
		}
		if o.Name == "" {
			o.Name = "wasmhost"
		}
		binaryPath := "/usr/local/bin/" + o.Name
		if !bytes.HasPrefix(bin, []byte("\x7fELF")) {
			return fmt.Errorf("%s is not a Linux (ELF) binary: build it with GOOS=linux CGO_ENABLED=0", o.Binary)
		}
		entries = append(entries,
			entry{name: "etc", dir: true, mode: 0o755},
			entry{name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
			entry{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnonroot:x:65532:\n")},
			entry{name: "etc/wasmhost", dir: true, mode: 0o755},
			entry{name: "etc/wasmhost/handlers", dir: true, mode: 0o755},
			entry{name: "home", dir: true, mode: 0o755},
			entry{name: "home/nonroot", dir: true, mode: 0o700},
			entry{name: "tmp", dir: true, mode: 0o1777},
			entry{name: "usr", dir: true, mode: 0o755},
			entry{name: "usr/local", dir: true, mode: 0o755},
			entry{name: "usr/local/bin", dir: true, mode: 0o755},
			entry{name: strings.TrimPrefix(binaryPath, "/"), mode: 0o755, data: bin},
			entry{name: "var", dir: true, mode: 0o755},
			entry{name: "var/lib", dir: true, mode: 0o755},
			entry{name: "var/lib/wasmhost", dir: true, mode: 0o755},
		)
		if o.CACerts != "" {
			if ca, err := os.ReadFile(o.CACerts); err == nil {
				entries = append(entries,
					entry{name: "etc/ssl", dir: true, mode: 0o755},
					entry{name: "etc/ssl/certs", dir: true, mode: 0o755},
					entry{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: ca})
			} else if !errors.Is(err, os.ErrNotExist) {
				return err
			} else {
				fmt.Fprintf(os.Stderr, "image: %s not found: the image has no CA certificates (handlers.sources over TLS will fail)\n", o.CACerts)
			}
		}
		cfg.Entrypoint = []string{binaryPath}
		if o.Name == "wasmhost" {
			cfg.Cmd = []string{"run"}
		}
		cfg.User = nonRoot
		cfg.WorkingDir = "/"
		cfg.Env = []string{"PATH=/usr/local/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}
		cfg.Labels["org.opencontainers.image.description"] = "wasmhost: registers node plugins through sandboxed WebAssembly handlers"
	} else {
		for _, f := range o.Handlers {
			b, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			if !bytes.HasPrefix(b, []byte("\x00asm")) {
				return fmt.Errorf("%s is not a WebAssembly module", f)
			}
			entries = append(entries, entry{name: filepath.Base(f), mode: 0o644, data: b})
		}
		cfg.Labels["org.opencontainers.image.title"] = "wasmhost handlers"
		cfg.Labels["org.opencontainers.image.description"] = "wasmhost handler modules, to mount as an image volume at the handler directory"
	}
	tarBytes, err := tarOf(entries, o.Created)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(tarBytes)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return err
	}
	img, err := mutate.Append(mutate.MediaType(empty.Image, types.OCIManifestSchema1), mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: o.Created}, CreatedBy: "hack/image", Comment: "wasmhost",
	}})
	if err != nil {
		return err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.Config = cfg
	cf.OS, cf.Architecture = "linux", o.Arch
	cf.Created = v1.Time{Time: o.Created}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	p, err := layout.FromPath(o.Out)
	if err != nil {
		if p, err = layout.Write(o.Out, empty.Index); err != nil {
			return err
		}
	}
	_ = p.RemoveDescriptors(matchRefName(o.Tag))
	return p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": o.Tag}),
		layout.WithPlatform(v1.Platform{OS: "linux", Architecture: o.Arch}))
}

// matchRefName matches the descriptors of the layout's index named tag.
func matchRefName(tag string) func(v1.Descriptor) bool {
	return func(d v1.Descriptor) bool { return d.Annotations["org.opencontainers.image.ref.name"] == tag }
}

// tarOf writes entries as a tar archive, owned by root, with one modification time.
func tarOf(entries []entry, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: path.Clean(e.name), Mode: e.mode, ModTime: mtime, Format: tar.FormatPAX, Uname: "root", Gname: "root"}
		if e.dir {
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if !e.dir {
			if _, err := tw.Write(e.data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
