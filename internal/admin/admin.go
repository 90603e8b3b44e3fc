// Package admin serves wasmhost's admin API (package adminv1, admin/v1/admin.proto) on a unix
// socket: the list of plugins and handlers, the daemon's status, and a watch of the plugins
// that behaves like a Kubernetes informer (the list, SYNCED, then changes).
//
// The daemon hands the server a Source to read lists from, and calls Publish with every plugin
// status change. Publish never waits for a watcher: each watcher has a bounded buffer, and one
// that falls behind is dropped from the fan-out and starts over with RESET and a fresh list.
//
// This package is part of the daemon, not a stable API.
package admin

import (
	"errors"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/wasmhost/wasmhost/internal/unixsock"
)

// DefaultSocketPath is where the daemon serves the admin API unless told otherwise.
const DefaultSocketPath = "/var/lib/wasmhost/admin.sock"

// Sentinel errors. Callers decide with errors.Is.
var (
	// ErrConfig: the Config cannot work (no Source, a socket path that is too long).
	ErrConfig = errors.New("admin: invalid config")
	// ErrSocketInUse: another process answers on the admin socket (another daemon?).
	ErrSocketInUse = unixsock.ErrInUse
	// ErrNotSocket: something that is not a socket is in the way at the socket path; it is
	// left alone.
	ErrNotSocket = unixsock.ErrNotSocket
	// ErrRunning: Run was called on a server that is running or has run.
	ErrRunning = errors.New("admin: Run called twice")
)

// PluginState is where a plugin socket is in its life. The values are the reconciler's state
// names.
type PluginState string

// The states of a plugin socket.
const (
	StatePending           PluginState = "pending"
	StateRegistered        PluginState = "registered"
	StateFailing           PluginState = "failing"
	StateWaitingForHandler PluginState = "waiting-for-handler"
	// StateGone: the socket went away. Publishing a plugin in this state removes it; watchers
	// see DELETED.
	StateGone PluginState = "gone"
)

// Plugin is the admin view of one plugin socket: what the reconciler says about it, joined
// with the actual state and the handler. Zero fields are unknown or do not apply.
type Plugin struct {
	Socket   string // the registration socket path; the key
	Type     string
	Name     string
	Endpoint string
	Versions []string

	State          PluginState
	LastError      string
	Attempts       int
	NextRetry      time.Time
	LastTransition time.Time

	HandlerFile   string
	HandlerSHA256 string // lower-case hex

	Published    map[string]string
	RegisteredAt time.Time
}

// equal reports whether p and q say the same thing.
func (p Plugin) equal(q Plugin) bool {
	return p.Socket == q.Socket && p.Type == q.Type && p.Name == q.Name &&
		p.Endpoint == q.Endpoint && slices.Equal(p.Versions, q.Versions) &&
		p.State == q.State && p.LastError == q.LastError && p.Attempts == q.Attempts &&
		p.NextRetry.Equal(q.NextRetry) && p.LastTransition.Equal(q.LastTransition) &&
		p.HandlerFile == q.HandlerFile && p.HandlerSHA256 == q.HandlerSHA256 &&
		maps.Equal(p.Published, q.Published) && p.RegisteredAt.Equal(q.RegisteredAt)
}

// Handler is the admin view of one loaded handler.
type Handler struct {
	PluginTypes  []string
	File         string // empty for a built-in (native Go) handler
	SHA256       string // lower-case hex
	Size         int64
	ABIVersion   uint32 // 0 for a built-in handler
	Capabilities []string
	LoadedAt     time.Time
	PoolSize     int

	Calls, Failures, Traps, Timeouts uint64
	LastError                        string
}

// Source is what the server reads its lists from. The daemon implements it over the
// reconciler, the actual state and the handler host. Every method must be safe to call from
// any goroutine at any time and must return promptly; the server does not modify what they
// return.
type Source interface {
	// Plugins returns every plugin socket known. It must already reflect a change by the
	// time Publish is called for it.
	Plugins() []Plugin
	// Handlers returns every loaded handler.
	Handlers() []Handler
	// Ready returns nil when the daemon is ready (the first full listing of the socket
	// directory is done and the start-up handlers are loaded), or an error saying what it
	// still waits for.
	Ready() error
}

// Config configures a Server.
type Config struct {
	// Source gives the lists. Required.
	Source Source
	// SocketPath is the unix socket to serve on. It is created with mode 0600 (its directory,
	// if missing, 0700); a stale socket left there by a dead daemon is removed, a live one is
	// an error (ErrSocketInUse). Defaults to DefaultSocketPath.
	SocketPath string
	// Logger receives the server's logs. Defaults to nil: discard.
	Logger *slog.Logger
	// WatchBuffer is how many events may wait for one watcher before it is dropped from the
	// fan-out and sent RESET. Defaults to 256.
	WatchBuffer int
	// Version is the daemon's version for GetStatus. Defaults to "(devel)".
	Version string
	// ResyncInterval is how often the watch cache is compared with Source.Plugins, to repair
	// anything a missed Publish left wrong. Defaults to 30 s; negative disables it (Resync
	// still works).
	ResyncInterval time.Duration
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
	if c.WatchBuffer <= 0 {
		c.WatchBuffer = 256
	}
	if c.Version == "" {
		c.Version = "(devel)"
	}
	if c.ResyncInterval == 0 {
		c.ResyncInterval = 30 * time.Second
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 5 * time.Second
	}
	return c
}
