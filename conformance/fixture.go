package conformance

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Fixture answers plugin_call from a file instead of a plugin, so that a handler that calls its
// plugin can be tested without one. It is a PluginCaller, for Options.Fixture.
//
// The file is YAML (or JSON, which is YAML too): a map from full gRPC method names to answers.
// An answer is either a response, the encoded response message in base64 (standard encoding,
// with padding; "" is an empty message), or an error, a gRPC status code name and a message:
//
//	# NodeGetInfoResponse{node_id: "node-1", max_volumes_per_node: 16}
//	/csi.v1.Node/NodeGetInfo:
//	  response: CgZub2RlLTEQEA==
//	/csi.v1.Node/NodeGetCapabilities:
//	  error: {code: Unavailable, message: driver not ready}
//
// A call of a method the file does not list fails with Unimplemented, as a server that does not
// have it would answer. One way to get the base64 of a message is protoc:
//
//	echo 'node_id: "node-1" max_volumes_per_node: 16' | protoc --encode=csi.v1.NodeGetInfoResponse csi.proto | base64 -w0
type Fixture struct {
	file    string
	answers map[string]answer
}

type answer struct {
	resp []byte
	err  error
}

// fixtureEntry is an answer as written in the file.
type fixtureEntry struct {
	Response *string `yaml:"response"`
	Error    *struct {
		Code    string `yaml:"code"`
		Message string `yaml:"message"`
	} `yaml:"error"`
}

// ErrBadFixture: a fixture file is not in the format Fixture documents.
var ErrBadFixture = errors.New("conformance: bad fixture")

// LoadFixture reads a fixture file.
func LoadFixture(path string) (*Fixture, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("conformance: fixture: %w", err)
	}
	return ParseFixture(path, b)
}

// ParseFixture parses the fixture b, read from file (named in errors).
func ParseFixture(file string, b []byte) (*Fixture, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %s: %s", ErrBadFixture, file, fmt.Sprintf(format, args...))
	}
	var raw map[string]fixtureEntry
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&raw); err != nil && !errors.Is(err, io.EOF) {
		return nil, bad("%v", err)
	}
	f := &Fixture{file: file, answers: make(map[string]answer, len(raw))}
	for _, method := range slices.Sorted(maps.Keys(raw)) {
		e := raw[method]
		if !strings.HasPrefix(method, "/") || strings.Count(method, "/") != 2 || strings.HasSuffix(method, "/") {
			return nil, bad("%q is not a full gRPC method name (/package.Service/Method)", method)
		}
		switch {
		case (e.Response == nil) == (e.Error == nil):
			return nil, bad("%s: give either response (base64) or error (code and message)", method)
		case e.Response != nil:
			resp, err := base64.StdEncoding.DecodeString(strings.TrimSpace(*e.Response))
			if err != nil {
				return nil, bad("%s: response is not base64: %v", method, err)
			}
			f.answers[method] = answer{resp: resp}
		default:
			code, ok := codeByName(e.Error.Code)
			if !ok {
				return nil, bad("%s: error code %q is not a gRPC status code name (Unavailable, NotFound, ...)", method, e.Error.Code)
			}
			if code == codes.OK {
				return nil, bad("%s: error code OK is not an error: give a response", method)
			}
			f.answers[method] = answer{err: status.Error(code, e.Error.Message)}
		}
	}
	return f, nil
}

// codeByName returns the gRPC code named s ("Unavailable", also "UNAVAILABLE"); "" is Unknown.
func codeByName(s string) (codes.Code, bool) {
	if s == "" {
		return codes.Unknown, true
	}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		name := c.String()
		if strings.EqualFold(s, name) || strings.EqualFold(strings.ReplaceAll(s, "_", ""), name) {
			return c, true
		}
	}
	return 0, false
}

// Methods returns the methods the fixture answers, sorted.
func (f *Fixture) Methods() []string {
	return slices.Sorted(maps.Keys(f.answers))
}

// Call implements PluginCaller: it answers method from the fixture, whatever the endpoint
// and the request.
func (f *Fixture) Call(_ context.Context, _, method string, _ []byte, maxResp int) ([]byte, error) {
	a, ok := f.answers[method]
	switch {
	case !ok:
		return nil, status.Errorf(codes.Unimplemented, "method %s is not in the fixture %s", method, f.file)
	case a.err != nil:
		return nil, a.err
	case len(a.resp) > maxResp:
		return nil, status.Errorf(codes.ResourceExhausted, "response of %d bytes over the limit of %d", len(a.resp), maxResp)
	}
	return slices.Clone(a.resp), nil
}
