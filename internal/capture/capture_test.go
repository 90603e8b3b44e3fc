package capture

import (
	"slices"
	"testing"

	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/session"
)

func call(export string) session.Call {
	return session.Call{Export: export, Result: session.Result{Status: session.StatusOK}}
}

func TestRing(t *testing.T) {
	red, _ := session.NewRedactor([]string{"hunter2"})
	r := New(Config{Sessions: 2, OptOut: map[string]bool{"Secret": true}, Redactor: red, Node: "n1"})
	h := session.Handler{File: "csi.wasm", SHA256: "ab"}
	p := func(name string) registration.PluginInfo {
		return registration.PluginInfo{Socket: "/s/" + name + ".sock", Type: "CSIPlugin", Name: name}
	}
	if r.Records("Secret") || !r.Records("CSIPlugin") {
		t.Fatal("Records ignores the opt-out")
	}
	r.Record(p("a"), h, call(session.Validate))
	r.Record(p("a"), h, call(session.Register))
	// A new registration of a starts its session afresh.
	r.Record(p("a"), h, call(session.Validate))
	c := call(session.Register)
	c.Exchanges = []session.Exchange{{Fn: session.PluginCall, Method: "/m", Response: session.Bytes("pw hunter2")}}
	r.Record(p("a"), h, c)
	got, missing := r.Sessions([]string{"a", "nobody"})
	if len(got) != 1 || !slices.Equal(missing, []string{"nobody"}) {
		t.Fatalf("Sessions(a, nobody) = %d sessions, missing %v", len(got), missing)
	}
	s := got[0]
	if len(s.Calls) != 2 || s.Calls[0].Export != "validate" || s.Node != "n1" || s.Handler != h {
		t.Errorf("session %+v", s)
	}
	if resp := string(s.Calls[1].Exchanges[0].Response); resp != "pw *******" || s.Redacted != 1 {
		t.Errorf("response kept as %q, %d redacted", resp, s.Redacted)
	}
	// Two plugins per type: a third drops the oldest.
	r.Record(p("b"), h, call(session.Validate))
	r.Record(p("c"), h, call(session.Validate))
	all, _ := r.Sessions(nil)
	var names []string
	for _, s := range all {
		names = append(names, s.Plugin.Name)
	}
	if !slices.Equal(names, []string{"b", "c"}) {
		t.Errorf("kept %v, want b and c", names)
	}
	if s, _ := r.Sessions([]string{"CSIPlugin"}); len(s) != 2 {
		t.Errorf("by type: %d sessions", len(s))
	}
	// Registers without a validate between them: a session keeps at most MaxCalls.
	for range 3 * MaxCalls {
		r.Record(p("c"), h, call(session.Register))
	}
	if s, _ := r.Sessions([]string{"c"}); len(s) != 1 || len(s[0].Calls) > MaxCalls {
		t.Errorf("after many registers: %d calls kept", len(s[0].Calls))
	}
}

func TestOff(t *testing.T) {
	r := New(Config{})
	if r.Records("CSIPlugin") {
		t.Error("a ring of 0 sessions records")
	}
	var nilRing *Ring
	if nilRing.Records("CSIPlugin") {
		t.Error("a nil ring records")
	}
}

// bigCall is a call of n kv_get exchanges of a value of size bytes each.
func bigCall(export string, n, size int) session.Call {
	c := call(export)
	v := make(session.Bytes, size)
	for range n {
		c.Exchanges = append(c.Exchanges, session.Exchange{Fn: session.KVGet, Key: "v", Value: v, Code: int32(size)})
	}
	return c
}

// TestSessionBounds: the calls of one session hold at most MaxSessionBytes and
// MaxSessionExchanges; a call past them keeps its result and what fits, and the session says
// what was left out.
func TestSessionBounds(t *testing.T) {
	r := New(Config{Sessions: 16})
	p := registration.PluginInfo{Socket: "/s/a.sock", Type: "T", Name: "a"}
	// Three calls of 45 % of the bound each: the third does not fit beside the first two.
	n := MaxSessionBytes * 45 / 100 / (64 << 10)
	for _, e := range []string{session.Validate, session.Register, session.Register} {
		r.Record(p, session.Handler{}, bigCall(e, n, 64<<10))
	}
	s, _ := r.Sessions(nil)
	if len(s) != 1 || len(s[0].Calls) != 3 {
		t.Fatalf("%d sessions", len(s))
	}
	var size int64
	for _, c := range s[0].Calls {
		size += c.Size()
	}
	last := s[0].Calls[2]
	if size > MaxSessionBytes || r.Bytes() != size {
		t.Errorf("the session holds %d bytes, the ring says %d; the bound is %d", size, r.Bytes(), MaxSessionBytes)
	}
	if last.Truncated == nil || last.Truncated.Exchanges+len(last.Exchanges) != n || last.Result.Status != session.StatusOK {
		t.Errorf("the third call: %d exchanges kept, truncated %+v, result %+v", len(last.Exchanges), last.Truncated, last.Result)
	}
	if s[0].Truncated == nil || *s[0].Truncated != *last.Truncated || s[0].Calls[0].Truncated != nil {
		t.Errorf("session truncated %+v, want the third call's %+v", s[0].Truncated, last.Truncated)
	}
	if err := s[0].Replayable(); err == nil {
		t.Error("a truncated session is replayable")
	}
	// Many small exchanges: bounded in number.
	r.Record(p, session.Handler{}, bigCall(session.Validate, 3*MaxSessionExchanges, 1))
	s, _ = r.Sessions(nil)
	if n := len(s[0].Calls[0].Exchanges); n != MaxSessionExchanges || s[0].Truncated.Exchanges != 2*MaxSessionExchanges {
		t.Errorf("%d exchanges kept, %+v left out", n, s[0].Truncated)
	}
	// A validate starts afresh: the ring holds the new session only.
	r.Record(p, session.Handler{}, call(session.Validate))
	s, _ = r.Sessions(nil)
	if s[0].Truncated != nil || r.Bytes() != s[0].Calls[0].Size() {
		t.Errorf("after a fresh validate: truncated %+v, ring %d bytes", s[0].Truncated, r.Bytes())
	}
}

// TestRingBytes: every type's sessions together hold at most MaxBytes; past it the session
// added to longest ago goes first, whatever its type.
func TestRingBytes(t *testing.T) {
	r := New(Config{Sessions: 16})
	h := session.Handler{}
	r.Record(registration.PluginInfo{Socket: "/s/first.sock", Type: "Other", Name: "first"}, h, call(session.Validate))
	var want []string
	for i := range 3 * MaxBytes / MaxSessionBytes {
		typ := []string{"A", "B", "C"}[i%3]
		p := registration.PluginInfo{Socket: "/s/" + string(rune('a'+i)) + ".sock", Type: typ, Name: string(rune('a' + i))}
		r.Record(p, h, bigCall(session.Validate, MaxSessionBytes*95/100/(64<<10), 64<<10))
		want = append(want, p.Name)
		if r.Bytes() > MaxBytes {
			t.Fatalf("after %d sessions the ring holds %d bytes, over %d", i+1, r.Bytes(), MaxBytes)
		}
	}
	all, _ := r.Sessions(nil)
	var got []string
	var size int64
	for _, s := range all {
		got = append(got, s.Plugin.Name)
		for _, c := range s.Calls {
			size += c.Size()
		}
	}
	slices.Sort(got)
	want = want[len(want)-len(got):]
	if size != r.Bytes() || !slices.Equal(got, want) || len(got) < MaxBytes/MaxSessionBytes-1 {
		t.Errorf("kept %v (%d bytes, the ring says %d); want the newest %v", got, size, r.Bytes(), want)
	}
}
