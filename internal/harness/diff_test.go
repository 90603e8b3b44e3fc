package harness

import (
	"context"
	"github.com/wasmhost/wasmhost/internal/host"
	"slices"
	"testing"

	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/session"
)

// TestDiffSameRevision: a session replayed against one revision twice changes nothing, and
// each side shows what the call did: its outcome, what register published and wrote.
func TestDiffSameRevision(t *testing.T) {
	ctx := context.Background()
	var revs [2]Revision
	for i := range revs {
		hs, err := New(ctx, host.Config{AllowInsecure: true})
		if err != nil {
			t.Fatal(err)
		}
		defer hs.Close(ctx)
		m, _, err := hs.Load(ctx, "../../conformance/testdata/handler.wasm")
		if err != nil {
			t.Fatal(err)
		}
		revs[i] = Revision{Harness: hs, Module: m}
	}
	p, err := registration.ValidateInfo("/r/p-reg.sock", registration.PluginInfo{Type: "conformance.example", Name: "p", Versions: []string{"v1"}})
	if err != nil {
		t.Fatal(err)
	}
	hs, m := revs[0].Harness, revs[0].Module
	s := NewSession(p, []Step{hs.Do(ctx, m, Register, p), hs.Do(ctx, m, Deregister, p)})
	d := Diff(ctx, revs[0], revs[1], s, "s.yaml")
	if d.Changed || len(d.Changes) > 0 {
		t.Errorf("one revision against itself changed: %q", d.Changes)
	}
	if d.Session != "s.yaml" || d.Type != "conformance.example" || d.Plugin != "p" || len(d.Old) != 2 || len(d.New) != 2 {
		t.Fatalf("diff %+v", d)
	}
	reg := d.Old[0]
	if reg.Op != Register || reg.Outcome != OK || reg.Published["k"] != "v" || len(reg.Writes) != 1 || len(reg.Departures) > 0 {
		t.Errorf("register's view %+v", reg)
	}
}

// TestCallChanges: each way a call can differ is one line, prefixed with the call.
func TestCallChanges(t *testing.T) {
	base := CallView{Op: Register, Outcome: OK, Published: map[string]string{"a": "1", "b": "2"},
		PluginCalls: []string{`/x.Y/Z ""`}, Writes: []string{`"k" = "1"`}}
	for name, tc := range map[string]struct {
		change func(v *CallView)
		want   string
	}{
		"outcome":    {func(v *CallView) { v.Outcome = Rejected }, "register: ok → rejected"},
		"reason":     {func(v *CallView) { v.Reason = "why" }, `register: reason "" → "why"`},
		"value":      {func(v *CallView) { v.Published = map[string]string{"a": "9", "b": "2"} }, `register: published a: "1" → "9"`},
		"gone":       {func(v *CallView) { v.Published = map[string]string{"a": "1"} }, `register: published b: "2" → (not published)`},
		"new":        {func(v *CallView) { v.Published = map[string]string{"a": "1", "b": "2", "c": "3"} }, `register: published c: (not published) → "3"`},
		"calls":      {func(v *CallView) { v.PluginCalls = nil }, `register: plugin calls [/x.Y/Z ""] → (none)`},
		"writes":     {func(v *CallView) { v.Writes = append(v.Writes, `delete "j"`) }, `register: store writes ["k" = "1"] → ["k" = "1", delete "j"]`},
		"departures": {func(v *CallView) { v.Departures = []string{"other"} }, ""},
	} {
		b := base
		tc.change(&b)
		got := CallChanges(base, b)
		if tc.want == "" {
			if len(got) > 0 {
				t.Errorf("%s: %q, want none (departures are shown, not compared)", name, got)
			}
			continue
		}
		if !slices.Equal(got, []string{tc.want}) {
			t.Errorf("%s: %q, want [%q]", name, got, tc.want)
		}
	}
	if got := CallChanges(base, base); len(got) > 0 {
		t.Errorf("a call against itself: %q", got)
	}
}

// TestCallViewFromRecord: a call's plugin calls and store writes are read from its recording.
func TestCallViewFromRecord(t *testing.T) {
	rs := ReplayStep{Step: Step{Op: Deregister, Outcome: OK, Record: &session.Call{Exchanges: []session.Exchange{
		{Fn: session.PluginCall, Method: "/a.B/C", Request: session.Bytes("q"), Error: "down", Code: -1},
		{Fn: session.KVGet, Key: "k"},
		{Fn: session.KVSet, Key: "k", Value: session.Bytes("v")},
		{Fn: session.KVSet, Key: "j", Delete: true},
		{Fn: session.KVCAS, Key: "x", Value: session.Bytes("y"), Code: 1},
		{Fn: session.KVDelete, Key: "z"},
	}}}}
	v := NewCallView(rs)
	if want := []string{`/a.B/C "q" (failed: down)`}; !slices.Equal(v.PluginCalls, want) {
		t.Errorf("plugin calls %q, want %q", v.PluginCalls, want)
	}
	if want := []string{`"k" = "v"`, `delete "j"`, `delete "z"`}; !slices.Equal(v.Writes, want) {
		t.Errorf("writes %q, want %q (a failed compare-and-swap wrote nothing)", v.Writes, want)
	}
}
