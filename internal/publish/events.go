package publish

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/wasmhost/wasmhost/internal/state"
)

// Event is something that happened to the node's plugins or handlers, for the cluster (an
// Event on the Node).
type Event struct {
	Warning bool
	// Reason is one of the Reason constants; Action what the daemon was doing.
	Reason, Action string
	Note           string
}

// The reasons of Events.
const (
	ReasonPluginRejected     = "PluginRejected"     // a handler refused a plugin
	ReasonHandlerFailed      = "HandlerFailed"      // a handler's call failed for a plugin (trap, timeout, error)
	ReasonPluginLost         = "PluginLost"         // a registered plugin's server went away
	ReasonHandlerQuarantined = "HandlerQuarantined" // a handler's calls fail at once after repeated traps or timeouts
	ReasonHandlerRolledBack  = "HandlerRolledBack"  // a plugin type is served by an older revision of its handler
	ReasonPublishLeftOut     = "PublishLeftOut"     // what a plugin published is left out of the cluster's view (too large, not a valid name)
)

// Recorder takes Events to the cluster. Record must not block.
type Recorder interface {
	Record(Event)
	Stats() EventStats
}

// EventStats are a recorder's counts.
type EventStats struct {
	// Recorded: written, or counted on a series; Dropped: past the bound of the queue of
	// what waits to be written; Failed: writes the API server refused or that did not reach
	// it (what did not reach it stays queued and is tried again).
	Recorded, Dropped, Failed uint64
	// Requests: the requests about Events the API server answered (creates and patches).
	Requests uint64
	// Pending: the events waiting to be written (like ones are one).
	Pending     int
	LastError   string
	LastErrorAt time.Time
}

// eventWatch tells what changed into Events: a plugin rejected, failing because of its
// handler, or lost; a handler quarantined or rolled back. An Event is raised on a transition,
// not on a retry: for each socket it remembers the Event it raised last since the plugin last
// registered (pending views are skipped: a retry goes failing → pending → failing), and
// raises only one that says something else; a registration forgets it, so that a loss after
// a re-registration is raised again (the recorder counts it on the same Event's series). It
// compares each handler's quarantine and pins with what it saw last.
type eventWatch struct {
	sockets  map[string]string // socket → key of the Event raised last since it registered
	held     map[string]heldEvent
	handlers map[string]handlerSeen
	started  bool // the handlers were seen once: what is there at start is not news
}

// LostGrace is how long a PluginLost waits before it is raised: a plugin that exits cleanly
// stops serving, then removes its socket, and the daemon may see the first before the second.
// A socket removed (or a plugin registered again) within it is no loss.
const LostGrace = 2 * time.Second

// heldEvent is a PluginLost waiting for LostGrace to pass since at.
type heldEvent struct {
	e  Event
	at time.Time
}

type handlerSeen struct {
	quarantined bool
	pins        []string
}

func newEventWatch() *eventWatch {
	return &eventWatch{sockets: map[string]string{}, held: map[string]heldEvent{}, handlers: map[string]handlerSeen{}}
}

func pluginDesc(v state.PluginView) string {
	name := v.PluginName
	if name == "" {
		name = "(unnamed)"
	}
	if v.PluginType == "" {
		return fmt.Sprintf("plugin %s at %s", name, v.Path)
	}
	return fmt.Sprintf("plugin %s of type %s at %s", name, v.PluginType, v.Path)
}

// plugins returns the Events of the views that changed, and the PluginLost events held for
// LostGrace since before now.
func (w *eventWatch) plugins(changes []state.Change, now time.Time) []Event {
	var out []Event
	for _, c := range changes {
		v := c.View
		switch {
		case c.Type == state.Deleted:
			delete(w.sockets, v.Path)
			delete(w.held, v.Path)
			continue
		case v.State == state.StateRegistered || v.State == state.StateStandby:
			delete(w.sockets, v.Path)
			delete(w.held, v.Path)
			continue
		}
		e, ok := pluginEvent(v)
		if !ok {
			continue
		}
		key := e.Reason + "\x00" + e.Note
		if w.sockets[v.Path] == key {
			continue // a retry that ends the same way
		}
		w.sockets[v.Path] = key
		delete(w.held, v.Path)
		if e.Reason == ReasonPluginLost {
			w.held[v.Path] = heldEvent{e: e, at: now}
			continue
		}
		out = append(out, e)
	}
	for path, h := range w.held {
		if now.Sub(h.at) >= LostGrace {
			out = append(out, h.e)
			delete(w.held, path)
		}
	}
	return out
}

// pluginEvent is the Event of a plugin's view, if it tells one. Its note names the cause
// without what changes from one attempt to the next (durations, times, counts of attempts),
// so that the same cause is the same Event; the log keeps the whole error.
func pluginEvent(v state.PluginView) (Event, bool) {
	switch {
	case v.State == state.StateRejected:
		return Event{Warning: true, Reason: ReasonPluginRejected, Action: "Register",
			Note: pluginDesc(v) + " refused by its handler: " + StableText(v.LastError)}, true
	case v.State == state.StateFailing && strings.HasPrefix(v.LastError, "plugin gone"):
		return Event{Warning: true, Reason: ReasonPluginLost, Action: "Watch",
			Note: pluginDesc(v) + ": its server stopped answering and its socket file stays; registered again when something answers there"}, true
	case v.State == state.StateFailing && strings.Contains(v.LastError, "handler failed"):
		return Event{Warning: true, Reason: ReasonHandlerFailed, Action: "Register",
			Note: pluginDesc(v) + ": " + StableText(v.LastError)}, true
	}
	return Event{}, false
}

// What StableText replaces: Go durations (1.5s, 2m3s, 250ms), RFC 3339 times, and counts of
// attempts.
var (
	durationText = regexp.MustCompile(`\b\d+(?:\.\d+)?(?:ns|µs|us|ms|s|m|h)(?:\d+(?:\.\d+)?(?:ns|µs|us|ms|s|m|h))*\b`)
	timeText     = regexp.MustCompile(`\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)`)
	attemptsText = regexp.MustCompile(`\b\d+ attempt(?:\(s\)|s\b|\b)`)
)

// StableText is text with what changes from one attempt to the next for the same cause (a
// duration, a time, a count of attempts) replaced by a word: the text of an Event's note.
func StableText(s string) string {
	s = timeText.ReplaceAllString(s, "(time)")
	s = attemptsText.ReplaceAllString(s, "(n) attempt(s)")
	return durationText.ReplaceAllString(s, "(duration)")
}

// handlerEvents returns the Events of the handlers' quarantines and pins that are new.
func (w *eventWatch) handlerEvents(hs []state.Handler) []Event {
	var out []Event
	seen := map[string]bool{}
	for _, h := range hs {
		key := h.File + "\x00" + strings.Join(h.PluginTypes, ",")
		seen[key] = true
		now := handlerSeen{quarantined: h.Counters.Quarantined}
		for _, p := range h.Pins {
			now.pins = append(now.pins, p.PluginType+"\x00"+p.SHA256)
		}
		slices.Sort(now.pins)
		before, known := w.handlers[key]
		w.handlers[key] = now
		if !w.started {
			continue
		}
		name := h.File
		if name == "" {
			name = h.Name
		}
		if now.quarantined && (!known || !before.quarantined) {
			out = append(out, Event{Warning: true, Reason: ReasonHandlerQuarantined, Action: "Call",
				Note: fmt.Sprintf("handler %s (types %s) quarantined: %s", name, strings.Join(h.PluginTypes, ","),
					StableText(h.Counters.QuarantineReason))})
		}
		for _, p := range h.Pins {
			if slices.Contains(before.pins, p.PluginType+"\x00"+p.SHA256) {
				continue
			}
			how := "rolled back by an operator"
			if p.Auto {
				how = "rolled back automatically"
			}
			out = append(out, Event{Warning: p.Auto, Reason: ReasonHandlerRolledBack, Action: "Rollback",
				Note: fmt.Sprintf("plugin type %s %s: served by revision %s, not %s of %s: %s", p.PluginType, how, short(p.SHA256), short(p.FileSHA256), name, p.Reason)})
		}
	}
	for k := range w.handlers {
		if !seen[k] {
			delete(w.handlers, k)
		}
	}
	w.started = true
	return out
}

func short(sha string) string { return sha[:min(len(sha), 12)] }

// leftOutEvents returns one Event per plugin of the refusals that leave something out
// entirely (a key refused as a label only is still an attribute: no Event), in the order
// given.
func leftOutEvents(rs []Refusal) []Event {
	var out []Event
	at := map[string]int{}
	for _, r := range rs {
		if r.Label {
			continue
		}
		what := "key " + r.Key
		if r.Key == "" {
			what = "the plugin"
		}
		i, ok := at[r.Socket]
		if !ok {
			at[r.Socket] = len(out)
			out = append(out, Event{Warning: true, Reason: ReasonPublishLeftOut, Action: "Publish",
				Note: fmt.Sprintf("plugin %s of type %s at %s: %s: %s", r.Plugin, r.PluginType, r.Socket, what, r.Reason)})
			continue
		}
		out[i].Note += "; " + what + ": " + r.Reason
	}
	return out
}
