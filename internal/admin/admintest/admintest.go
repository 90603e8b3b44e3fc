// Package admintest fills a real state store (internal/state) with the plugins and handlers
// that tests of the admin server and its clients describe, the way the daemon's reconciler and
// host would.
//
// This package is part of the daemon's tests, not a stable API.
package admintest

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/wasmhost/wasmhost/internal/admin"
	"github.com/wasmhost/wasmhost/internal/state"
)

// Plugin is one plugin socket as a test describes it. Zero fields are unknown.
type Plugin struct {
	Socket         string
	Type, Name     string
	Endpoint       string
	Versions       []string
	State          state.PluginState
	LastError      string
	Attempts       int
	NextRetry      time.Time
	LastTransition time.Time
	HandlerFile    string // the file serving Type; with HandlerSHA256, put in the handler set
	HandlerSHA256  string
	Published      map[string]string
	RegisteredAt   time.Time
}

// Source is a state store that tests fill, and a readiness they set. It is safe for
// concurrent use. The zero value is ready and empty.
type Source struct {
	mu        sync.Mutex
	store     *state.Store
	handlers  map[string]state.Handler // by file
	byPlugins map[string]state.Handler // handlers implied by plugins, by type
	plugins   map[string]Plugin        // as the test described them
	notReady  error
}

var _ admin.Store = (*state.Store)(nil)

// Store returns the store.
func (s *Source) Store() *state.Store {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.storeLocked()
}

func (s *Source) storeLocked() *state.Store {
	if s.store == nil {
		s.store = state.New()
		s.handlers = make(map[string]state.Handler)
		s.byPlugins = make(map[string]state.Handler)
		s.plugins = make(map[string]Plugin)
	}
	return s.store
}

// SetPlugins replaces every plugin with ps.
func (s *Source) SetPlugins(ps ...Plugin) {
	st := s.Store()
	for _, v := range st.Statuses() {
		s.Remove(v.Path)
	}
	for _, p := range ps {
		s.Upsert(p)
	}
}

// Upsert puts p in the store: its socket in the desired state, its status, and, when it is
// registered (State registered, or an Endpoint or Published given), its plugin in the actual
// state; a HandlerFile joins the handler set as the file serving p.Type.
func (s *Source) Upsert(p Plugin) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.storeLocked()
	s.plugins[p.Socket] = p
	st.Desired().Upsert(state.Socket{Path: p.Socket, ID: state.Identity{Ino: 1}, Seen: time.Now()})
	if p.HandlerFile != "" {
		s.byPlugins[p.Type] = state.Handler{File: p.HandlerFile, SHA256: p.HandlerSHA256, PluginTypes: []string{p.Type}, Serving: true}
		s.publishLocked()
	}
	if p.State == state.StateRegistered || p.Endpoint != "" || p.Published != nil {
		st.Actual().Add(state.Plugin{Socket: p.Socket, ID: state.Identity{Ino: 1}, Type: p.Type, Name: p.Name,
			Endpoint: p.Endpoint, Versions: p.Versions, Published: p.Published, RegisteredAt: p.RegisteredAt})
	} else {
		st.Actual().Remove(p.Socket)
	}
	st.SetStatus(state.Status{Path: p.Socket, State: p.State, PluginType: p.Type, PluginName: p.Name,
		PluginVersions: p.Versions, LastError: p.LastError, Attempts: p.Attempts, NextRetry: p.NextRetry,
		Since: p.LastTransition})
}

// Remove takes the socket away: watchers see it deleted.
func (s *Source) Remove(socket string) {
	st := s.Store()
	s.mu.Lock()
	delete(s.plugins, socket)
	s.mu.Unlock()
	st.Actual().Remove(socket)
	st.Desired().Remove(socket)
	st.DeleteStatus(socket, time.Now())
}

// SetHandlers replaces the handler files (besides those the plugins imply).
func (s *Source) SetHandlers(hs ...state.Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.storeLocked()
	clear(s.handlers)
	for _, h := range hs {
		s.handlers[h.File] = h
	}
	counters := make(map[string]state.HandlerCounters, len(hs))
	for _, h := range hs {
		counters[h.File] = h.Counters
	}
	s.store.SetHandlerCounters(func() map[string]state.HandlerCounters { return counters })
	s.publishLocked()
}

func (s *Source) publishLocked() {
	all := make([]state.Handler, 0, len(s.handlers)+len(s.byPlugins))
	for _, h := range s.handlers {
		all = append(all, h)
	}
	for _, h := range s.byPlugins {
		if _, ok := s.handlers[h.File]; !ok {
			all = append(all, h)
		}
	}
	s.store.SetHandlers(all)
}

// Plugins returns the plugins as the test described them, sorted by socket.
func (s *Source) Plugins() []Plugin {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Plugin, 0, len(s.plugins))
	for _, p := range s.plugins {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Plugin) int { return strings.Compare(a.Socket, b.Socket) })
	return out
}

// SetNotReady makes Ready return err (nil: ready).
func (s *Source) SetNotReady(err error) {
	s.mu.Lock()
	s.notReady = err
	s.mu.Unlock()
}

// Ready is the readiness tests set, for admin.Config.Ready.
func (s *Source) Ready() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.notReady
}
