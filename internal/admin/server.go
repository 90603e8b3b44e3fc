package admin

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	adminv1 "github.com/wasmhost/wasmhost/admin/v1"
	"github.com/wasmhost/wasmhost/internal/unixsock"
)

// Server serves the admin API. Make it with New and start it with Run.
type Server struct {
	cfg      Config
	log      *slog.Logger
	started  time.Time
	stopping chan struct{} // closed when Run begins to shut down
	ran      atomic.Bool
	watchers atomic.Int64
	resets   atomic.Uint64
	// captures holds a slot for each CaptureSessions answer being built (MaxCaptureAnswers).
	captures chan struct{}
}

// New returns a server for cfg. It does not touch the socket; Run does.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if cfg.Store == nil {
		return nil, fmt.Errorf("%w: Config.Store is nil", ErrConfig)
	}
	if len(cfg.SocketPath) > unixsock.MaxPath {
		return nil, fmt.Errorf("%w: SocketPath %s is %d bytes long; a unix socket path has at most %d",
			ErrConfig, cfg.SocketPath, len(cfg.SocketPath), unixsock.MaxPath)
	}
	return &Server{
		cfg:      cfg,
		log:      cfg.Logger,
		started:  time.Now(),
		stopping: make(chan struct{}),
		captures: make(chan struct{}, MaxCaptureAnswers),
	}, nil
}

// SocketPath returns the socket the server serves on.
func (s *Server) SocketPath() string { return s.cfg.SocketPath }

// Resets returns how many times a watch stream fell so far behind that it started over.
func (s *Server) Resets() uint64 { return s.resets.Load() }

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

	gs := grpc.NewServer(grpc.WaitForHandlers(true))
	adminv1.RegisterAdminServer(gs, rpcServer{s: s})

	var wg sync.WaitGroup
	serveErr := make(chan error, 1)
	wg.Go(func() { serveErr <- gs.Serve(lis) })
	s.log.Info("admin API listening", "socket", s.cfg.SocketPath)

	var runErr error
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		runErr = fmt.Errorf("admin: serving on %s: %w", s.cfg.SocketPath, err)
	}
	close(s.stopping)
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
