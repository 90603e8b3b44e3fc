//go:build !linux

package liveness

import (
	"context"
	"errors"
	"net"

	"github.com/wasmhost/wasmhost/internal/state"
)

// Monitor is a no-op where there is no epoll: a dead plugin is noticed when its socket file
// goes, as before.
type Monitor struct{ cfg Config }

// New returns a monitor that watches nothing.
func New(cfg Config) (*Monitor, error) {
	if cfg.OnDead == nil {
		return nil, errors.New("liveness: Config.OnDead is required")
	}
	return &Monitor{cfg: cfg.withDefaults()}, nil
}

// Watch does nothing here.
func (m *Monitor) Watch(context.Context, string, state.Identity) error { return nil }

// Adopt closes c: nothing is watched here.
func (m *Monitor) Adopt(_ string, _ state.Identity, c net.Conn) error { return c.Close() }

// Forget does nothing here.
func (m *Monitor) Forget(string) {}

// Close does nothing here.
func (m *Monitor) Close() {}

// Len is 0.
func (m *Monitor) Len() int { return 0 }

// Run waits for ctx.
func (m *Monitor) Run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}
