package guest

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/wasmhost/wasmhost/abi"
)

type funcHandler struct {
	validate, register, deregister func(Plugin) error
}

func (h funcHandler) Validate(p Plugin) error   { return h.validate(p) }
func (h funcHandler) Register(p Plugin) error   { return h.register(p) }
func (h funcHandler) Deregister(p Plugin) error { return h.deregister(p) }

// withHandler installs h as the module's handler for one test.
func withHandler(t *testing.T, m Manifest, h Handler) {
	t.Helper()
	h0, m0, err0 := handler, manifest, manifestErr
	t.Cleanup(func() { handler, manifest, manifestErr = h0, m0, err0 })
	handler = nil
	Handle(m, h)
}

func TestHandleAndManifest(t *testing.T) {
	ok := funcHandler{}
	for _, tc := range []struct {
		name   string
		setup  func()
		status int32
		want   string // the decoded plugin type, or a piece of the reason
	}{
		{"not called", func() { handler, manifestErr = nil, errors.New("guest: Handle was not called") }, abi.StatusError, "not called"},
		{"ok", func() { Handle(Manifest{PluginTypes: []string{"t"}}, ok) }, abi.StatusOK, "t"},
		{"no type", func() { Handle(Manifest{}, ok) }, abi.StatusError, "no plugin type"},
		{"nil handler", func() { Handle(Manifest{PluginTypes: []string{"t"}}, nil) }, abi.StatusError, "nil Handler"},
		{"twice", func() {
			Handle(Manifest{PluginTypes: []string{"t"}}, ok)
			Handle(Manifest{PluginTypes: []string{"u"}}, ok)
		}, abi.StatusError, "more than once"},
		{"too large", func() { Handle(Manifest{PluginTypes: []string{strings.Repeat("x", abi.MaxResultBytes)}}, ok) }, abi.StatusError, "MaxResultBytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			withHandler(t, Manifest{}, nil)
			tc.setup()
			status, b := encodeManifest()
			if status != tc.status {
				t.Fatalf("status %d (%s), want %d", status, b, tc.status)
			}
			if status == abi.StatusOK {
				m, err := abi.DecodeManifest(b)
				if err != nil || len(m.PluginTypes) != 1 || m.PluginTypes[0] != tc.want {
					t.Errorf("manifest %+v, %v; want type %q", m, err, tc.want)
				}
			} else if !strings.Contains(string(b), tc.want) {
				t.Errorf("reason %q does not say %q", b, tc.want)
			}
		})
	}
}

func TestDispatch(t *testing.T) {
	var seen []string
	h := funcHandler{
		validate: func(p Plugin) error {
			seen = append(seen, "validate "+p.Name)
			switch p.Name {
			case "reject":
				return Reject("no v1")
			case "wrapped":
				return errors.Join(errors.New("while checking"), Reject(""))
			case "fail":
				return errors.New("disk full")
			case "panic-string":
				panic("boom")
			case "panic-error":
				panic(errors.New("bad"))
			case "panic-other":
				panic(42)
			case "long":
				return errors.New(strings.Repeat("é", abi.MaxResultBytes))
			}
			return nil
		},
		register:   func(p Plugin) error { seen = append(seen, "register "+p.Name); return nil },
		deregister: func(p Plugin) error { seen = append(seen, "deregister "+p.Name); return nil },
	}
	withHandler(t, Manifest{PluginTypes: []string{"t"}}, h)
	req := func(name string) []byte {
		return abi.AppendPluginRequest(nil, Plugin{Name: name, Versions: []string{"v1"}})
	}
	for _, tc := range []struct {
		op     op
		req    []byte
		status int32
		reason string
	}{
		{opValidate, req("ok"), abi.StatusOK, ""},
		{opRegister, req("ok"), abi.StatusOK, ""},
		{opDeregister, req("ok"), abi.StatusOK, ""},
		{opValidate, req("reject"), abi.StatusRejected, "no v1"},
		{opValidate, req("wrapped"), abi.StatusRejected, "while checking\nrejected"},
		{opValidate, req("fail"), abi.StatusError, "disk full"},
		{opValidate, req("panic-string"), abi.StatusError, "guest: handler panicked: boom"},
		{opValidate, req("panic-error"), abi.StatusError, "guest: handler panicked: bad"},
		{opValidate, req("panic-other"), abi.StatusError, "guest: handler panicked: a value that is neither a string nor an error"},
		{opValidate, []byte{0x0a, 0x05}, abi.StatusError, "guest: decoding the request: abi: malformed message: field 1: truncated"},
	} {
		status, reason := dispatch(tc.op, tc.req)
		if status != tc.status || reason != tc.reason {
			t.Errorf("dispatch(%d, %x) = %d %q, want %d %q", tc.op, tc.req, status, reason, tc.status, tc.reason)
		}
	}
	if want := "validate ok,register ok,deregister ok"; !strings.HasPrefix(strings.Join(seen, ","), want) {
		t.Errorf("calls %q, want them to start with %q", seen, want)
	}
	status, reason := dispatch(opValidate, req("long"))
	if status != abi.StatusError || len(reason) > abi.MaxResultBytes || len(reason) < abi.MaxResultBytes-1 || !utf8.ValidString(reason) {
		t.Errorf("a long reason: status %d, %d bytes, valid UTF-8 %v; want StatusError, cut to about %d bytes on a rune boundary",
			status, len(reason), utf8.ValidString(reason), abi.MaxResultBytes)
	}
}

func TestDispatchWithoutHandle(t *testing.T) {
	withHandler(t, Manifest{}, nil)
	status, reason := dispatch(opValidate, nil)
	if status != abi.StatusError || !strings.Contains(reason, "nil Handler") {
		t.Errorf("dispatch without a valid Handle = %d %q", status, reason)
	}
}

func TestCodeError(t *testing.T) {
	for code, want := range map[int32]error{
		abi.StatusOK: nil, 7: nil, abi.CodeTooLarge: ErrTooLarge, abi.CodeDenied: ErrDenied,
		abi.CodeFailed: ErrFailed, abi.CodeBadRequest: ErrBadRequest, -99: ErrUnknownCode,
	} {
		if got := CodeError(code); got != want {
			t.Errorf("CodeError(%d) = %v, want %v", code, got, want)
		}
	}
}

func TestQuote(t *testing.T) {
	for in, want := range map[string]string{
		"1.0.0":        `"1.0.0"`,
		"":             `""`,
		`a"b\c`:        `"a\"b\\c"`,
		"v1\n\x00\x7f": `"v1\x0a\x00\x7f"`,
		"élan":         `"élan"`,
	} {
		if got := Quote(in); got != want {
			t.Errorf("Quote(%q) = %s, want %s", in, got, want)
		}
	}
	if got := QuoteList([]string{"1.0.0", "v1beta1"}); got != `["1.0.0", "v1beta1"]` {
		t.Errorf("QuoteList = %s", got)
	}
	if got := QuoteList(nil); got != `[]` {
		t.Errorf("QuoteList(nil) = %s", got)
	}
}
