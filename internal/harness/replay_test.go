package harness

import (
	"context"
	"github.com/wasmhost/wasmhost/internal/host"
	"slices"
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/session"
)

// TestRecordAndReplay records register and deregister of the conformance handler, replays
// them clean, then replays sessions changed the way another module would depart from them.
func TestRecordAndReplay(t *testing.T) {
	ctx := context.Background()
	hs, err := New(ctx, host.Config{AllowInsecure: true})
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Close(ctx)
	m, _, err := hs.Load(ctx, "../../conformance/testdata/handler.wasm")
	if err != nil {
		t.Fatal(err)
	}
	p, err := registration.ValidateInfo("/r/p-reg.sock", registration.PluginInfo{Type: "conformance.example", Name: "p", Versions: []string{"v1"}})
	if err != nil {
		t.Fatal(err)
	}
	steps := []Step{hs.Do(ctx, m, Register, p), hs.Do(ctx, m, Deregister, p)}
	s := NewSession(p, steps)
	if len(s.Calls) != 2 || s.Handler.SHA256 != m.SHA256() || s.Calls[0].Result.Published["k"] != "v" {
		t.Fatalf("recorded %+v", s)
	}
	reg := s.Calls[0]
	if len(reg.Exchanges) != 2 || reg.Exchanges[0].Fn != session.KVGet || reg.Exchanges[1].Fn != session.KVSet || string(reg.Exchanges[1].Value) != "1" {
		t.Errorf("register exchanged %+v", reg.Exchanges)
	}
	// The deregister saw the store the register left, and read it.
	if len(s.Calls[1].StoreBefore) != 1 || s.Calls[1].Exchanges[0].Fn != session.KVGet {
		t.Errorf("deregister recorded %+v", s.Calls[1])
	}
	// Through the file and back.
	b, err := session.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if s, err = session.Unmarshal(b); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []ReplayMode{ByRequest, InOrder} {
		for _, rs := range hs.Replay(ctx, m, s, mode) {
			if len(rs.Departures) > 0 || rs.Outcome != OK {
				t.Errorf("replay (%s) of %s: %s, departures %q", mode, rs.Op, rs.Outcome, rs.Departures)
			}
		}
	}

	changed := func(f func(s *session.Session)) []string {
		b, _ := session.Marshal(s)
		c, _ := session.Unmarshal(b)
		f(c)
		var d []string
		for _, rs := range hs.Replay(ctx, m, c, ByRequest) {
			d = append(d, rs.Departures...)
		}
		return d
	}
	for name, tc := range map[string]struct {
		change func(s *session.Session)
		want   string
	}{
		"published": {func(s *session.Session) { s.Calls[0].Result.Published["k"] = "w" }, `published k: "v", the session's "w"`},
		"result": {func(s *session.Session) {
			s.Calls[0].Result = session.Result{Status: session.StatusRejected, Reason: "no"}
		}, "result ok, the session's rejected"},
		"write": {func(s *session.Session) { s.Calls[0].Exchanges[1].Value = session.Bytes("x") }, "store writes"},
		"plugin call not made": {func(s *session.Session) {
			s.Calls[0].Exchanges = append(s.Calls[0].Exchanges, session.Exchange{Fn: session.PluginCall, Method: "/a.B/C"})
		}, "plugin_call /a.B/C: the session has it, the module did not make it"},
		// The deregister finds no record when the session's store is empty: no read of it is
		// departed from, but its delete is.
		"store": {func(s *session.Session) { s.Calls[1].StoreBefore = nil }, "store writes (none), the session's"},
	} {
		d := changed(tc.change)
		if !slices.ContainsFunc(d, func(s string) bool { return strings.Contains(s, tc.want) }) {
			t.Errorf("%s: departures %q, want one with %q", name, d, tc.want)
		}
	}
}

func TestReplayCaller(t *testing.T) {
	ctx := context.Background()
	x := func(method, req, resp string) session.Exchange {
		return session.Exchange{Fn: session.PluginCall, Method: method, Request: session.Bytes(req), Response: session.Bytes(resp), Code: int32(len(resp))}
	}
	recorded := []session.Exchange{x("/a", "1", "one"), x("/a", "2", "two"), x("/b", "", "bee"),
		{Fn: session.PluginCall, Method: "/c", Code: -7, Error: "rpc error: code = Unavailable"}}
	newCaller := func(mode ReplayMode) *replayCaller {
		return &replayCaller{mode: mode, recorded: recorded, used: make([]bool, len(recorded))}
	}
	// By request: out of order is fine, the answer follows the request.
	r := newCaller(ByRequest)
	if b, err := r.Call(ctx, "", "/a", []byte("2"), 100); string(b) != "two" || err != nil {
		t.Errorf("/a 2: %q %v", b, err)
	}
	if b, err := r.Call(ctx, "", "/a", []byte("1"), 100); string(b) != "one" || err != nil {
		t.Errorf("/a 1: %q %v", b, err)
	}
	if _, err := r.Call(ctx, "", "/c", nil, 100); err == nil || !strings.Contains(err.Error(), "Unavailable") {
		t.Errorf("/c: the recorded failure is not replayed: %v", err)
	}
	if _, err := r.Call(ctx, "", "/z", nil, 100); err == nil || len(r.departures) != 1 || !strings.Contains(r.departures[0], "no such call") {
		t.Errorf("/z: %v, departures %q", err, r.departures)
	}
	// In order: the second call must be the session's second.
	r = newCaller(InOrder)
	if b, _ := r.Call(ctx, "", "/a", []byte("1"), 100); string(b) != "one" {
		t.Errorf("in order, first: %q", b)
	}
	if _, err := r.Call(ctx, "", "/b", nil, 100); err == nil || !strings.Contains(r.departures[0], "the session's next call is /a") {
		t.Errorf("in order, out of order: %v, departures %q", err, r.departures)
	}
	r = newCaller(InOrder)
	r.Call(ctx, "", "/a", []byte("9"), 100)
	if len(r.departures) != 1 || !strings.Contains(r.departures[0], `request "9", the session's "1"`) {
		t.Errorf("in order, another request: departures %q", r.departures)
	}
}
