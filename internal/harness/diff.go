package harness

// The replay diff: a session replayed against two revisions of a handler, and what the second
// does differently, call by call (wasmhost handler diff, the offline twin of the daemon's
// shadow runs).

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/host/sandbox"
	"github.com/wasmhost/wasmhost/internal/session"
)

// Revision is a revision of a handler to replay sessions against: its module, loaded in a
// harness of its own.
type Revision struct {
	Harness *Harness
	Module  *sandbox.Module
}

// SessionDiff is what two revisions did with one session, per call (the JSON of wasmhost
// handler diff -o json).
type SessionDiff struct {
	Session string `json:"session"` // the session's file, as the caller names it
	Type    string `json:"type"`
	Plugin  string `json:"plugin"`
	Changed bool   `json:"changed"`
	// Changes say what the new revision did differently, one line each, "<op>: ...".
	Changes []string   `json:"changes,omitempty"`
	Old     []CallView `json:"oldCalls"`
	New     []CallView `json:"newCalls"`
}

// CallView is what one revision did in one call, as the diff compares it.
type CallView struct {
	Op          Op                `json:"op"`
	Outcome     Outcome           `json:"result"`
	Reason      string            `json:"reason,omitempty"`
	Published   map[string]string `json:"published,omitempty"`
	PluginCalls []string          `json:"pluginCalls,omitempty"`
	Writes      []string          `json:"storeWrites,omitempty"`
	Departures  []string          `json:"departures,omitempty"`
}

// Diff replays s (complete: session.Replayable) against the old and the new revision, their
// plugin_calls answered from the session by request (ByRequest), and says per call what
// changes: the outcome, the reason, the facts published, the plugin calls made (method and
// request), the writes to the store. name is the session's name in the result.
func Diff(ctx context.Context, old, new Revision, s *session.Session, name string) SessionDiff {
	d := SessionDiff{Session: name, Type: s.Plugin.Type, Plugin: s.Plugin.Name, Old: []CallView{}, New: []CallView{}}
	a := old.Harness.Replay(ctx, old.Module, s, ByRequest)
	b := new.Harness.Replay(ctx, new.Module, s, ByRequest)
	for j := range a {
		ca, cb := NewCallView(a[j]), NewCallView(b[j])
		d.Old, d.New = append(d.Old, ca), append(d.New, cb)
		d.Changes = append(d.Changes, CallChanges(ca, cb)...)
	}
	d.Changed = len(d.Changes) > 0
	return d
}

// NewCallView is what the replayed call rs did, as the diff compares it.
func NewCallView(rs ReplayStep) CallView {
	v := CallView{Op: rs.Op, Outcome: rs.Outcome, Reason: rs.Reason, Published: rs.Published, Departures: rs.Departures}
	if rs.Record == nil {
		return v
	}
	for _, x := range rs.Record.Exchanges {
		switch x.Fn {
		case session.PluginCall:
			s := x.Method + " " + strconv.Quote(string(x.Request))
			if x.Error != "" {
				s += " (failed: " + x.Error + ")"
			}
			v.PluginCalls = append(v.PluginCalls, s)
		case session.KVSet, session.KVCAS:
			if x.Code == abi.StatusOK {
				if x.Delete {
					v.Writes = append(v.Writes, "delete "+strconv.Quote(x.Key))
				} else {
					v.Writes = append(v.Writes, strconv.Quote(x.Key)+" = "+strconv.Quote(string(x.Value)))
				}
			}
		case session.KVDelete:
			v.Writes = append(v.Writes, "delete "+strconv.Quote(x.Key))
		}
	}
	return v
}

// CallChanges says what differs between two revisions' calls, one line each.
func CallChanges(a, b CallView) []string {
	var out []string
	p := string(a.Op) + ": "
	if a.Outcome != b.Outcome {
		out = append(out, p+fmt.Sprintf("%s → %s", a.Outcome, b.Outcome))
	}
	if a.Reason != b.Reason {
		out = append(out, p+fmt.Sprintf("reason %s → %s", strconv.Quote(a.Reason), strconv.Quote(b.Reason)))
	}
	keys := slices.Sorted(maps.Keys(a.Published))
	for k := range b.Published {
		if _, ok := a.Published[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		av, aok := a.Published[k]
		bv, bok := b.Published[k]
		switch {
		case !bok:
			out = append(out, p+fmt.Sprintf("published %s: %s → (not published)", k, strconv.Quote(av)))
		case !aok:
			out = append(out, p+fmt.Sprintf("published %s: (not published) → %s", k, strconv.Quote(bv)))
		case av != bv:
			out = append(out, p+fmt.Sprintf("published %s: %s → %s", k, strconv.Quote(av), strconv.Quote(bv)))
		}
	}
	if !slices.Equal(a.PluginCalls, b.PluginCalls) {
		out = append(out, p+fmt.Sprintf("plugin calls %s → %s", listOrNone(a.PluginCalls), listOrNone(b.PluginCalls)))
	}
	if !slices.Equal(a.Writes, b.Writes) {
		out = append(out, p+fmt.Sprintf("store writes %s → %s", listOrNone(a.Writes), listOrNone(b.Writes)))
	}
	return out
}

func listOrNone(ss []string) string {
	if len(ss) == 0 {
		return "(none)"
	}
	return "[" + strings.Join(ss, ", ") + "]"
}
