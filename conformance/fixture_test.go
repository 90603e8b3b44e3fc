package conformance

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestHandlerFixture(t *testing.T) {
	f, err := ParseFixture("f.yaml", []byte(`
# NodeGetInfoResponse{node_id: "node-1"}
/csi.v1.Node/NodeGetInfo:
  response: CgZub2RlLTE=
/csi.v1.Node/NodeGetCapabilities:
  error: {code: UNAVAILABLE, message: driver not ready}
/x.Y/Empty:
  response: ""
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.Methods(), " "); got != "/csi.v1.Node/NodeGetCapabilities /csi.v1.Node/NodeGetInfo /x.Y/Empty" {
		t.Errorf("methods %s", got)
	}
	ctx := context.Background()
	if b, err := f.Call(ctx, "/e", "/csi.v1.Node/NodeGetInfo", nil, 100); err != nil || string(b) != "\x0a\x06node-1" {
		t.Errorf("NodeGetInfo: %q, %v", b, err)
	}
	if b, err := f.Call(ctx, "/e", "/x.Y/Empty", nil, 100); err != nil || len(b) != 0 {
		t.Errorf("Empty: %q, %v", b, err)
	}
	if _, err := f.Call(ctx, "/e", "/csi.v1.Node/NodeGetInfo", nil, 3); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("over maxResp: %v", err)
	}
	_, err = f.Call(ctx, "/e", "/csi.v1.Node/NodeGetCapabilities", nil, 100)
	if status.Code(err) != codes.Unavailable || err.Error() != "rpc error: code = Unavailable desc = driver not ready" {
		t.Errorf("error answer: %v", err)
	}
	if _, err := f.Call(ctx, "/e", "/a.B/C", nil, 100); status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "not in the fixture f.yaml") {
		t.Errorf("unknown method: %v", err)
	}
	// JSON is YAML too.
	if _, err := ParseFixture("f.json", []byte(`{"/a.B/C": {"error": {"code": "NotFound", "message": "no"}}}`)); err != nil {
		t.Errorf("JSON: %v", err)
	}

	for name, tc := range map[string]struct{ in, want string }{
		"not a method":  {"NodeGetInfo:\n  response: ''\n", `"NodeGetInfo" is not a full gRPC method name`},
		"neither":       {"/a.B/C: {}\n", "give either response"},
		"both":          {"/a.B/C: {response: '', error: {code: Internal}}\n", "give either response"},
		"not base64":    {"/a.B/C: {response: '!!'}\n", "not base64"},
		"unknown code":  {"/a.B/C: {error: {code: Sad}}\n", `error code "Sad"`},
		"ok code":       {"/a.B/C: {error: {code: OK}}\n", "OK is not an error"},
		"unknown field": {"/a.B/C: {resp: ''}\n", "field resp not found"},
		"not a map":     {"- a\n", "cannot unmarshal"},
	} {
		_, err := ParseFixture("bad.yaml", []byte(tc.in))
		if !errors.Is(err, ErrBadFixture) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "bad.yaml") {
			t.Errorf("%s: %v, want ErrBadFixture saying %q", name, err, tc.want)
		}
	}
}
