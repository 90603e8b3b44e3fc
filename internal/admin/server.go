package admin

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/wasmhost/wasmhost/admin/v1"
	"github.com/wasmhost/wasmhost/internal/unixsock"
)

// Server serves the admin API. Make it with New, start it with Run, and feed it with Publish.
// Publish and Resync may be called at any time, before, during and after Run.
type Server struct {
	cfg     Config
	log     *slog.Logger
	started time.Time

	mu       sync.Mutex
	cache    map[string]Plugin   // what watchers were told, by socket path
	touched  map[string]struct{} // sockets published while a resync reads the Source; nil otherwise
	watchers map[*watcher]struct{}

	resync   chan struct{} // one slot: a pending resync
	stopping chan struct{} // closed when Run begins to shut down
	ran      atomic.Bool
	resets   atomic.Uint64
}

// New returns a server for cfg. It does not touch the socket; Run does.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if cfg.Source == nil {
		return nil, fmt.Errorf("%w: Config.Source is nil", ErrConfig)
	}
	if len(cfg.SocketPath) > unixsock.MaxPath {
		return nil, fmt.Errorf("%w: SocketPath %s is %d bytes long; a unix socket path has at most %d",
			ErrConfig, cfg.SocketPath, len(cfg.SocketPath), unixsock.MaxPath)
	}
	return &Server{
		cfg:      cfg,
		log:      cfg.Logger,
		started:  time.Now(),
		cache:    make(map[string]Plugin),
		watchers: make(map[*watcher]struct{}),
		resync:   make(chan struct{}, 1),
		stopping: make(chan struct{}),
	}, nil
}

// SocketPath returns the socket the server serves on.
func (s *Server) SocketPath() string { return s.cfg.SocketPath }

// Publish tells watchers that p changed: ADDED if they did not know its socket, MODIFIED if
// they did and something differs, DELETED if p.State is StateGone. A p that says nothing new
// is not sent. Publish never blocks on a watcher; it costs a map update and one non-blocking
// channel send per watcher. The server keeps p: the caller must not modify its slices or map
// afterwards.
//
// The daemon calls it from the reconciler's OnStatusChange with the plugin as Source.Plugins
// would now return it.
func (s *Server) Publish(p Plugin) {
	if p.Socket == "" {
		return
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.touched != nil {
		s.touched[p.Socket] = struct{}{}
	}
	s.applyLocked(p, now)
}

// Resync asks the server to compare what watchers were told with Source.Plugins soon, and to
// send them the differences; call it after a change that Publish did not report (a handler
// reloaded with a new file, say). It returns at once; resyncs asked for meanwhile coalesce.
// It has an effect only while Run runs.
func (s *Server) Resync() {
	select {
	case s.resync <- struct{}{}:
	default:
	}
}

func (s *Server) applyLocked(p Plugin, now time.Time) {
	old, had := s.cache[p.Socket]
	var typ adminv1.EventType
	switch {
	case p.State == StateGone:
		if !had {
			return
		}
		delete(s.cache, p.Socket)
		typ = adminv1.EventType_EVENT_TYPE_DELETED
		// The last known state, marked gone.
		last := old
		last.State = StateGone
		if !p.LastTransition.IsZero() {
			last.LastTransition = p.LastTransition
		}
		p = last
	case !had:
		s.cache[p.Socket] = p
		typ = adminv1.EventType_EVENT_TYPE_ADDED
	case old.equal(p):
		return
	default:
		s.cache[p.Socket] = p
		typ = adminv1.EventType_EVENT_TYPE_MODIFIED
	}
	if len(s.watchers) == 0 {
		return
	}
	// One message for every watcher: gRPC only reads it.
	ev := &adminv1.PluginEvent{Type: typ, Plugin: pluginToProto(p), Time: timestamppb.New(now)}
	for w := range s.watchers {
		if w.dropped {
			continue
		}
		select {
		case w.events <- ev:
		default:
			w.dropped = true
			close(w.overflow)
			s.resets.Add(1)
		}
	}
}

// resyncOnce makes the cache (and so the watchers) agree with Source.Plugins. Publishes that
// happen while it reads the Source win over what it read.
func (s *Server) resyncOnce() {
	s.mu.Lock()
	s.touched = make(map[string]struct{})
	s.mu.Unlock()

	list := s.cfg.Source.Plugins()
	now := time.Now()

	s.mu.Lock()
	defer s.mu.Unlock()
	touched := s.touched
	s.touched = nil
	seen := make(map[string]struct{}, len(list))
	for _, p := range list {
		if p.Socket == "" || p.State == StateGone {
			continue
		}
		seen[p.Socket] = struct{}{}
		if _, ok := touched[p.Socket]; ok {
			continue
		}
		s.applyLocked(p, now)
	}
	for sock := range s.cache {
		if _, ok := seen[sock]; ok {
			continue
		}
		if _, ok := touched[sock]; ok {
			continue
		}
		s.applyLocked(Plugin{Socket: sock, State: StateGone}, now)
	}
}

// Run serves the admin API on the socket until ctx is done, then stops: open calls get
// ShutdownTimeout to finish (watch streams end at once with UNAVAILABLE), then the
// connections are closed. It removes the socket file it made and returns when every goroutine
// it started has exited. A server runs once.
func (s *Server) Run(ctx context.Context) error {
	if !s.ran.CompareAndSwap(false, true) {
		return ErrRunning
	}
	lis, cleanup, err := unixsock.Listen(s.cfg.SocketPath)
	if err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	defer cleanup()

	// The first watcher must see the list as it is, not wait for the first tick.
	s.resyncOnce()

	gs := grpc.NewServer(grpc.WaitForHandlers(true))
	adminv1.RegisterAdminServer(gs, rpcServer{s: s})

	loopCtx, cancelLoop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	serveErr := make(chan error, 1)
	wg.Go(func() { serveErr <- gs.Serve(lis) })
	wg.Go(func() { s.resyncLoop(loopCtx) })
	s.log.Info("admin API listening", "socket", s.cfg.SocketPath)

	var runErr error
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		runErr = fmt.Errorf("admin: serving on %s: %w", s.cfg.SocketPath, err)
	}
	close(s.stopping)
	cancelLoop()

	stopped := make(chan struct{})
	wg.Go(func() {
		gs.GracefulStop()
		close(stopped)
	})
	timer := time.NewTimer(s.cfg.ShutdownTimeout)
	select {
	case <-stopped:
	case <-timer.C:
		s.log.Warn("admin API: calls still open after the shutdown timeout; closing connections",
			"socket", s.cfg.SocketPath, "timeout", s.cfg.ShutdownTimeout)
		gs.Stop()
	}
	timer.Stop()
	wg.Wait()
	return runErr
}

func (s *Server) resyncLoop(ctx context.Context) {
	var tick <-chan time.Time
	if s.cfg.ResyncInterval > 0 {
		t := time.NewTicker(s.cfg.ResyncInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		case <-s.resync:
		}
		s.resyncOnce()
	}
}

// counts returns the plugins by state, for GetStatus.
func countByState(ps []Plugin) map[string]uint32 {
	out := make(map[string]uint32)
	for _, p := range ps {
		out[string(p.State)]++
	}
	return out
}

func sortedPlugins(ps []Plugin) []Plugin {
	ps = slices.Clone(ps)
	slices.SortFunc(ps, func(a, b Plugin) int { return strings.Compare(a.Socket, b.Socket) })
	return ps
}

func (s *Server) snapshotLocked() []Plugin {
	return sortedPlugins(slices.Collect(maps.Values(s.cache)))
}
