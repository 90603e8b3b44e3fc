// Package admintest provides a fake admin.Source for tests of the admin server and its
// clients.
//
// This package is part of the daemon's tests, not a stable API.
package admintest

import (
	"slices"
	"sync"

	"github.com/wasmhost/wasmhost/internal/admin"
)

// Source is an admin.Source whose lists and readiness tests set. It is safe for concurrent
// use. The zero value is ready and empty.
type Source struct {
	mu       sync.Mutex
	plugins  []admin.Plugin
	handlers []admin.Handler
	notReady error
}

var _ admin.Source = (*Source)(nil)

// SetPlugins replaces the plugin list.
func (s *Source) SetPlugins(ps ...admin.Plugin) {
	s.mu.Lock()
	s.plugins = slices.Clone(ps)
	s.mu.Unlock()
}

// Upsert adds p, or replaces the plugin with p's socket.
func (s *Source) Upsert(p admin.Plugin) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.plugins {
		if s.plugins[i].Socket == p.Socket {
			s.plugins[i] = p
			return
		}
	}
	s.plugins = append(s.plugins, p)
}

// Remove removes the plugin at socket.
func (s *Source) Remove(socket string) {
	s.mu.Lock()
	s.plugins = slices.DeleteFunc(s.plugins, func(p admin.Plugin) bool { return p.Socket == socket })
	s.mu.Unlock()
}

// SetHandlers replaces the handler list.
func (s *Source) SetHandlers(hs ...admin.Handler) {
	s.mu.Lock()
	s.handlers = slices.Clone(hs)
	s.mu.Unlock()
}

// SetNotReady makes Ready return err; nil makes the source ready.
func (s *Source) SetNotReady(err error) {
	s.mu.Lock()
	s.notReady = err
	s.mu.Unlock()
}

// Plugins implements admin.Source.
func (s *Source) Plugins() []admin.Plugin {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.plugins)
}

// Handlers implements admin.Source.
func (s *Source) Handlers() []admin.Handler {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.handlers)
}

// Ready implements admin.Source.
func (s *Source) Ready() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.notReady
}
