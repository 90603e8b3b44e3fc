// Package capture keeps, per plugin type, what the handler saw when each of the last few
// plugins registered (package session): the daemon's host records into it (host.Recorder) and
// the admin API hands its sessions out (`wasmhost plugins capture`).
//
// It is bounded: at most Config.Sessions plugins per type are kept, the one that registered
// longest ago dropped first, and each session is what one registration's handler calls could
// exchange (bounded by handlers.limits). Values pass through the redaction rules before they
// are kept.
package capture

import (
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/session"
)

// MaxCalls bounds the calls one session keeps: a plugin whose calls come without a validate
// between them (retries of a failing register) starts its session afresh past it.
const MaxCalls = 16

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

// Ring keeps the sessions. It implements host.Recorder. The zero value keeps nothing.
type Ring struct {
	cfg    Config
	mu     sync.Mutex
	byType map[string]*typeRing
}

// typeRing is the sessions of one type, by socket, oldest first.
type typeRing struct {
	order    []string
	sessions map[string]*session.Session
}

// New returns a Ring for cfg.
func New(cfg Config) *Ring {
	return &Ring{cfg: cfg, byType: make(map[string]*typeRing)}
}

// Records implements host.Recorder.
func (r *Ring) Records(pluginType string) bool {
	return r != nil && r.cfg.Sessions > 0 && !r.cfg.OptOut[pluginType]
}

// Record implements host.Recorder: a validate starts the plugin's session afresh (a
// registration begins with it); register and deregister add to the plugin's session.
func (r *Ring) Record(p registration.PluginInfo, h session.Handler, c session.Call) {
	if !r.Records(p.Type) {
		return
	}
	one := &session.Session{Calls: []session.Call{c}}
	r.cfg.Redactor.Redact(one)
	r.mu.Lock()
	defer r.mu.Unlock()
	tr := r.byType[p.Type]
	if tr == nil {
		tr = &typeRing{sessions: make(map[string]*session.Session)}
		r.byType[p.Type] = tr
	}
	s := tr.sessions[p.Socket]
	if s == nil || c.Export == session.Validate || s.Plugin.Name != p.Name || len(s.Calls) >= MaxCalls {
		s = &session.Session{
			APIVersion: session.APIVersion, Kind: session.Kind,
			CapturedAt: time.Now().Add(-c.Duration).UTC(), Source: "daemon", Node: r.cfg.Node,
			Plugin: session.Plugin{Socket: p.Socket, Type: p.Type, Name: p.Name, Endpoint: p.Endpoint, Versions: p.Versions},
		}
		tr.sessions[p.Socket] = s
	}
	s.Handler = h
	s.Calls = append(s.Calls, one.Calls[0])
	s.Redacted += one.Redacted
	// The socket is now the newest; drop the oldest over the bound.
	if i := slices.Index(tr.order, p.Socket); i >= 0 {
		tr.order = slices.Delete(tr.order, i, i+1)
	}
	tr.order = append(tr.order, p.Socket)
	for len(tr.order) > r.cfg.Sessions {
		delete(tr.sessions, tr.order[0])
		tr.order = tr.order[1:]
	}
}

// Sessions returns copies of the sessions kept, sorted by plugin type then socket: every one,
// or those whose plugin name, socket path or plugin type is one of names. missing are the names
// that matched none.
func (r *Ring) Sessions(names []string) (out []*session.Session, missing []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	matched := make(map[string]bool)
	for _, tr := range r.byType {
		for _, s := range tr.sessions {
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
