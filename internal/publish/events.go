package publish

import (
	"fmt"
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
	// Recorded: written, or counted on a series; Dropped: over the rate limit or the queue;
	// Failed: the API server refused or could not be reached.
	Recorded, Dropped, Failed uint64
	LastError                 string
	LastErrorAt               time.Time
}

// eventWatch tells what changed into Events: a plugin rejected, failing because of its
// handler, or lost; a handler quarantined or rolled back. It compares each socket's settled
// state (pending ones are skipped: a retry goes failing → pending → failing) and each
// handler's quarantine and pins with what it saw last.
type eventWatch struct {
	sockets  map[string]sockSeen
	handlers map[string]handlerSeen
	started  bool // the handlers were seen once: what is there at start is not news
}

type sockSeen struct {
	state     state.PluginState
	lastError string
}

type handlerSeen struct {
	quarantined bool
	pins        []string
}

func newEventWatch() *eventWatch {
	return &eventWatch{sockets: map[string]sockSeen{}, handlers: map[string]handlerSeen{}}
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

// plugins returns the Events of the views that changed.
func (w *eventWatch) plugins(changes []state.Change) []Event {
	var out []Event
	for _, c := range changes {
		v := c.View
		if c.Type == state.Deleted {
			delete(w.sockets, v.Path)
			continue
		}
		if v.State == state.StatePending {
			continue
		}
		now := sockSeen{v.State, v.LastError}
		if w.sockets[v.Path] == now {
			continue
		}
		w.sockets[v.Path] = now
		switch {
		case v.State == state.StateRejected:
			out = append(out, Event{Warning: true, Reason: ReasonPluginRejected, Action: "Register",
				Note: pluginDesc(v) + " refused by its handler: " + v.LastError})
		case v.State == state.StateFailing && strings.HasPrefix(v.LastError, "plugin gone"):
			out = append(out, Event{Warning: true, Reason: ReasonPluginLost, Action: "Watch",
				Note: pluginDesc(v) + ": " + v.LastError})
		case v.State == state.StateFailing && strings.Contains(v.LastError, "handler failed"):
			out = append(out, Event{Warning: true, Reason: ReasonHandlerFailed, Action: "Register",
				Note: pluginDesc(v) + ": " + v.LastError})
		}
	}
	return out
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
				Note: fmt.Sprintf("handler %s (types %s) quarantined until %s: %s", name, strings.Join(h.PluginTypes, ","),
					h.Counters.QuarantinedUntil.UTC().Format(time.RFC3339), h.Counters.QuarantineReason)})
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
