package oci

// Bounds on what a registry may make the daemon hold: a manifest, an index or a referrers
// list is read only up to MaxManifestBytes (refused before it is parsed), and every error
// text this package returns or keeps is cut to MaxErrorText bytes, so that a hostile
// registry cannot fill the memory, the log or the status with one answer.

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/wasmhost/wasmhost/internal/safetext"
)

const (
	// MaxManifestBytes bounds a manifest, an image index and a referrers list: 4 MiB, the
	// limit the distribution registries put on what they accept, so no registry serves a
	// larger one that a client made in good faith.
	MaxManifestBytes = 4 << 20
	// MaxErrorText bounds the text of an error this package returns, and of the last error a
	// source keeps.
	MaxErrorText = 2048
	// maxListed bounds how many items (layer media types, signature problems) one message
	// lists.
	maxListed = 8
)

// ErrIntegrity: the registry served bytes that do not match the digest they were asked by
// (a manifest, a layer, a signature's payload). It is a refusal, not an outage: retrying the
// same registry is not expected to help.
var ErrIntegrity = errors.New("oci: the registry served content that does not match its digest")

// BoundText cuts s to at most n bytes (on a rune boundary) and says how much was cut: the
// daemon's one way of cutting untrusted text (safetext.Cut).
func BoundText(s string, n int) string { return safetext.Cut(s, n) }

// boundedError is an error whose text was cut; errors.Is and errors.As still see the
// original.
type boundedError struct {
	msg string
	err error
}

func (e *boundedError) Error() string { return e.msg }
func (e *boundedError) Unwrap() error { return e.err }

// BoundError returns err with its text cut to MaxErrorText bytes (err itself when it is
// short enough).
func BoundError(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if len(msg) <= MaxErrorText {
		return err
	}
	return &boundedError{msg: BoundText(msg, MaxErrorText), err: err}
}

// listed joins at most maxListed items and says how many more there were.
func listed(items []string) string {
	if len(items) <= maxListed {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:maxListed], ", "), len(items)-maxListed)
}

// boundManifests refuses a manifest, index or referrers answer over MaxManifestBytes: by its
// Content-Length before it is read, and by counting while it is read when it has none.
type boundManifests struct{ next http.RoundTripper }

func (t boundManifests) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil || req.Method != http.MethodGet || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	p := req.URL.Path
	if !strings.Contains(p, "/manifests/") && !strings.Contains(p, "/referrers/") {
		return resp, nil
	}
	if resp.ContentLength > MaxManifestBytes {
		resp.Body.Close()
		return nil, fmt.Errorf("%w: %s: a manifest of %d bytes, over the limit of %d bytes", ErrBadArtifact, req.URL.Redacted(), resp.ContentLength, MaxManifestBytes)
	}
	resp.Body = &limitedBody{rc: resp.Body, left: MaxManifestBytes, url: req.URL.Redacted()}
	return resp, nil
}

// limitedBody fails the read that goes past its limit.
type limitedBody struct {
	rc   io.ReadCloser
	left int64
	url  string
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, b.tooLarge()
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return 0, b.tooLarge()
	}
	return n, err
}

func (b *limitedBody) tooLarge() error {
	return fmt.Errorf("%w: %s: a manifest over the limit of %d bytes", ErrBadArtifact, b.url, MaxManifestBytes)
}

func (b *limitedBody) Close() error { return b.rc.Close() }
