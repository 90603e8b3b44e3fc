// Package statecache holds the two halves of wasmhost's level-triggered design: the desired
// state (the plugin sockets that exist, as the watcher sees them) and the actual state (the
// plugins that are registered, as the reconciler made them).
//
// Both are safe for concurrent use. A change to the desired state marks the socket path dirty
// and wakes whoever waits on Changed; the reconciler takes the dirty paths and works on them.
//
// This package is part of the daemon, not a stable API.
package statecache

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/wasmhost/wasmhost/internal/registration"
)

// Identity tells apart two sockets that had the same path at different times. The kubelet stamps
// a wall-clock time on every create event; wasmhost uses what the file system says: device and
// inode, plus the change time at which the socket was first seen. A socket replaced at the same
// path (a plugin restart) gets a new Identity even when the file system reuses the inode.
type Identity struct {
	Dev   uint64
	Ino   uint64
	Ctime int64 // nanoseconds since the epoch, as first seen
}

// String renders the identity compactly for logs.
func (id Identity) String() string {
	return fmt.Sprintf("%d:%d@%d", id.Dev, id.Ino, id.Ctime)
}

// Socket is one entry of the desired state: a unix socket that exists in the socket directory.
type Socket struct {
	Path string
	ID   Identity
	Seen time.Time // when the watcher first saw this identity at this path
}

// Desired is the set of sockets that exist. The watcher writes it; the reconciler reads it.
type Desired struct {
	mu      sync.Mutex
	sockets map[string]Socket
	dirty   map[string]struct{}
	changed chan struct{} // one slot: a pending wake-up
}

// NewDesired returns an empty desired state.
func NewDesired() *Desired {
	return &Desired{
		sockets: make(map[string]Socket),
		dirty:   make(map[string]struct{}),
		changed: make(chan struct{}, 1),
	}
}

// Upsert records s. It reports whether anything changed: an unknown path, or a known path with
// a different identity. Re-recording what is already there is a no-op, so list results and
// events can both be fed in without care for duplicates.
func (d *Desired) Upsert(s Socket) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if old, ok := d.sockets[s.Path]; ok && old.ID == s.ID {
		return false
	}
	d.sockets[s.Path] = s
	d.markLocked(s.Path)
	return true
}

// Remove forgets the socket at path and reports whether there was one.
func (d *Desired) Remove(path string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.sockets[path]; !ok {
		return false
	}
	delete(d.sockets, path)
	d.markLocked(path)
	return true
}

// RemoveUnder forgets every socket below dir (not dir itself) and returns how many it removed.
func (d *Desired) RemoveUnder(dir string) int {
	prefix := strings.TrimSuffix(dir, "/") + "/"
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for p := range d.sockets {
		if strings.HasPrefix(p, prefix) {
			delete(d.sockets, p)
			d.markLocked(p)
			n++
		}
	}
	return n
}

// Get returns the socket at path.
func (d *Desired) Get(path string) (Socket, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s, ok := d.sockets[path]
	return s, ok
}

// List returns every socket, sorted by path.
func (d *Desired) List() []Socket {
	d.mu.Lock()
	out := slices.Collect(maps.Values(d.sockets))
	d.mu.Unlock()
	slices.SortFunc(out, func(a, b Socket) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// Len returns the number of sockets.
func (d *Desired) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.sockets)
}

// Changed returns a channel that receives a value after the desired state changed. It has room
// for one value, so many changes coalesce into one wake-up; the receiver then calls TakeDirty.
func (d *Desired) Changed() <-chan struct{} { return d.changed }

// TakeDirty returns the paths changed since the last call (added, replaced or removed), and
// forgets them.
func (d *Desired) TakeDirty() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.dirty) == 0 {
		return nil
	}
	out := slices.Collect(maps.Keys(d.dirty))
	clear(d.dirty)
	return out
}

func (d *Desired) markLocked(path string) {
	d.dirty[path] = struct{}{}
	select {
	case d.changed <- struct{}{}:
	default:
	}
}

// Plugin is one entry of the actual state: a plugin that wasmhost registered.
type Plugin struct {
	Socket   string   // the socket path the plugin was found at; the key
	ID       Identity // the identity of that socket when it registered
	Type     string
	Name     string
	Endpoint string // where the plugin serves its own API; the socket path when it gave none
	Versions []string
	// Handler is the handler that registered the plugin, kept so that deregistration goes
	// through it even after its plugin type has lost its handler.
	Handler registration.Handler
	// Published is what the handler published about the plugin when it registered it.
	Published    map[string]string
	RegisteredAt time.Time
}

// Info returns the plugin as a handler sees it.
func (p Plugin) Info() registration.PluginInfo {
	return registration.PluginInfo{
		Socket:   p.Socket,
		Type:     p.Type,
		Name:     p.Name,
		Endpoint: p.Endpoint,
		Versions: p.Versions,
	}
}

// Actual is the set of registered plugins, keyed by socket path.
type Actual struct {
	mu      sync.Mutex
	plugins map[string]Plugin
	changed chan struct{}
}

// NewActual returns an empty actual state.
func NewActual() *Actual {
	return &Actual{plugins: make(map[string]Plugin), changed: make(chan struct{}, 1)}
}

// Add records p, replacing any plugin at the same socket path.
func (a *Actual) Add(p Plugin) {
	a.mu.Lock()
	a.plugins[p.Socket] = p
	a.mu.Unlock()
	a.signal()
}

// Update applies fn to the plugin at socket, if there is one, and reports whether there was.
func (a *Actual) Update(socket string, fn func(*Plugin)) bool {
	a.mu.Lock()
	p, ok := a.plugins[socket]
	if ok {
		fn(&p)
		a.plugins[socket] = p
	}
	a.mu.Unlock()
	if ok {
		a.signal()
	}
	return ok
}

// Remove forgets the plugin at socket and returns it.
func (a *Actual) Remove(socket string) (Plugin, bool) {
	a.mu.Lock()
	p, ok := a.plugins[socket]
	delete(a.plugins, socket)
	a.mu.Unlock()
	if ok {
		a.signal()
	}
	return p, ok
}

// Get returns the plugin at socket.
func (a *Actual) Get(socket string) (Plugin, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p, ok := a.plugins[socket]
	return p, ok
}

// List returns every registered plugin, sorted by socket path.
func (a *Actual) List() []Plugin {
	a.mu.Lock()
	out := slices.Collect(maps.Values(a.plugins))
	a.mu.Unlock()
	slices.SortFunc(out, func(x, y Plugin) int { return strings.Compare(x.Socket, y.Socket) })
	return out
}

// Len returns the number of registered plugins.
func (a *Actual) Len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.plugins)
}

// Changed returns a one-slot channel that receives a value after the actual state changed.
func (a *Actual) Changed() <-chan struct{} { return a.changed }

func (a *Actual) signal() {
	select {
	case a.changed <- struct{}{}:
	default:
	}
}
