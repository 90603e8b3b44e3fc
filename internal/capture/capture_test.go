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
