package session

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

func sample() *Session {
	return &Session{
		CapturedAt: time.Date(2026, 11, 25, 15, 0, 0, 0, time.UTC),
		Source:     "daemon",
		Plugin:     Plugin{Socket: "/run/p/csi.sock", Type: "CSIPlugin", Name: "csi.example.com", Versions: []string{"1.5.0"}},
		Calls: []Call{{
			Export:      Register,
			StoreBefore: map[string]Bytes{"driver/x": Bytes("text value")},
			Exchanges: []Exchange{
				{Fn: PluginCall, Method: "/csi.v1.Node/NodeGetInfo", Response: Bytes{0x0a, 0x06, 'n', 'o', 'd', 'e', '-', '1', 0x10, 0x00}, Code: 10},
				{Fn: KVGet, Key: "driver/x", Value: Bytes("text value"), Code: 10},
			},
			Result: Result{Status: StatusOK, Published: map[string]string{"node_id": "node-1"}},
		}},
	}
}

func TestRoundTrip(t *testing.T) {
	b, err := Marshal(sample())
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	for _, want := range []string{"apiVersion: wasmhost.dev/session/v1", "kind: Session", "response: !!binary CgZub2RlLTEQAA==", "value: text value"} {
		if !strings.Contains(text, want) {
			t.Errorf("YAML lacks %q:\n%s", want, text)
		}
	}
	s, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	x := s.Calls[0].Exchanges[0]
	if !bytes.Equal(x.Response, sample().Calls[0].Exchanges[0].Response) || string(s.Calls[0].StoreBefore["driver/x"]) != "text value" {
		t.Errorf("read back %+v", s.Calls[0])
	}
}

func TestUnmarshalErrors(t *testing.T) {
	good, _ := Marshal(sample())
	for name, tc := range map[string]struct{ in, want string }{
		"header":      {strings.Replace(string(good), "session/v1", "session/v9", 1), "want apiVersion wasmhost.dev/session/v1"},
		"unknown key": {string(good) + "extra: 1\n", "field extra not found"},
		"export":      {strings.Replace(string(good), "export: register", "export: install", 1), "calls[0].export"},
		"fn":          {strings.Replace(string(good), "fn: kv_get", "fn: kv_list", 1), `unknown host function "kv_list"`},
		"binary":      {strings.Replace(string(good), "CgZub2RlLTEQAA==", "abc!", 1), "!!binary"},
		"empty":       {"", "empty session"},
	} {
		_, err := Unmarshal([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one with %q", name, err, tc.want)
		}
	}
}

func TestRedact(t *testing.T) {
	r, err := NewRedactor(append(DefaultRedactRules, `secret-[0-9]+`))
	if err != nil {
		t.Fatal(err)
	}
	s := sample()
	jwt := "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJub2RlIn0.c2lnbmF0dXJl"
	s.Calls[0].Exchanges[0].Response = Bytes("\x0a\x20token " + jwt + " ok")
	s.Calls[0].StoreBefore["k"] = Bytes("has secret-42 in it")
	s.Calls[0].Result.Published["token"] = "Bearer abcdefghijkl"
	r.Redact(s)
	resp := string(s.Calls[0].Exchanges[0].Response)
	if strings.Contains(resp, "eyJ") || len(resp) != len("\x0a\x20token "+jwt+" ok") || !strings.HasSuffix(resp, " ok") {
		t.Errorf("response redacted to %q", resp)
	}
	if got := string(s.Calls[0].StoreBefore["k"]); got != "has ********* in it" {
		t.Errorf("store value redacted to %q", got)
	}
	if got := s.Calls[0].Result.Published["token"]; strings.Contains(got, "abcdefghijkl") {
		t.Errorf("published value redacted to %q", got)
	}
	if s.Redacted != 3 {
		t.Errorf("Redacted = %d, want 3", s.Redacted)
	}
	if _, err := NewRedactor([]string{"("}); err == nil || !strings.Contains(err.Error(), `redaction rule "("`) {
		t.Errorf("bad rule: %v", err)
	}
}

// TestTruncatedRoundTrip: a truncated call and session read back as written, a replay refuses
// them naming the call, and negative counts are refused.
func TestTruncatedRoundTrip(t *testing.T) {
	s := sample()
	s.Calls[0].Truncated = &Truncated{Exchanges: 3, Bytes: 180_000}
	s.Truncated = s.Truncated.Add(3, 180_000)
	if err := sample().Replayable(); err != nil {
		t.Errorf("a complete session: %v", err)
	}
	b, err := Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "truncated:\n      exchanges: 3\n      bytes: 180000") {
		t.Errorf("YAML lacks the call's truncated:\n%s", b)
	}
	got, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	err = got.Replayable()
	if !errors.Is(err, ErrTruncated) || !strings.Contains(err.Error(), "calls[0] (register)") || !strings.Contains(err.Error(), "3 host calls (180000 bytes)") {
		t.Errorf("Replayable: %v", err)
	}
	bad := strings.Replace(string(b), "exchanges: 3", "exchanges: -3", 1)
	if _, err := Unmarshal([]byte(bad)); err == nil || !strings.Contains(err.Error(), "truncated: counts must not be negative") {
		t.Errorf("negative counts: %v", err)
	}
}
