// Package watcher finds plugin sockets: it watches a socket directory and all its
// subdirectories with inotify (through fsnotify) and keeps a Desired equal to the set
// of unix sockets that exist there.
//
// It watches before it lists, treats list results and events alike as idempotent upserts, reads
// a rename as the removal of the old name, ignores chmod and write events, and answers every
// watcher error (a queue overflow included) with a full re-list that repairs the desired state.
// A slow periodic re-list repairs anything missed even so, such as sockets in a directory that
// could not be watched because the inotify watch limit was reached.
//
// Names beginning with "." are ignored, files and directories alike, and so is everything that
// is not a unix socket or a directory; symbolic links below the socket directory are not
// followed.
//
// Its engine, Follower, is the host's too: the handler directory is followed on it, through
// FollowDir, which the daemon gives the host (the host imports no file watcher).
//
// This package is part of the daemon, not a stable API.
package watcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Sentinel errors. Callers decide with errors.Is.
var (
	// ErrConfig: the Config is unusable (a required field is missing or wrong).
	ErrConfig = errors.New("watcher: invalid config")
	// ErrSocketDir: the socket directory could not be created or is not a directory.
	ErrSocketDir = errors.New("watcher: socket directory unusable")
	// ErrInotify: the inotify instance could not be created.
	ErrInotify = errors.New("watcher: cannot start inotify")
	// ErrStarted: Run was called a second time on the same Watcher.
	ErrStarted = errors.New("watcher: Run already called")
)

// DefaultResync is the period of the full re-list when Config.Resync is zero.
const DefaultResync = 5 * time.Minute

const (
	// relistDelay is how long a re-list asked for by an error waits, so that a burst of errors
	// becomes one re-list.
	relistDelay = 100 * time.Millisecond
	// minBackoff and maxBackoff bound the wait between attempts to re-list when the socket
	// directory itself cannot be created, watched or read.
	minBackoff = 100 * time.Millisecond
	maxBackoff = 10 * time.Second
	// relistStart is the reason of the first re-list.
	relistStart = "start"
)

// Config configures a Watcher.
type Config struct {
	// Dir is the socket directory. It is created (mode 0755, with parents) if it is missing,
	// and again whenever it is removed while the watcher runs. Required; made absolute.
	Dir string
	// Desired receives the sockets found. Required. The watcher removes from it every socket it
	// does not find under Dir, so it must not be shared with another writer.
	Desired Desired
	// Resync is the period of the full re-list that repairs anything the events missed.
	// Defaults to DefaultResync (5 minutes) when zero; a negative value disables it (re-lists
	// then happen only at start and after errors).
	Resync time.Duration
	// Logger receives the watcher's logs. Defaults to discarding them when nil.
	Logger *slog.Logger
}

// Stats are the watcher's counters, for metrics and the admin endpoint.
type Stats struct {
	Relists       uint64 // full re-lists done, the first one at start included
	Errors        uint64 // errors from fsnotify (overflows included) and failures to add a watch
	WatchFailures uint64 // failures to add a watch (a subset of Errors)
	Events        uint64 // fsnotify events handled (chmod and write ones not counted)
	Watches       int64  // directories watched now, the socket directory's parent included
}

// Watcher keeps a Desired equal to the unix sockets under a directory. Create it
// with New and start it with Run.
type Watcher struct {
	dir     string
	desired Desired
	resync  time.Duration
	log     *slog.Logger

	synced     chan struct{}
	syncedOnce sync.Once
	started    atomic.Bool

	relists       atomic.Uint64
	errs          atomic.Uint64
	watchFailures atomic.Uint64
	events        atomic.Uint64
	watches       atomic.Int64

	// Test seams, set before Run: the fsnotify constructor and the way a watch is added.
	newFSW   func() (*fsnotify.Watcher, error)
	addWatch func(path string) error

	// Owned by the Run goroutine.
	f         *Follower
	dirs      map[string]dirState // directories seen under dir (dir itself included)
	inRelist  bool                // a failure to watch does not ask for another re-list
	unwatched int                 // directories whose watch failed during the current re-list
}

// New checks cfg and creates the socket directory if it is missing. The watcher starts with
// Run.
func New(cfg Config) (*Watcher, error) {
	if cfg.Dir == "" {
		return nil, fmt.Errorf("%w: Dir is empty", ErrConfig)
	}
	if cfg.Desired == nil {
		return nil, fmt.Errorf("%w: Desired is nil", ErrConfig)
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("%w: Dir %q: %w", ErrConfig, cfg.Dir, err)
	}
	if err := ensureDir(dir); err != nil {
		return nil, err
	}
	resync := cfg.Resync
	if resync == 0 {
		resync = DefaultResync
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Watcher{
		dir:     dir,
		desired: cfg.Desired,
		resync:  resync,
		log:     logger.With("dir", dir),
		synced:  make(chan struct{}),
		newFSW:  fsnotify.NewWatcher,
	}, nil
}

// ensureDir creates dir (0755, with parents) unless it exists, and checks that it is a
// directory (a symbolic link to one is accepted).
func ensureDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("%w: create %s: %w", ErrSocketDir, dir, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSocketDir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: %s is not a directory", ErrSocketDir, dir)
	}
	return nil
}

// Dir returns the absolute path of the socket directory.
func (w *Watcher) Dir() string { return w.dir }

// Synced returns a channel that is closed once the first full listing of the socket directory
// is done: from then on Desired holds every socket that existed at start.
func (w *Watcher) Synced() <-chan struct{} { return w.synced }

// Stats returns the watcher's counters. It is safe to call at any time.
func (w *Watcher) Stats() Stats {
	return Stats{
		Relists:       w.relists.Load(),
		Errors:        w.errs.Load(),
		WatchFailures: w.watchFailures.Load(),
		Events:        w.events.Load(),
		Watches:       w.watches.Load(),
	}
}

// Run watches the socket directory and feeds Desired until ctx is done. It adds the watch on
// the directory, lists the tree, then follows events. It returns nil once ctx is done, after
// the inotify instance is closed and every goroutine it started has exited; it returns an error
// only if it cannot start. Run may be called once.
func (w *Watcher) Run(ctx context.Context) error {
	if !w.started.CompareAndSwap(false, true) {
		return ErrStarted
	}
	f, err := newFollower(w.dir, Pacing{Resync: w.resync, MinBackoff: minBackoff, MaxBackoff: maxBackoff}, w.newFSW, &w.watches)
	if err != nil {
		return err
	}
	w.f = f
	w.dirs = make(map[string]dirState)
	defer func() {
		if err := f.Close(); err != nil {
			w.log.Warn("closing inotify", "err", err)
		}
	}()

	w.runRelist(relistStart, false, 0)
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-f.Events:
			if !ok {
				return fmt.Errorf("%w: fsnotify closed its event channel", ErrInotify)
			}
			w.handleEvent(ev)
		case err, ok := <-f.Errors:
			if !ok {
				return fmt.Errorf("%w: fsnotify closed its error channel", ErrInotify)
			}
			w.errs.Add(1)
			w.log.Debug("fsnotify error", "err", err)
			f.Request("fsnotify error: "+err.Error(), relistDelay)
		case <-f.Due():
			w.runRelist(f.Take())
		}
	}
}

// runRelist re-lists now and schedules the next one: a retry with backoff if it failed, else
// the periodic resync.
func (w *Watcher) runRelist(reason string, urgent bool, requests int) {
	if urgent {
		w.log.Warn("re-listing socket directory", "reason", reason, "requests", requests)
	}
	err := w.relist(reason, urgent)
	if retry := w.f.Done(err); err != nil && retry > 0 {
		w.log.Warn("re-list failed; retrying", "err", err, "retry_in", retry)
	}
}
