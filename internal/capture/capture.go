// Package capture keeps, per plugin type, what the handler saw when each of the last few
// plugins registered (package session): the daemon's host records into it (sandbox.Recorder) and
// the admin API hands its sessions out (`wasmhost plugins capture`).
//
// It is bounded: at most Config.Sessions plugins per type are kept, the one that registered
// longest ago dropped first; a session holds at most MaxCalls calls and MaxSessionExchanges
// exchanges and MaxSessionBytes bytes of recording (each call's recording is bounded where the
// host fills it: sandbox.MaxRecordExchanges, sandbox.MaxRecordBytes); all the sessions of every
// type together hold at most MaxBytes, the session that was added to longest ago dropped first.
// What a bound leaves out of a session, the session says (session.Call.Truncated). Values pass
// through the redaction rules before they are kept.
package capture

import (
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/session"
)

// The bounds of what the ring keeps. They are constants, not config keys: they bound a
// debugging aid, which no operator needs to move to run plugins (handlers.capture.sessions
// says how many plugins per type are kept, and 0 turns capture off).
//
// The figures: a real registration (validate, then register) records under 2 KiB in a few
// exchanges (the shipped CSI handler: a kv_get, a plugin_call NodeGetInfo of a few hundred
// bytes, a kv_compare_and_set); a session of 16 calls of that kind is ~16 KiB, and the
// default 16 sessions of three types under 1 MiB. A session gets room for two calls at the
// sandbox's bound per call (1 MiB, 256 exchanges: a validate and a register that each read a
// large answer); the whole ring 16 MiB, eight sessions at their bound or some 10,000 real
// ones, so that hostile handlers cost the daemon at most that, whatever the number of types,
// and `wasmhost plugins capture --all` gets its answer (YAML, the binary values in base64, ~22
// MB at the bound) in about a second.
const (
	// MaxCalls bounds the calls one session keeps: a plugin whose calls come without a
	// validate between them (retries of a failing register) starts its session afresh past it.
	MaxCalls = 16
	// MaxSessionExchanges and MaxSessionBytes bound the exchanges and the bytes (as
	// session.Call.Size counts them) of one session's calls together. Past them, a call
	// joining the session keeps its export and result, and what of its store values and
	// exchanges still fits; the rest is counted in its Truncated.
	MaxSessionExchanges = 1024
	MaxSessionBytes     = 2 << 20
	// MaxBytes bounds what the ring holds, every session of every type together: past it the
	// session added to longest ago is dropped, whatever its type, until the ring fits again
	// (the one just added is kept).
	MaxBytes = 16 << 20
)

// Config configures a Ring.
type Config struct {
	// Sessions is how many plugins' last registrations are kept per plugin type
	// (handlers.capture.sessions); 0 keeps none.
	Sessions int
	// OptOut are the plugin types never recorded (handlers.types.<T>.capture: false).
	OptOut map[string]bool
	// Redactor redacts what is kept (handlers.capture.redact). Defaults to nil: nothing is.
	Redactor *session.Redactor
	// Node names the node in the sessions (the host name).
	Node string
}

// Ring keeps the sessions. It implements sandbox.Recorder. The zero value keeps nothing.
type Ring struct {
	cfg    Config
	mu     sync.Mutex
	byType map[string]*typeRing
	bytes  int64  // of every session kept
	seq    uint64 // counts the calls recorded: kept.seq
}

// typeRing is the sessions of one type, by socket; order is the sockets, oldest first.
type typeRing struct {
	order    []string
	sessions map[string]*kept
}

// kept is one session with what it holds.
type kept struct {
	s         *session.Session
	bytes     int64  // of its calls, as session.Call.Size counts them
	exchanges int    // of its calls
	seq       uint64 // when a call was last added to it: the ring's oldest is the least
}

// New returns a Ring for cfg.
func New(cfg Config) *Ring {
	return &Ring{cfg: cfg, byType: make(map[string]*typeRing)}
}

// Records implements sandbox.Recorder.
func (r *Ring) Records(pluginType string) bool {
	return r != nil && r.cfg.Sessions > 0 && !r.cfg.OptOut[pluginType]
}

// Record implements sandbox.Recorder: a validate starts the plugin's session afresh (a
// registration begins with it); register and deregister add to the plugin's session, as much
// of them as its bounds leave room for.
func (r *Ring) Record(p registration.PluginInfo, h session.Handler, c session.Call) {
	if !r.Records(p.Type) {
		return
	}
	one := &session.Session{Calls: []session.Call{c}}
	r.cfg.Redactor.Redact(one)
	c = one.Calls[0]
	r.mu.Lock()
	defer r.mu.Unlock()
	tr := r.byType[p.Type]
	if tr == nil {
		tr = &typeRing{sessions: make(map[string]*kept)}
		r.byType[p.Type] = tr
	}
	k := tr.sessions[p.Socket]
	if k == nil || c.Export == session.Validate || k.s.Plugin.Name != p.Name || len(k.s.Calls) >= MaxCalls {
		if k != nil {
			r.bytes -= k.bytes
		}
		k = &kept{s: &session.Session{
			APIVersion: session.APIVersion, Kind: session.Kind,
			CapturedAt: time.Now().Add(-c.Duration).UTC(), Source: "daemon", Node: r.cfg.Node,
			Plugin: session.Plugin{Socket: p.Socket, Type: p.Type, Name: p.Name, Endpoint: p.Endpoint, Versions: p.Versions},
		}}
		tr.sessions[p.Socket] = k
	}
	size := fit(&c, MaxSessionBytes-k.bytes, MaxSessionExchanges-k.exchanges)
	s := k.s
	s.Handler = h
	s.Calls = append(s.Calls, c)
	s.Redacted += one.Redacted
	if t := c.Truncated; t != nil {
		s.Truncated = s.Truncated.Add(t.Exchanges, t.Bytes)
	}
	r.seq++
	k.bytes, k.exchanges, k.seq = k.bytes+size, k.exchanges+len(c.Exchanges), r.seq
	r.bytes += size
	// The socket is now the newest; drop the oldest over the bounds.
	if i := slices.Index(tr.order, p.Socket); i >= 0 {
		tr.order = slices.Delete(tr.order, i, i+1)
	}
	tr.order = append(tr.order, p.Socket)
	for len(tr.order) > r.cfg.Sessions {
		r.drop(tr)
	}
	for r.bytes > MaxBytes && r.dropOldest(k) {
	}
}

// fit trims c to room bytes and roomX exchanges, and returns the bytes it then takes: it keeps
// its export and result, then its store values if they fit, then its exchanges in order while
// they fit; what it leaves out is added to c.Truncated.
func fit(c *session.Call, room int64, roomX int) int64 {
	size := c.Size()
	if size <= room && len(c.Exchanges) <= roomX {
		return size
	}
	xs, store := c.Exchanges, c.StoreBefore
	c.Exchanges, c.StoreBefore = nil, nil
	size = c.Size()
	var storeBytes int64
	for key, v := range store {
		storeBytes += session.StoreEntrySize(key, v)
	}
	if size+storeBytes <= room {
		c.StoreBefore, size = store, size+storeBytes
	} else if len(store) > 0 {
		c.Truncated = c.Truncated.Add(0, storeBytes)
	}
	n := 0
	for ; n < len(xs) && n < roomX && size+xs[n].Size() <= room; n++ {
		size += xs[n].Size()
	}
	if n < len(xs) {
		var left int64
		for i := n; i < len(xs); i++ {
			left += xs[i].Size()
		}
		c.Truncated = c.Truncated.Add(len(xs)-n, left)
	}
	c.Exchanges = slices.Clone(xs[:n]) // not a view: the dropped exchanges' bytes are freed
	return size
}

// drop drops the oldest session of tr.
func (r *Ring) drop(tr *typeRing) {
	r.bytes -= tr.sessions[tr.order[0]].bytes
	delete(tr.sessions, tr.order[0])
	tr.order = tr.order[1:]
}

// dropOldest drops the session added to longest ago of any type, unless it is keep, and says
// whether it dropped one.
func (r *Ring) dropOldest(keep *kept) bool {
	var oldest *typeRing
	for _, tr := range r.byType {
		if len(tr.order) == 0 {
			continue
		}
		if k := tr.sessions[tr.order[0]]; k != keep && (oldest == nil || k.seq < oldest.sessions[oldest.order[0]].seq) {
			oldest = tr
		}
	}
	if oldest == nil {
		return false
	}
	r.drop(oldest)
	return true
}

// Bytes returns what the ring holds, in bytes as session.Call.Size counts them: at most
// MaxBytes.
func (r *Ring) Bytes() int64 {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bytes
}

// Sessions returns copies of the sessions kept, sorted by plugin type then socket: every one,
// or those whose plugin name, socket path or plugin type is one of names. missing are the names
// that matched none.
func (r *Ring) Sessions(names []string) (out []*session.Session, missing []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	matched := make(map[string]bool)
	for _, tr := range r.byType {
		for _, k := range tr.sessions {
			s := k.s
			hit := len(names) == 0
			for _, n := range names {
				if n == s.Plugin.Name || n == s.Plugin.Socket || n == s.Plugin.Type {
					hit, matched[n] = true, true
				}
			}
			if hit {
				out = append(out, clone(s))
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Plugin.Type != out[j].Plugin.Type {
			return out[i].Plugin.Type < out[j].Plugin.Type
		}
		return out[i].Plugin.Socket < out[j].Plugin.Socket
	})
	for _, n := range names {
		if !matched[n] {
			missing = append(missing, n)
		}
	}
	return out, missing
}

// clone copies s deeply enough that the caller may change it: the calls are never changed
// once kept, so sharing their bytes is safe.
func clone(s *session.Session) *session.Session {
	c := *s
	c.Calls = slices.Clone(s.Calls)
	c.Plugin.Versions = slices.Clone(s.Plugin.Versions)
	return &c
}
