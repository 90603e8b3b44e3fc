// Package typeslots bounds the registrations in their handler phase, per plugin type and across
// types. The reconciler, which decides what runs when, and the registrar, which takes a slot
// once GetInfo has named the plugin's type, both use it; it sits beside the pipeline so that
// neither imports the other. Through it too the registrar says when a registration waits
// outside the daemon (Waiting), for the reconciler to stop counting it.
//
// This package is part of the daemon, not a stable API.
package typeslots

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"
)

// ErrBusy: every operation slot of the plugin's type is taken, or every slot of all types. The
// registrar returns it right after GetInfo, before any handler call; the reconciler then queues
// the socket behind its type, without counting a failure, and starts it when a slot of that
// type is released.
// This is what keeps one slow type (a handler that loops, traps or waits out its deadline)
// from taking every slot and delaying the plugins of other types.
var ErrBusy = errors.New("typeslots: every operation slot of the plugin type is taken")

// Slots bounds the operations in their handler phase (past GetInfo: handler calls and the
// notification) per plugin type and across all types. Operations still waiting for a plugin
// to accept or answer hold none, so that sockets that never answer cannot keep the plugins
// that do from their handlers. It is safe for concurrent use.
type Slots struct {
	per      int
	total    int // across all types; 0: no bound but per
	mu       sync.Mutex
	inUse    int
	busy     map[string]int
	released map[string]struct{}
	wake     chan struct{}
	freed    chan struct{} // closed and replaced at every release: wakes Acquire's waiters
}

// New returns slots for at most per operations of each plugin type at once (at
// least 1) and at most total of all types (total <= 0: no bound across types).
func New(per, total int) *Slots {
	return &Slots{
		per:      max(per, 1),
		total:    max(total, 0),
		busy:     make(map[string]int),
		released: make(map[string]struct{}),
		wake:     make(chan struct{}, 1),
		freed:    make(chan struct{}),
	}
}

// TryAcquire takes a slot of pluginType if one is free; release gives it back (once).
func (t *Slots) TryAcquire(pluginType string) (release func(), ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.freeLocked(pluginType) <= 0 {
		return nil, false
	}
	t.busy[pluginType]++
	t.inUse++
	var once sync.Once
	return func() { once.Do(func() { t.release(pluginType) }) }, true
}

func (t *Slots) release(pluginType string) {
	t.mu.Lock()
	if t.busy[pluginType]--; t.busy[pluginType] <= 0 {
		delete(t.busy, pluginType)
	}
	t.inUse--
	t.released[pluginType] = struct{}{}
	close(t.freed)
	t.freed = make(chan struct{})
	t.mu.Unlock()
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// Acquire takes a slot of pluginType, waiting up to wait for one to be released. A type whose
// operations are quick frees a slot within a few milliseconds, so a burst of its plugins does
// not go round again through the queue (and dial and GetInfo again); a slow type's plugins
// give up soon and wait behind their type without holding anything.
func (t *Slots) Acquire(ctx context.Context, pluginType string, wait time.Duration) (release func(), ok bool) {
	var timer *time.Timer
	for {
		if release, ok := t.TryAcquire(pluginType); ok {
			if timer != nil {
				timer.Stop()
			}
			return release, true
		}
		if timer == nil {
			if wait <= 0 {
				return nil, false
			}
			timer = time.NewTimer(wait)
		}
		t.mu.Lock()
		freed := t.freed
		t.mu.Unlock()
		if t.Free(pluginType) > 0 {
			continue // released between TryAcquire and here
		}
		select {
		case <-freed:
		case <-timer.C:
			return t.TryAcquire(pluginType)
		case <-ctx.Done():
			timer.Stop()
			return nil, false
		}
	}
}

// Free returns how many slots of pluginType are free: of its own, and across all types.
func (t *Slots) Free(pluginType string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.freeLocked(pluginType)
}

func (t *Slots) freeLocked(pluginType string) int {
	free := t.per - t.busy[pluginType]
	if t.total > 0 {
		free = min(free, t.total-t.inUse)
	}
	return free
}

// Released receives a value after a slot was released; TakeReleased then says of which types.
func (t *Slots) Released() <-chan struct{} { return t.wake }

// TakeReleased returns the types a slot was released of since the last call, sorted. With a
// bound across types, a release may also free a slot for another type: the caller looks at
// every type it holds work back for, as Free says.
func (t *Slots) TakeReleased() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := slices.Sorted(maps.Keys(t.released))
	clear(t.released)
	return out
}
