// Package liveness notices when a registered plugin's server is gone while its socket file
// stays (a plugin killed with SIGKILL leaves its socket behind; a socket file is not a live
// plugin).
//
// For every registered plugin the monitor holds one idle connection to its registration
// socket, opened with the HTTP/2 client preface so that a gRPC server keeps it. The kernel
// closes that connection the moment the plugin's process goes: on Linux the monitor waits for
// it with one epoll set for all of them, so that it costs one file descriptor per plugin and
// no CPU at all while nothing happens. When a connection closes, the monitor dials the socket
// again: if something answers, the server only dropped an idle connection and the watch goes
// on with the new one; if nobody is listening, the plugin is dead and OnDead is called.
//
// This package is part of the daemon, not a stable API.
package liveness

import (
	"log/slog"
	"time"

	"github.com/wasmhost/wasmhost/internal/state"
)

// Config configures a Monitor.
type Config struct {
	// OnDead is called (from the monitor's goroutine) when the plugin at path, registered
	// from the socket with identity id, is found dead. Required.
	OnDead func(path string, id state.Identity)
	// DialTimeout bounds the probe that tells a dropped connection from a dead plugin.
	// Defaults to 1s.
	DialTimeout time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
}

// http2Preface is what an HTTP/2 client sends first: the connection preface and an empty
// SETTINGS frame. A gRPC server closes a connection that does not send it within its
// handshake timeout; with it, an idle connection is kept.
var http2Preface = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")

func (c Config) withDefaults() Config {
	if c.DialTimeout <= 0 {
		c.DialTimeout = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// watched is one plugin being watched.
type watched struct {
	path string
	id   state.Identity
	gen  uint64 // tells this watch from a later one of the same path
}
