package harness

// Recording and replaying sessions (package session): every call Do makes is recorded by the
// host (Step.Record); Replay runs a session's calls again on a module, answering its
// plugin_calls from the session and giving it the store the session saw, and says where the
// module departs from the recording.

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/wasmhost/wasmhost/internal/host/sandbox"
	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/session"
)

// recorder is the harness host's sandbox.Recorder: it keeps the last call.
type recorder struct {
	mu      sync.Mutex
	last    *session.Call
	handler session.Handler
}

func (r *recorder) Records(string) bool { return true }

func (r *recorder) Record(_ registration.PluginInfo, h session.Handler, c session.Call) {
	r.mu.Lock()
	r.last, r.handler = &c, h
	r.mu.Unlock()
}

func (r *recorder) take() (*session.Call, session.Handler) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, h := r.last, r.handler
	r.last = nil
	return c, h
}

// NewSession returns the session of steps Do made about p: what `wasmhost handler test
// --record` writes.
func NewSession(p registration.PluginInfo, steps []Step) *session.Session {
	s := &session.Session{
		APIVersion: session.APIVersion, Kind: session.Kind, Source: "handler test",
		CapturedAt: time.Now().UTC(),
		Plugin:     session.Plugin{Socket: p.Socket, Type: p.Type, Name: p.Name, Endpoint: p.Endpoint, Versions: slices.Clone(p.Versions)},
	}
	for _, st := range steps {
		if st.Record == nil {
			continue
		}
		if len(s.Calls) == 0 {
			s.CapturedAt = time.Now().Add(-st.Duration).UTC()
		}
		s.Handler = st.Handler
		s.Calls = append(s.Calls, *st.Record)
		if t := st.Record.Truncated; t != nil {
			s.Truncated = s.Truncated.Add(t.Exchanges, t.Bytes)
		}
	}
	return s
}

// PluginInfo is the plugin a session recorded, as the daemon hands it to handlers.
func PluginInfo(s *session.Session) registration.PluginInfo {
	return registration.PluginInfo{Socket: s.Plugin.Socket, Type: s.Plugin.Type, Name: s.Plugin.Name,
		Endpoint: s.Plugin.Endpoint, Versions: slices.Clone(s.Plugin.Versions)}
}

// ReplayMode is how a replay matches a module's plugin_calls (and kv_get reads) to the
// session's.
type ReplayMode string

const (
	// ByRequest answers a plugin_call with the session's first unused answer to the same
	// method and request (else to the same method, a departure); reads may come in any order.
	ByRequest ReplayMode = "request"
	// InOrder wants the session's exchanges in the order it has them: each plugin_call must
	// be the next one of the session (method and request), each kv_get the next read.
	InOrder ReplayMode = "order"
)

// ReplayStep is one call of a replay.
type ReplayStep struct {
	Step
	// Departures say where the call departed from the session's, one line each; none when it
	// did what the session recorded.
	Departures []string
}

// Replay makes the calls of s, in order, on m (s must be complete: session.Replayable; a
// truncated session would show departures that are not there): before each, the plugin type's store is the one
// the session saw; the module's plugin_calls are answered from the session (no plugin is
// called). It says, per call, where the module departs from the recording: a plugin_call the
// session does not have (it fails, as a plugin that does not answer) or does not make, a
// different request, other reads or writes of the store, another result, reason or published
// facts.
func (hs *Harness) Replay(ctx context.Context, m *sandbox.Module, s *session.Session, mode ReplayMode) []ReplayStep {
	p := PluginInfo(s)
	var out []ReplayStep
	for _, c := range s.Calls {
		store := make(map[string][]byte, len(c.StoreBefore))
		for k, v := range c.StoreBefore {
			store[k] = v
		}
		hs.host.SetStore(p.Type, store)
		rc := &replayCaller{mode: mode}
		for _, x := range c.Exchanges {
			if x.Fn == session.PluginCall {
				rc.recorded = append(rc.recorded, x)
			}
		}
		rc.used = make([]bool, len(rc.recorded))
		hs.caller.setReplay(rc)
		st := hs.Do(ctx, m, Op(c.Export), p)
		hs.caller.setReplay(nil)
		rs := ReplayStep{Step: st, Departures: rc.departures}
		for i, x := range rc.recorded {
			if !rc.used[i] {
				rs.Departures = append(rs.Departures, fmt.Sprintf("plugin_call %s: the session has it, the module did not make it", x.Method))
			}
		}
		var got []session.Exchange
		if st.Record != nil {
			got = st.Record.Exchanges
			if t := st.Record.Truncated; t != nil {
				rs.Departures = append(rs.Departures, fmt.Sprintf("the replay's own recording stopped at its bounds, %d host calls (%d bytes) left out: "+
					"its store reads and writes past them are not compared", t.Exchanges, t.Bytes))
			}
		}
		rs.Departures = append(rs.Departures, kvDepartures(c.Exchanges, got, mode)...)
		rs.Departures = append(rs.Departures, resultDepartures(c.Result, st)...)
		out = append(out, rs)
	}
	return out
}

// replayCaller answers plugin_call from a session's call.
type replayCaller struct {
	mode       ReplayMode
	recorded   []session.Exchange
	used       []bool
	next       int // InOrder: the next exchange
	departures []string
}

func (r *replayCaller) Call(_ context.Context, _, method string, req []byte, _ int) ([]byte, error) {
	pick := -1
	switch r.mode {
	case InOrder:
		if r.next < len(r.recorded) {
			x := r.recorded[r.next]
			if x.Method != method {
				r.departures = append(r.departures, fmt.Sprintf("plugin_call %s: the session's next call is %s", method, x.Method))
				return nil, fmt.Errorf("replay: the session's next plugin_call is %s, not %s", x.Method, method)
			}
			pick = r.next
			r.next++
		}
	default:
		for i, x := range r.recorded {
			if !r.used[i] && x.Method == method && bytes.Equal(x.Request, req) {
				pick = i
				break
			}
		}
		if pick < 0 {
			pick = slices.IndexFunc(r.recorded, func(x session.Exchange) bool { return x.Method == method })
			for i, x := range r.recorded {
				if !r.used[i] && x.Method == method {
					pick = i
					break
				}
			}
		}
	}
	if pick < 0 {
		r.departures = append(r.departures, fmt.Sprintf("plugin_call %s: the session has no such call", method))
		return nil, fmt.Errorf("replay: the session has no plugin_call %s", method)
	}
	x := r.recorded[pick]
	if r.used[pick] && r.mode != InOrder {
		r.departures = append(r.departures, fmt.Sprintf("plugin_call %s: made more often than in the session (answered as before)", method))
	}
	r.used[pick] = true
	if !bytes.Equal(x.Request, req) {
		r.departures = append(r.departures, fmt.Sprintf("plugin_call %s: request %s, the session's %s", method, showBytes(req), showBytes(x.Request)))
	}
	if x.Code < 0 {
		return nil, fmt.Errorf("%s", x.Error)
	}
	return slices.Clone(x.Response), nil
}

// setReplay makes the plugin calls go to r (nil: back to the harness's caller).
func (c *callRecorder) setReplay(r *replayCaller) {
	c.mu.Lock()
	c.replay = r
	c.mu.Unlock()
}

// kvDepartures compares the store exchanges of a recorded call (want) and of its replay (got):
// the reads (by key, or in order) and the writes (in order).
func kvDepartures(want, got []session.Exchange, mode ReplayMode) []string {
	reads := func(xs []session.Exchange) []session.Exchange {
		return slices.DeleteFunc(slices.Clone(xs), func(x session.Exchange) bool { return x.Fn != session.KVGet })
	}
	writes := func(xs []session.Exchange) []string {
		var out []string
		for _, x := range xs {
			switch x.Fn {
			case session.KVSet:
				out = append(out, fmt.Sprintf("kv_set %s = %s (code %d)", strconv.Quote(x.Key), showBytes(x.Value), x.Code))
			case session.KVDelete:
				out = append(out, "kv_delete "+strconv.Quote(x.Key))
			case session.KVCAS:
				to := showBytes(x.Value)
				if x.Delete {
					to = "(delete)"
				}
				out = append(out, fmt.Sprintf("kv_compare_and_set %s = %s (code %d)", strconv.Quote(x.Key), to, x.Code))
			}
		}
		return out
	}
	var d []string
	wr, gr := reads(want), reads(got)
	if mode == InOrder {
		for i, g := range gr {
			if i >= len(wr) || wr[i].Key != g.Key {
				d = append(d, fmt.Sprintf("kv_get %s: read %d of the call, not the session's", strconv.Quote(g.Key), i+1))
				break
			}
		}
		if len(gr) < len(wr) {
			d = append(d, fmt.Sprintf("kv_get: %d reads, the session has %d", len(gr), len(wr)))
		}
	} else {
		seen := map[string]bool{}
		for _, w := range wr {
			seen[w.Key] = true
		}
		for _, g := range gr {
			if !seen[g.Key] {
				d = append(d, fmt.Sprintf("kv_get %s: a key the session did not read", strconv.Quote(g.Key)))
			}
		}
	}
	ww, gw := writes(want), writes(got)
	if !slices.Equal(ww, gw) {
		d = append(d, fmt.Sprintf("store writes %s, the session's %s", showList(gw), showList(ww)))
	}
	return d
}

// resultDepartures compares a recorded result with a replayed step's.
func resultDepartures(want session.Result, st Step) []string {
	var d []string
	if string(st.Outcome) != want.Status {
		d = append(d, fmt.Sprintf("result %s, the session's %s", st.Outcome, want.Status))
	}
	if st.Outcome != OK && st.Reason != want.Reason && string(st.Outcome) == want.Status {
		d = append(d, fmt.Sprintf("reason %s, the session's %s", strconv.Quote(st.Reason), strconv.Quote(want.Reason)))
	}
	for _, k := range slices.Sorted(maps.Keys(want.Published)) {
		g, ok := st.Published[k]
		switch {
		case !ok:
			d = append(d, fmt.Sprintf("published %s: not published, the session's %s", k, strconv.Quote(want.Published[k])))
		case g != want.Published[k]:
			d = append(d, fmt.Sprintf("published %s: %s, the session's %s", k, strconv.Quote(g), strconv.Quote(want.Published[k])))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(st.Published)) {
		if _, ok := want.Published[k]; !ok {
			d = append(d, fmt.Sprintf("published %s: %s, not in the session", k, strconv.Quote(st.Published[k])))
		}
	}
	return d
}

func showBytes(b []byte) string {
	if len(b) > 64 {
		return strconv.Quote(string(b[:64])) + fmt.Sprintf("… (%d bytes)", len(b))
	}
	return strconv.Quote(string(b))
}

func showList(ss []string) string {
	if len(ss) == 0 {
		return "(none)"
	}
	return fmt.Sprintf("%q", ss)
}
