package publish_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wasmhost/wasmhost/internal/publish"
	"github.com/wasmhost/wasmhost/internal/state"
)

type fakeRecorder struct {
	mu     sync.Mutex
	events []publish.Event
}

func (f *fakeRecorder) Record(e publish.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, e)
}

func (f *fakeRecorder) Stats() publish.EventStats { return publish.EventStats{} }

func (f *fakeRecorder) reasons() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, e := range f.events {
		out = append(out, e.Reason)
	}
	return out
}

// TestEvents: a refusal, a handler failure, a plugin lost, a quarantine and a rollback are
// one Event each; retries that change nothing, and what is there at start, are none.
func TestEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := state.New()
		// A pin that was there before the start is not news.
		s.SetHandlers([]state.Handler{{File: "/h/csi.wasm", PluginTypes: []string{"CSIPlugin"}, Serving: true,
			Pins: []state.Pin{{PluginType: "CSIPlugin", SHA256: "old", FileSHA256: "new"}}}})
		rec := &fakeRecorder{}
		_, stop := runPublisher(t, publish.Config{Store: s, Events: rec})
		defer stop()
		synctest.Wait()

		set := func(st state.PluginState, lastError string) {
			s.SetStatus(state.Status{Path: "/r/a.sock", State: st, PluginType: "CSIPlugin", PluginName: "a", LastError: lastError})
			synctest.Wait()
		}
		set(state.StateRejected, "rejected by handler: version 0.1 is too old")
		set(state.StatePending, "")
		set(state.StateRejected, "rejected by handler: version 0.1 is too old") // asked again, same answer
		set(state.StateFailing, "registration: handler failed: wasm trap: unreachable")
		set(state.StatePending, "")
		set(state.StateFailing, "registration: handler failed: wasm trap: unreachable")
		set(state.StateRegistered, "")
		const gone = "plugin gone: its server stopped answering and its socket file stays; registered again when something answers at /r/a.sock"
		// Lost: the first failure, then retries whose errors say how long ago the socket was
		// first seen and how many attempts were made: one loss, one Event, once LostGrace
		// has passed (at the next look, every 2 s).
		set(state.StateFailing, gone)
		for i := range 8 {
			set(state.StatePending, "")
			set(state.StateFailing, fmt.Sprintf("plugin gone (its server stopped; its socket file stays): registration: plugin unreachable: socket /r/a.sock: nobody is listening after %d attempt(s), socket first seen %s ago: connection refused", i+1, time.Duration(i+1)*1500*time.Millisecond))
			time.Sleep(time.Second)
		}
		// Registered again, then lost again: a second loss, the same note.
		set(state.StateRegistered, "")
		set(state.StateFailing, gone)
		set(state.StatePending, "")
		set(state.StateFailing, "plugin gone (its server stopped; its socket file stays): registration: plugin unreachable: socket /r/a.sock: nobody is listening after 1 attempt(s), socket first seen 12.5s ago: connection refused")
		time.Sleep(publish.LostGrace + 2*time.Second)
		synctest.Wait()
		// A clean exit: the server stops, then its socket goes, within LostGrace: no loss.
		// Nor is a plugin registered again within it.
		set(state.StateRegistered, "")
		set(state.StateFailing, gone)
		s.DeleteStatus("/r/a.sock", time.Now())
		synctest.Wait()
		set(state.StateRegistered, "")
		set(state.StateFailing, gone)
		time.Sleep(publish.LostGrace / 2)
		set(state.StateRegistered, "")
		time.Sleep(publish.LostGrace + 2*time.Second)
		synctest.Wait()
		s.SetHandlers([]state.Handler{{File: "/h/csi.wasm", PluginTypes: []string{"CSIPlugin"}, Serving: true,
			Pins: []state.Pin{{PluginType: "CSIPlugin", SHA256: "old", FileSHA256: "new"}, {PluginType: "CSIPlugin", SHA256: "older", FileSHA256: "new2", Auto: true, Reason: "6 of 6 calls trapped"}}}})
		s.SetHandlerCounters(func() map[string]state.HandlerCounters {
			return map[string]state.HandlerCounters{"/h/csi.wasm": {Quarantined: true, QuarantineReason: "3 traps in a row", QuarantinedUntil: time.Now().Add(10 * time.Second)}}
		})
		time.Sleep(3 * time.Second)
		synctest.Wait()

		want := []string{publish.ReasonPluginRejected, publish.ReasonHandlerFailed, publish.ReasonPluginLost, publish.ReasonPluginLost, publish.ReasonHandlerQuarantined, publish.ReasonHandlerRolledBack}
		got := rec.reasons()
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("events %v, want %v", got, want)
		}
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for _, e := range rec.events {
			if !e.Warning || e.Note == "" || e.Action == "" {
				t.Errorf("event %+v: want a warning with an action and a note", e)
			}
			if e.Reason == publish.ReasonPluginRejected && !strings.Contains(e.Note, "plugin a of type CSIPlugin at /r/a.sock refused by its handler: rejected by handler: version 0.1 is too old") {
				t.Errorf("note %q", e.Note)
			}
			if e.Reason == publish.ReasonPluginLost && e.Note != "plugin a of type CSIPlugin at /r/a.sock: its server stopped answering and its socket file stays; registered again when something answers there" {
				t.Errorf("PluginLost note %q", e.Note)
			}
			if e.Reason == publish.ReasonHandlerQuarantined && e.Note != "handler /h/csi.wasm (types CSIPlugin) quarantined: 3 traps in a row" {
				t.Errorf("HandlerQuarantined note %q", e.Note)
			}
		}
	})
}

// TestLeftOutEvents: what a build leaves out entirely is one PublishLeftOut Event per plugin,
// logged and recorded once however many builds see it again; a key refused as a label only
// (still an attribute) is none.
func TestLeftOutEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := state.New()
		register(s, "/r/long.sock", "CSIPlugin", "long", map[string]string{"node_id": strings.Repeat("n", 65300), "topology": strings.Repeat("t", 3000)})
		register(s, "/r/ok.sock", "CSIPlugin", "ok", map[string]string{"node_id": "n", "topology": "a/b"})
		rec := &fakeRecorder{}
		_, stop := runPublisher(t, publish.Config{Store: s, Rules: csiRules, Sinks: []publish.Sink{&fakeSink{}}, Events: rec})
		defer stop()
		time.Sleep(3 * time.Second)
		register(s, "/r/late.sock", "CSIPlugin", "late", nil) // another build, the same refusals
		time.Sleep(3 * time.Second)
		synctest.Wait()
		rec.mu.Lock()
		defer rec.mu.Unlock()
		var left []publish.Event
		for _, e := range rec.events {
			if e.Reason == publish.ReasonPublishLeftOut {
				left = append(left, e)
			}
		}
		if len(left) != 1 || !left[0].Warning || !strings.Contains(left[0].Note, "plugin long of type CSIPlugin at /r/long.sock: key node_id: left out: a 65300-byte value") ||
			!strings.Contains(left[0].Note, "; key topology: left out") {
			t.Errorf("PublishLeftOut Events %+v, want one about long's node_id and topology", left)
		}
	})
}

// TestStableText: what changes from one attempt to the next for the same cause is not in an
// Event's note; what tells the cause is.
func TestStableText(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"socket /r/a.sock: nobody is listening after 3 attempt(s), socket first seen 1m2.5s ago: connect: connection refused",
			"socket /r/a.sock: nobody is listening after (n) attempt(s), socket first seen (duration) ago: connect: connection refused"},
		{"host: handler /h/a.wasm validate timed out after 999ms: context deadline exceeded",
			"host: handler /h/a.wasm validate timed out after (duration): context deadline exceeded"},
		{"quarantined until 2026-11-28T10:39:25.955Z after 3 traps", "quarantined until (time) after 3 traps"},
		{"version 1.0.0 of plugin v2s is too old (wants 1.2)", "version 1.0.0 of plugin v2s is too old (wants 1.2)"},
		{"result of 70000 bytes over the limit of 65536 bytes", "result of 70000 bytes over the limit of 65536 bytes"},
	} {
		if got := publish.StableText(c.in); got != c.want {
			t.Errorf("StableText(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
