// Package state is the daemon's one observable store: the desired state (the plugin sockets
// that exist, as the watcher sees them), the actual state (the plugins registered), each
// socket's status as the reconciler decides it, and the handler set as the host loads it.
//
// Every change takes one lock and bumps one revision number. Readers get consistent views in
// one call (Plugins joins a socket's status, its registered plugin and the handler serving its
// type under that lock), and a Subscription follows the changes: it is woken after any change
// and asks for what changed since the revision it last saw, so a slow reader costs the store
// nothing and never misses the latest view of a socket. The reconciler writes the store; the
// admin API (list and watch), the metrics and the command line read it.
//
// Desired changes also mark the socket path dirty and wake whoever waits on Desired.Changed:
// that is how the reconciler is woken by edges and stays level-triggered.
//
// This package is part of the daemon, not a stable API.
package state

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/wasmhost/wasmhost/internal/watcher"
)

// Identity and Socket are the watcher's: the desired state is the sockets as it reports them.
type (
	Identity = watcher.Identity
	Socket   = watcher.Socket
)

// PluginState is the state of one socket path as operators see it.
type PluginState string

// The states of a socket path.
const (
	// StateRegistered: the plugin at the socket is registered.
	StateRegistered PluginState = "registered"
	// StatePending: an operation is queued or in flight.
	StatePending PluginState = "pending"
	// StateFailing: the last operation failed; the next attempt is at NextRetry.
	StateFailing PluginState = "failing"
	// StateWaitingForHandler: the plugin's type has no handler; it is registered when one
	// appears.
	StateWaitingForHandler PluginState = "waiting-for-handler"
	// StateStandby: the plugin is registered, but another instance of the same plugin (same
	// type and name, on another socket) is the one its handler serves: it takes over, without
	// the handler being told of a deregistration, if that one goes.
	StateStandby PluginState = "standby"
	// StateRejected: the handler refused the plugin (its own decision, with a reason). It is
	// asked again when its handler, the socket, or a plugin of the same type and name
	// changes, and otherwise at NextRetry.
	StateRejected PluginState = "rejected"
	// StateGone: the socket and its plugin are gone. Only a Change says it (Deleted); no list
	// shows it.
	StateGone PluginState = "gone"
)

// Status is what the reconciler decided about one socket path.
type Status struct {
	Path  string
	State PluginState
	// PluginType and PluginName are known once the plugin registered, or from a failed
	// registration whose error tells them; empty otherwise.
	PluginType string
	PluginName string
	// PluginVersions are the versions the plugin said it supports, known as its type and
	// name are. Operators read them to see why a plugin is refused.
	PluginVersions []string
	// LastError is the error of the last failed operation; empty after a success.
	LastError string
	// Attempts counts the failed attempts since the last success or since the socket was
	// replaced.
	Attempts int
	// NextRetry is when the socket is tried again; set only in StateFailing.
	NextRetry time.Time
	// Since is when State last changed.
	Since time.Time
}

// Equal reports whether two statuses say the same.
func (a Status) Equal(b Status) bool {
	return a.Path == b.Path && a.State == b.State && a.PluginType == b.PluginType &&
		a.PluginName == b.PluginName && slices.Equal(a.PluginVersions, b.PluginVersions) &&
		a.LastError == b.LastError && a.Attempts == b.Attempts &&
		a.NextRetry.Equal(b.NextRetry) && a.Since.Equal(b.Since)
}

// Plugin is one entry of the actual state: a plugin that wasmhost registered.
type Plugin struct {
	Socket   string   // the socket path the plugin was found at; the key
	ID       Identity // the identity of that socket when it registered
	Type     string
	Name     string
	Endpoint string // where the plugin serves its own API; the socket path when it gave none
	Versions []string
	// Handler is what registered the plugin, kept so that deregistration goes through it even
	// after its plugin type has lost its handler. The store does not look at it: it is the
	// registration package's (a registration.Handler).
	Handler any
	// Published is what the handler published about the plugin when it registered it.
	Published    map[string]string
	RegisteredAt time.Time
	// HandlerFile and HandlerSHA256 are the revision of the handler that registered the
	// plugin, and published Published; later revisions of the file do not change them. Empty
	// for a native handler.
	HandlerFile, HandlerSHA256 string
	// Standby: another instance of the same plugin (type and name) is the active one, the one
	// its handler was told of last; this one takes over if that one goes.
	Standby bool
}

// GroupKey names the instances of one plugin: its type and name.
type GroupKey struct{ Type, Name string }

// Handler is one handler file as the host loaded it (or a native handler, with no File).
type Handler struct {
	File         string   // path of the file; the key
	PluginTypes  []string // the types it serves (none when it never loaded)
	Name         string   // the manifest's name
	Version      string   // the manifest's version
	SHA256       string   // of the module serving, lower-case hex
	Size         int64
	ABIVersion   uint32
	Capabilities []string // granted and used
	LoadedAt     time.Time
	PoolSize     int
	Serving      bool // a module of this file serves calls
	LastError    string
	LastErrorAt  time.Time
	// Source is where the handler comes from: SourceFile (the handler directory),
	// SourceRegistry (handlers.sources; File is then the reference), or "" (built in).
	Source string
	// Reason names the class of LastError when it keeps the handler from serving (a file's
	// refusal reason, a source's pull reason), or ReasonPending for a source not pulled yet.
	Reason string
	// GoneSince is when the file went from the handler directory; zero while it is there.
	GoneSince time.Time
	// Pins are the plugin types of the file served by an older revision after a rollback.
	Pins []Pin
	// Counters are read when the handler is read (see Store.SetHandlerCounters); they are
	// not part of the change feed.
	Counters HandlerCounters
}

// HandlerCounters are a handler file's running totals.
type HandlerCounters struct {
	Calls, Rejected, Failures, Traps, Timeouts uint64
	Instances                                  int
	// CPU is the CPU time its guest code used; Throttled, the time its calls waited for a turn
	// to run guest code (handlers.limits.guestThreads).
	CPU, Throttled time.Duration
	// Quarantine: the handler's calls fail at once after repeated traps or timeouts, until
	// QuarantinedUntil (then one is let through as a probe), for QuarantineReason.
	Quarantined             bool
	QuarantinedUntil        time.Time
	QuarantineReason        string
	Quarantines, FastFailed uint64
	// KVKeys and KVBytes are what the key-value stores of its plugin types hold.
	KVKeys  int
	KVBytes int64
	// Shadows are the shadow runs of its plugin types.
	Shadows []Shadow
}

// Pin is a plugin type served by an older revision of its handler than the file holds, after
// a rollback, until the file changes again or the operator clears it.
type Pin struct {
	PluginType string
	SHA256     string // the revision serving
	FileSHA256 string // the revision the file held when it was pinned
	Auto       bool   // an automatic rollback (the newer revision trapped or timed out)
	Reason     string
	At         time.Time
}

// Shadow is a candidate revision whose Validate runs beside the serving one, for comparison.
type Shadow struct {
	PluginType       string
	SHA256           string
	File             string
	Name, Version    string
	Since            time.Time
	Runs             uint64 // registrations validated by both
	Disagreements    uint64 // of them, those decided differently
	Failures         uint64 // candidate calls that failed
	Skipped          uint64 // registrations not shadowed: the candidate was busy
	LastDisagreement string
}

// Revision is one revision of a plugin type's handler.
type Revision struct {
	SHA256, File, Name, Version      string
	PluginTypes                      []string
	Size                             int64
	FirstLoaded                      time.Time
	Calls, Failures, Traps, Timeouts uint64 // while it served
	Serving, Pinned, InFile          bool
	RolledBack                       string // why it was rolled back automatically
}

// History is what is kept of the handler of one plugin type: its revisions, newest first, its
// pin and its shadow run.
type History struct {
	PluginType string
	Revisions  []Revision
	Pin        *Pin
	Shadow     *Shadow
}

func (h Handler) sameAs(o Handler) bool {
	return h.File == o.File && slices.Equal(h.PluginTypes, o.PluginTypes) && h.Name == o.Name &&
		h.Version == o.Version && h.SHA256 == o.SHA256 && h.Size == o.Size &&
		h.ABIVersion == o.ABIVersion && slices.Equal(h.Capabilities, o.Capabilities) &&
		h.LoadedAt.Equal(o.LoadedAt) && h.PoolSize == o.PoolSize && h.Serving == o.Serving &&
		h.LastError == o.LastError && h.LastErrorAt.Equal(o.LastErrorAt) && slices.Equal(h.Pins, o.Pins) &&
		h.GoneSince.Equal(o.GoneSince) && h.Source == o.Source && h.Reason == o.Reason
}

// PluginView is one socket as operators see it: its status, the plugin registered there (if
// any) and the handler file serving that plugin's type.
type PluginView struct {
	Status
	// Rev is the store's revision at the view's last change.
	Rev uint64
	// Desired: the socket exists. Registered: a plugin is recorded at it.
	Desired, Registered bool
	Endpoint            string
	Published           map[string]string
	RegisteredAt        time.Time
	HandlerFile         string
	HandlerSHA256       string
	// Kubelet is the plugin's standing with the kubelet when its type is forwarded; zero
	// otherwise.
	Kubelet Kubelet
	// ID is the socket's identity: the one found at the path, else the registered plugin's.
	// Its Ctime is the file system's, which a plugin cannot set back: the publisher keeps the
	// facts of the oldest sockets when the node's budget is full.
	ID Identity
}

// ChangeType says what happened to a socket's view.
type ChangeType int

// The kinds of Change.
const (
	Added ChangeType = iota + 1
	Modified
	Deleted
)

// Change is one socket's view after it changed; for Deleted, the last view, State StateGone.
type Change struct {
	Type ChangeType
	View PluginView
}

// DefaultTombstones is how many removed sockets the store remembers for subscribers that have
// not seen the removal yet. A subscriber further behind starts over with a fresh list.
const DefaultTombstones = 4096

// Store is the one store. Make it with New; the zero value is not usable.
type Store struct {
	mu  sync.Mutex
	rev uint64

	sockets map[string]Socket   // desired
	dead    map[string]Identity // sockets whose plugin stopped answering (the file stays)
	dirty   map[string]struct{}
	wake    chan struct{} // one slot: the desired state changed

	plugins     map[string]Plugin // actual
	groups      map[GroupKey]map[string]struct{}
	actualWake  chan struct{}
	status      map[string]Status
	meta        map[string]viewMeta // of every path with a status
	handlers    map[string]Handler  // by file
	servingType map[string]string   // plugin type -> file serving it
	kubelet     map[string]Kubelet  // by socket path: forwarded plugins' standing (kubelet.go)
	counters    func() map[string]HandlerCounters
	history     func(pluginType string) (History, bool)

	tombs      []tomb // removed views, in revision order
	maxTombs   int
	tombsFloor uint64 // subscribers at a revision below it missed removals
	subs       map[*Subscription]struct{}
}

type viewMeta struct{ created, rev uint64 }

type tomb struct {
	rev, created uint64
	view         PluginView
}

// New returns an empty store.
func New() *Store {
	return &Store{
		sockets:     make(map[string]Socket),
		dead:        make(map[string]Identity),
		dirty:       make(map[string]struct{}),
		wake:        make(chan struct{}, 1),
		plugins:     make(map[string]Plugin),
		groups:      make(map[GroupKey]map[string]struct{}),
		actualWake:  make(chan struct{}, 1),
		status:      make(map[string]Status),
		meta:        make(map[string]viewMeta),
		handlers:    make(map[string]Handler),
		servingType: make(map[string]string),
		kubelet:     make(map[string]Kubelet),
		maxTombs:    DefaultTombstones,
		subs:        make(map[*Subscription]struct{}),
	}
}

// SetMaxTombstones sets how many removals are remembered for subscribers (DefaultTombstones
// by default; at least 1).
func (s *Store) SetMaxTombstones(n int) {
	s.mu.Lock()
	s.maxTombs = max(n, 1)
	s.mu.Unlock()
}

// Rev returns the current revision.
func (s *Store) Rev() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rev
}

// touchLocked records that the view of path changed at a new revision.
func (s *Store) touchLocked(path string) {
	m, ok := s.meta[path]
	if !ok {
		return // no status yet: the view appears when the reconciler says something of it
	}
	s.rev++
	m.rev = s.rev
	s.meta[path] = m
	s.signalSubsLocked()
}

func (s *Store) signalSubsLocked() {
	for sub := range s.subs {
		select {
		case sub.c <- struct{}{}:
		default:
		}
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Desired returns the desired-state side of the store.
func (s *Store) Desired() *Desired { return &Desired{s} }

// Actual returns the actual-state side of the store.
func (s *Store) Actual() *Actual { return &Actual{s} }

// NewDesired returns the desired side of a new store (for tests of one side).
func NewDesired() *Desired { return New().Desired() }

// NewActual returns the actual side of a new store (for tests of one side).
func NewActual() *Actual { return New().Actual() }

// Desired is the set of sockets that exist. The watcher writes it; the reconciler reads it.
type Desired struct{ s *Store }

var _ watcher.Desired = (*Desired)(nil)

// Store returns the store this is a side of.
func (d *Desired) Store() *Store { return d.s }

// Upsert records sock. It reports whether anything changed: an unknown path, or a known path
// with a different identity. Re-recording what is already there is a no-op, so list results
// and events can both be fed in without care for duplicates.
func (d *Desired) Upsert(sock Socket) bool {
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.sockets[sock.Path]; ok && old.ID == sock.ID {
		return false
	}
	s.sockets[sock.Path] = sock
	delete(s.dead, sock.Path)
	s.markLocked(sock.Path)
	return true
}

// MarkDead records that the plugin registered from the socket at path, with identity id,
// stopped answering while its file stays: the reconciler deregisters it, and registers what
// answers at path later. It reports whether the socket is still the one with that identity.
func (d *Desired) MarkDead(path string, id Identity) bool {
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.sockets[path]; !ok || cur.ID != id {
		return false
	}
	if _, ok := s.dead[path]; ok {
		return true
	}
	s.dead[path] = id
	s.markLocked(path)
	return true
}

// Dead reports whether the socket at path is known to have nobody answering.
func (d *Desired) Dead(path string) bool {
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	_, ok := d.s.dead[path]
	return ok
}

// Remove forgets the socket at path and reports whether there was one.
func (d *Desired) Remove(path string) bool {
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.sockets[path]; !ok {
		return false
	}
	delete(s.sockets, path)
	delete(s.dead, path)
	s.markLocked(path)
	return true
}

// RemoveUnder forgets every socket below dir (not dir itself) and returns how many it removed.
func (d *Desired) RemoveUnder(dir string) int {
	prefix := strings.TrimSuffix(dir, "/") + "/"
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for p := range s.sockets {
		if strings.HasPrefix(p, prefix) {
			delete(s.sockets, p)
			delete(s.dead, p)
			s.markLocked(p)
			n++
		}
	}
	return n
}

// Get returns the socket at path.
func (d *Desired) Get(path string) (Socket, bool) {
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	sock, ok := d.s.sockets[path]
	return sock, ok
}

// List returns every socket, sorted by path.
func (d *Desired) List() []Socket {
	d.s.mu.Lock()
	out := slices.Collect(maps.Values(d.s.sockets))
	d.s.mu.Unlock()
	slices.SortFunc(out, func(a, b Socket) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// Len returns the number of sockets.
func (d *Desired) Len() int {
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	return len(d.s.sockets)
}

// Changed returns a channel that receives a value after the desired state changed. It has room
// for one value, so many changes coalesce into one wake-up; the receiver then calls TakeDirty.
func (d *Desired) Changed() <-chan struct{} { return d.s.wake }

// TakeDirty returns the paths changed since the last call (added, replaced or removed), and
// forgets them.
func (d *Desired) TakeDirty() []string {
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.dirty) == 0 {
		return nil
	}
	out := slices.Collect(maps.Keys(s.dirty))
	clear(s.dirty)
	return out
}

func (s *Store) markLocked(path string) {
	s.dirty[path] = struct{}{}
	signal(s.wake)
	s.touchLocked(path) // the view's Desired flag
}

// Actual is the set of registered plugins, keyed by socket path. The registrar writes it.
type Actual struct{ s *Store }

// Store returns the store this is a side of.
func (a *Actual) Store() *Store { return a.s }

// Add records p, replacing any plugin at the same socket path.
func (a *Actual) Add(p Plugin) {
	s := a.s
	s.mu.Lock()
	if old, ok := s.plugins[p.Socket]; ok {
		s.ungroupLocked(old)
	}
	s.plugins[p.Socket] = p
	s.groupLocked(p)
	if id, ok := s.dead[p.Socket]; ok && id == p.ID {
		delete(s.dead, p.Socket) // it answered again
	}
	s.touchLocked(p.Socket)
	s.mu.Unlock()
	signal(s.actualWake)
}

// Update applies fn to the plugin at socket, if there is one, and reports whether there was.
func (a *Actual) Update(socket string, fn func(*Plugin)) bool {
	s := a.s
	s.mu.Lock()
	p, ok := s.plugins[socket]
	if ok {
		s.ungroupLocked(p)
		fn(&p)
		p.Socket = socket
		s.plugins[socket] = p
		s.groupLocked(p)
		s.touchLocked(socket)
	}
	s.mu.Unlock()
	if ok {
		signal(s.actualWake)
	}
	return ok
}

// Remove forgets the plugin at socket and returns it.
func (a *Actual) Remove(socket string) (Plugin, bool) {
	s := a.s
	s.mu.Lock()
	p, ok := s.plugins[socket]
	if ok {
		s.ungroupLocked(p)
		delete(s.plugins, socket)
		s.touchLocked(socket)
	}
	s.mu.Unlock()
	if ok {
		signal(s.actualWake)
	}
	return p, ok
}

// Get returns the plugin at socket.
func (a *Actual) Get(socket string) (Plugin, bool) {
	a.s.mu.Lock()
	defer a.s.mu.Unlock()
	p, ok := a.s.plugins[socket]
	return p, ok
}

// List returns every registered plugin, sorted by socket path.
func (a *Actual) List() []Plugin {
	a.s.mu.Lock()
	out := slices.Collect(maps.Values(a.s.plugins))
	a.s.mu.Unlock()
	slices.SortFunc(out, func(x, y Plugin) int { return strings.Compare(x.Socket, y.Socket) })
	return out
}

// Group returns the registered instances of the plugin of type typ and name name (one per
// socket), sorted by socket.
func (a *Actual) Group(typ, name string) []Plugin {
	a.s.mu.Lock()
	set := a.s.groups[GroupKey{typ, name}]
	out := make([]Plugin, 0, len(set))
	for sock := range set {
		out = append(out, a.s.plugins[sock])
	}
	a.s.mu.Unlock()
	slices.SortFunc(out, func(x, y Plugin) int { return strings.Compare(x.Socket, y.Socket) })
	return out
}

func (s *Store) groupLocked(p Plugin) {
	k := GroupKey{p.Type, p.Name}
	set := s.groups[k]
	if set == nil {
		set = make(map[string]struct{})
		s.groups[k] = set
	}
	set[p.Socket] = struct{}{}
}

func (s *Store) ungroupLocked(p Plugin) {
	k := GroupKey{p.Type, p.Name}
	if set := s.groups[k]; set != nil {
		delete(set, p.Socket)
		if len(set) == 0 {
			delete(s.groups, k)
		}
	}
}

// Len returns the number of registered plugins.
func (a *Actual) Len() int {
	a.s.mu.Lock()
	defer a.s.mu.Unlock()
	return len(a.s.plugins)
}

// Changed returns a one-slot channel that receives a value after the actual state changed.
func (a *Actual) Changed() <-chan struct{} { return a.s.actualWake }

// SetStatus records the reconciler's status of a socket path. A status equal to the one
// recorded changes nothing.
func (s *Store) SetStatus(st Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.status[st.Path]; ok && old.Equal(st) {
		return
	}
	st.PluginVersions = slices.Clone(st.PluginVersions)
	s.status[st.Path] = st
	if _, ok := s.meta[st.Path]; !ok {
		s.meta[st.Path] = viewMeta{created: s.rev + 1}
	}
	s.touchLocked(st.Path)
}

// DeleteStatus forgets the status of a socket path that is gone: subscribers see it Deleted.
// since, if not zero, is when it went.
func (s *Store) DeleteStatus(path string, since time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.status[path]; !ok {
		return
	}
	last := s.viewLocked(path)
	last.State = StateGone
	if !since.IsZero() {
		last.Since = since
	}
	created := s.meta[path].created
	delete(s.status, path)
	delete(s.meta, path)
	delete(s.kubelet, path)
	s.rev++
	last.Rev = s.rev
	s.tombs = append(s.tombs, tomb{rev: s.rev, created: created, view: last})
	s.pruneTombsLocked()
	s.signalSubsLocked()
}

// pruneTombsLocked drops the removals every subscriber has seen, and the oldest beyond the
// cap (subscribers that had not seen those will start over).
func (s *Store) pruneTombsLocked() {
	seen := s.rev
	for sub := range s.subs {
		seen = min(seen, sub.rev)
	}
	i := 0
	for i < len(s.tombs) && s.tombs[i].rev <= seen {
		i++
	}
	if over := len(s.tombs) - i - s.maxTombs; over > 0 {
		i += over
		s.tombsFloor = s.tombs[i-1].rev
	}
	if i > 0 {
		s.tombs = slices.Delete(s.tombs, 0, i)
	}
}

// StatusOf returns the status of one socket path.
func (s *Store) StatusOf(path string) (Status, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.status[path]
	return st, ok
}

// Statuses returns the status of every socket path known, sorted by path.
func (s *Store) Statuses() []Status {
	s.mu.Lock()
	out := slices.Collect(maps.Values(s.status))
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b Status) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// SetHandlers replaces the handler set with hs (the host calls it after every change of its
// files). The views of the plugins whose type changed hands, or whose handler changed, change
// with it: a swap reaches subscribers at once.
func (s *Store) SetHandlers(hs []Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := make(map[string]Handler, len(hs))
	for _, h := range hs {
		h.Counters = HandlerCounters{}
		next[h.File] = h
	}
	same := len(next) == len(s.handlers)
	if same {
		for f, h := range next {
			if old, ok := s.handlers[f]; !ok || !old.sameAs(h) {
				same = false
				break
			}
		}
	}
	if same {
		return
	}
	prev := s.handlers
	s.handlers = next
	serving := make(map[string]string)
	for _, f := range slices.Sorted(maps.Keys(next)) {
		if h := next[f]; h.Serving {
			for _, t := range h.PluginTypes {
				serving[t] = f
			}
		}
	}
	old := s.servingType
	s.servingType = serving
	// The types whose serving handler changed: another file, none, or a new module.
	changed := make(map[string]bool)
	for t, f := range serving {
		if old[t] != f || prev[f].SHA256 != next[f].SHA256 {
			changed[t] = true
		}
	}
	for t := range old {
		if _, ok := serving[t]; !ok {
			changed[t] = true
		}
	}
	s.rev++ // the handler set itself changed
	for path := range s.meta {
		if changed[s.typeOfLocked(path)] {
			s.touchLocked(path)
		}
	}
	s.signalSubsLocked()
}

// SetHandlerCounters sets where Handlers reads each file's running totals (the host's
// counters); they change with every call, so they are read, not stored.
func (s *Store) SetHandlerCounters(fn func() map[string]HandlerCounters) {
	s.mu.Lock()
	s.counters = fn
	s.mu.Unlock()
}

// Handlers returns every handler file, sorted by file, with its counters as they are now.
func (s *Store) Handlers() []Handler {
	s.mu.Lock()
	out := slices.Collect(maps.Values(s.handlers))
	counters := s.counters
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b Handler) int { return strings.Compare(a.File, b.File) })
	if counters != nil {
		byFile := counters()
		for i := range out {
			out[i].Counters = byFile[out[i].File]
		}
	}
	return out
}

// SetHistory sets where History reads the revisions kept of a plugin type's handler (the
// host's revision store): like the counters, read when asked, not stored.
func (s *Store) SetHistory(fn func(pluginType string) (History, bool)) {
	s.mu.Lock()
	s.history = fn
	s.mu.Unlock()
}

// History returns the revisions kept of pluginType's handler, its pin and its shadow run;
// false when none are known.
func (s *Store) History(pluginType string) (History, bool) {
	s.mu.Lock()
	fn := s.history
	s.mu.Unlock()
	if fn == nil {
		return History{}, false
	}
	return fn(pluginType)
}

// HandlerOf returns the handler file serving pluginType.
func (s *Store) HandlerOf(pluginType string) (Handler, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.servingType[pluginType]
	if !ok {
		return Handler{}, false
	}
	return s.handlers[f], true
}

// typeOfLocked is the plugin type of the socket at path: its registered plugin's, or what the
// reconciler learned of it.
func (s *Store) typeOfLocked(path string) string {
	if p, ok := s.plugins[path]; ok {
		return p.Type
	}
	return s.status[path].PluginType
}

// viewLocked composes the view of path.
func (s *Store) viewLocked(path string) PluginView {
	v := PluginView{Status: s.status[path], Rev: s.meta[path].rev}
	v.Path = path
	var sock Socket
	sock, v.Desired = s.sockets[path]
	v.ID = sock.ID
	v.Kubelet = s.kubelet[path]
	if p, ok := s.plugins[path]; ok {
		if !v.Desired {
			v.ID = p.ID
		}
		v.Registered = true
		v.PluginType, v.PluginName = p.Type, p.Name
		v.PluginVersions = p.Versions
		v.Endpoint = p.Endpoint
		v.Published = p.Published
		v.RegisteredAt = p.RegisteredAt
		switch f, ok := s.servingType[p.Type]; {
		case p.HandlerSHA256 != "":
			// The revision that registered it, and published what it shows.
			v.HandlerFile, v.HandlerSHA256 = p.HandlerFile, p.HandlerSHA256
		case ok:
			v.HandlerFile, v.HandlerSHA256 = f, s.handlers[f].SHA256
		}
	}
	return v
}

// Plugins returns the view of every socket path the reconciler knows, sorted by path.
func (s *Store) Plugins() []PluginView {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pluginsLocked()
}

func (s *Store) pluginsLocked() []PluginView {
	out := make([]PluginView, 0, len(s.status))
	for path := range s.status {
		out = append(out, s.viewLocked(path))
	}
	slices.SortFunc(out, func(a, b PluginView) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// Plugin returns the view of one socket path.
func (s *Store) Plugin(path string) (PluginView, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.status[path]; !ok {
		return PluginView{}, false
	}
	return s.viewLocked(path), true
}

// Subscription follows the store's changes. C receives a value after any change (many changes
// coalesce into one); Next then returns what changed since the last call. Close it when done.
type Subscription struct {
	s   *Store
	c   chan struct{}
	rev uint64 // guarded by s.mu
}

// Subscribe returns the views as they are now and a subscription that follows them from here.
func (s *Store) Subscribe() (*Subscription, []PluginView) {
	sub := &Subscription{s: s, c: make(chan struct{}, 1)}
	s.mu.Lock()
	defer s.mu.Unlock()
	sub.rev = s.rev
	s.subs[sub] = struct{}{}
	return sub, s.pluginsLocked()
}

// C is the subscription's wake-up channel.
func (sub *Subscription) C() <-chan struct{} { return sub.c }

// Next returns the changes since the previous call (or Subscribe), in revision order, one per
// socket: its newest view, Deleted with its last view if it went. When the subscriber fell so
// far behind that removals were forgotten (more than the store's tombstones), reset is true
// and list holds every view instead: forget what you hold.
func (sub *Subscription) Next() (changes []Change, reset bool, list []PluginView) {
	s := sub.s
	s.mu.Lock()
	defer s.mu.Unlock()
	from := sub.rev
	sub.rev = s.rev
	if from < s.tombsFloor {
		return nil, true, s.pluginsLocked()
	}
	for path, m := range s.meta {
		if m.rev <= from {
			continue
		}
		typ := Modified
		if m.created > from {
			typ = Added
		}
		changes = append(changes, Change{Type: typ, View: s.viewLocked(path)})
	}
	for _, t := range s.tombs {
		if t.rev > from && t.created <= from { // one it never saw added is not news
			changes = append(changes, Change{Type: Deleted, View: t.view})
		}
	}
	slices.SortFunc(changes, func(a, b Change) int {
		switch {
		case a.View.Rev < b.View.Rev:
			return -1
		case a.View.Rev > b.View.Rev:
			return 1
		}
		return 0
	})
	s.pruneTombsLocked()
	return changes, false, nil
}

// Close ends the subscription.
func (sub *Subscription) Close() {
	sub.s.mu.Lock()
	delete(sub.s.subs, sub)
	sub.s.pruneTombsLocked()
	sub.s.mu.Unlock()
}

// Subscribers returns how many subscriptions are open.
func (s *Store) Subscribers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.subs)
}
