// Package admin serves wasmhost's admin API (package adminv1, admin/v1/admin.proto) on a unix
// socket: the list of plugins and handlers, the daemon's status, and a watch of the plugins
// that behaves like a Kubernetes informer (the list, SYNCED, then changes).
//
// The server keeps no state of its own: it reads the daemon's state store (internal/state)
// for every list, and each watch stream follows the store with a subscription of its own. A
// stream that is slow to read costs the daemon nothing (the store coalesces what it has not
// sent into the newest view of each socket), and one so far behind that removals were
// forgotten starts over with RESET and a fresh list.
//
// This package is part of the daemon, not a stable API.
package admin

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/wasmhost/wasmhost/internal/publish"
	"github.com/wasmhost/wasmhost/internal/session"
	"github.com/wasmhost/wasmhost/internal/state"
	"github.com/wasmhost/wasmhost/internal/unixsock"
)

// DefaultSocketPath is where the daemon serves the admin API unless told otherwise.
const DefaultSocketPath = "/var/lib/wasmhost/admin.sock"

// Sentinel errors. Callers decide with errors.Is.
var (
	// ErrConfig: the Config cannot work (no Store, a socket path that is too long).
	ErrConfig = errors.New("admin: invalid config")
	// ErrSocketInUse: another process answers on the admin socket (another daemon?).
	ErrSocketInUse = unixsock.ErrInUse
	// ErrNotSocket: something that is not a socket is in the way at the socket path; it is
	// left alone.
	ErrNotSocket = unixsock.ErrNotSocket
	// ErrRunning: Run was called on a server that is running or has run.
	ErrRunning = errors.New("admin: Run called twice")
	// ErrNotFound: a Control call named a plugin type or revision the daemon does not know
	// (gRPC NOT_FOUND).
	ErrNotFound = errors.New("admin: not found")
	// ErrInvalid: a Control call named something that cannot serve (gRPC INVALID_ARGUMENT).
	ErrInvalid = errors.New("admin: invalid argument")
	// ErrNoSources: Config.Pull has no source to pull (gRPC FAILED_PRECONDITION).
	ErrNoSources = errors.New("no handler source is configured (handlers.sources)")
)

// Control changes which revision of a handler serves a plugin type, and what shadows it; the
// daemon implements it over its hosts. Errors wrap ErrNotFound or ErrInvalid where they are
// the caller's.
type Control interface {
	// Rollback pins pluginType to the revision sha256 (a prefix will do), or to the good one
	// before the serving one when it is empty, and returns the revision now serving.
	Rollback(ctx context.Context, pluginType, sha256 string) (state.Revision, error)
	// ClearPin ends pluginType's pin: the revision its file holds serves again.
	ClearPin(ctx context.Context, pluginType string) error
	// SetShadow names pluginType's shadow candidate (a file or "sha256:…"), or clears it.
	SetShadow(ctx context.Context, pluginType, candidate string) (*state.Shadow, error)
}

// Store is what the server reads; *state.Store implements it.
type Store interface {
	Plugins() []state.PluginView
	Handlers() []state.Handler
	Subscribe() (*state.Subscription, []state.PluginView)
	History(pluginType string) (state.History, bool)
}

// Config configures a Server.
type Config struct {
	// Store is the daemon's state. Required.
	Store Store
	// Control serves Rollback, ClearPin and SetShadow. Defaults to nil: they answer
	// UNIMPLEMENTED.
	Control Control
	// Ready returns nil when the daemon is ready (the first full listing of the socket
	// directory is done and the start-up handlers are loaded), or an error saying what it
	// still waits for. Defaults to always ready.
	Ready func() error
	// Problems says what does not serve, one line each (GetStatus's problems). Defaults to
	// the store's Health lines.
	Problems func() []string
	// Pull tries the sources of handlers.sources that do not serve their configured
	// revision at once, and returns when the try is over (PullHandlers). Defaults to nil:
	// FAILED_PRECONDITION, no source is configured.
	Pull func(ctx context.Context) error
	// SocketPath is the unix socket to serve on. It is created with mode 0600 (its directory,
	// if missing, 0700); a stale socket left there by a dead daemon is removed, a live one is
	// an error (ErrSocketInUse). Defaults to DefaultSocketPath.
	SocketPath string
	// Logger receives the server's logs. Defaults to nil: discard.
	Logger *slog.Logger
	// Publish returns the publisher's status for GetStatus. Defaults to nil: nothing is
	// published.
	Publish func() publish.Status
	// NotPublished says what of the plugin at a socket the publisher did not take to the
	// cluster as asked, one line each (Plugin.not_published). Defaults to nil: nothing.
	NotPublished func(socket string) []string
	// Capture returns the sessions the daemon keeps (CaptureSessions): those of names (plugin
	// names, sockets, types), or all, and the names that matched none. Defaults to nil:
	// FAILED_PRECONDITION, capture is off.
	Capture func(names []string) (sessions []*session.Session, missing []string)
	// Version is the daemon's version for GetStatus. Defaults to "(devel)".
	Version string
	// ShutdownTimeout is how long Run waits for open calls to finish after its context is
	// done before it closes the connections. Defaults to 5 s.
	ShutdownTimeout time.Duration
}

func (c Config) withDefaults() Config {
	if c.SocketPath == "" {
		c.SocketPath = DefaultSocketPath
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Ready == nil {
		c.Ready = func() error { return nil }
	}
	if c.Problems == nil && c.Store != nil {
		store := c.Store
		c.Problems = func() []string { return state.HealthOf(store.Handlers(), store.Plugins()).Lines() }
	}
	if c.Version == "" {
		c.Version = "(devel)"
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 5 * time.Second
	}
	return c
}
