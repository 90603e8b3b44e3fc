package watcher

import (
	"maps"
	"slices"
	"strings"
	"sync"
)

// memDesired is a Desired in memory for the watcher's own tests (internal/state's store
// imports this package, so these tests cannot use it). Changed wakes after every change, as
// the store's does.
type memDesired struct {
	mu      sync.Mutex
	sockets map[string]Socket
	gone    map[string]bool // paths ever removed
	changed chan struct{}
}

// removed reports whether path was ever removed.
func (d *memDesired) removed(path string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.gone[path]
}

func newMemDesired() *memDesired {
	return &memDesired{sockets: make(map[string]Socket), gone: make(map[string]bool), changed: make(chan struct{}, 1)}
}

func (d *memDesired) signal() {
	select {
	case d.changed <- struct{}{}:
	default:
	}
}

func (d *memDesired) Upsert(s Socket) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if old, ok := d.sockets[s.Path]; ok && old.ID == s.ID {
		return false
	}
	d.sockets[s.Path] = s
	d.signal()
	return true
}

func (d *memDesired) Remove(path string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.sockets[path]; !ok {
		return false
	}
	delete(d.sockets, path)
	d.gone[path] = true
	d.signal()
	return true
}

func (d *memDesired) RemoveUnder(dir string) int {
	prefix := strings.TrimSuffix(dir, "/") + "/"
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for p := range d.sockets {
		if strings.HasPrefix(p, prefix) {
			delete(d.sockets, p)
			d.gone[p] = true
			n++
		}
	}
	if n > 0 {
		d.signal()
	}
	return n
}

func (d *memDesired) Get(path string) (Socket, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s, ok := d.sockets[path]
	return s, ok
}

func (d *memDesired) List() []Socket {
	d.mu.Lock()
	out := slices.Collect(maps.Values(d.sockets))
	d.mu.Unlock()
	slices.SortFunc(out, func(a, b Socket) int { return strings.Compare(a.Path, b.Path) })
	return out
}

func (d *memDesired) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.sockets)
}

func (d *memDesired) Changed() <-chan struct{} { return d.changed }
