package watcher

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Follower is the engine under both of the daemon's followers of a directory, the Watcher of
// the socket tree and the host's follower of the handler directory: an inotify instance whose
// events and errors only say "look again", the watch on the directory's parent (the reliable
// report of the directory deleted, renamed over or made again, which its own IN_DELETE_SELF is
// not), and the one timer of the passes that look at everything: soon after an error (requests
// folded together), with backoff after a pass that failed, and a slow periodic resync. What a
// pass looks at and decides is its user's. Only one goroutine may use a Follower.
type Follower struct {
	// Events and Errors are fsnotify's: any of them means that something may have changed.
	Events <-chan fsnotify.Event
	Errors <-chan error

	dir          string
	pacing       Pacing
	fsw          *fsnotify.Watcher
	root, parent dirState // the directory WatchRoot watches, and its parent
	watches      *atomic.Int64
	timer        *time.Timer
	pending      bool
	urgent       bool // asked for by Request, or a retry; not the periodic resync
	at           time.Time
	reason       string
	folded       int // requests folded into the pending pass
	backoff      time.Duration
}

// Pacing is when a Follower's passes are due besides those requested.
type Pacing struct {
	Resync                 time.Duration // after a pass that succeeded; none if not positive
	MinBackoff, MaxBackoff time.Duration // after one that failed, doubled on each failure in a row
}

// NewFollower starts an inotify instance for the directory dir (absolute and clean), watching
// nothing yet. Close it when done.
func NewFollower(dir string, p Pacing) (*Follower, error) {
	return newFollower(dir, p, fsnotify.NewWatcher, new(atomic.Int64))
}

func newFollower(dir string, p Pacing, newFSW func() (*fsnotify.Watcher, error), watches *atomic.Int64) (*Follower, error) {
	fsw, err := newFSW()
	if errors.Is(err, syscall.EMFILE) {
		return nil, fmt.Errorf("%w: %w (too many inotify instances: raise the sysctl fs.inotify.max_user_instances)", ErrInotify, err)
	} else if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInotify, err)
	}
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &Follower{Events: fsw.Events, Errors: fsw.Errors, dir: dir, pacing: p, fsw: fsw, watches: watches, timer: t}, nil
}

// Close stops the timer and closes the inotify instance, waiting for fsnotify's goroutine.
func (f *Follower) Close() error {
	f.timer.Stop()
	f.watches.Store(0)
	return f.fsw.Close()
}

// Add watches the directory p.
func (f *Follower) Add(p string) error {
	err := f.fsw.Add(p)
	if err == nil {
		f.watches.Add(1)
	}
	return err
}

// Remove drops the watch on p; fsnotify may have dropped it already (p was deleted).
func (f *Follower) Remove(p string) {
	f.watches.Add(-1)
	_ = f.fsw.Remove(p)
}

// WatchParent watches the directory's parent unless the one there is watched already (a parent
// replaced is watched anew). Without it, the directory's removal is found only by a pass.
func (f *Follower) WatchParent() error {
	parent := filepath.Dir(f.dir)
	fi, err := os.Stat(parent)
	if parent == f.dir || err != nil || (f.parent.watched && sameFile(f.parent, fi)) {
		return nil
	}
	if f.parent.watched {
		f.Remove(parent) // replaced: its old watch reports nothing useful any more
		f.parent = dirState{}
	}
	if err := f.Add(parent); err != nil {
		return err
	}
	f.parent = dirStateOf(fi, true)
	return nil
}

// Root stats the followed directory (a symbolic link followed) and reports whether it is the
// one WatchRoot watches, or another (deleted and made again, renamed over).
func (f *Follower) Root() (fi fs.FileInfo, watched bool, err error) {
	fi, err = os.Stat(f.dir)
	return fi, err == nil && fi.IsDir() && f.root.watched && sameFile(f.root, fi), err
}

// WatchRoot moves the watch to fi, the directory at the followed path now, from the one watched
// before (inotify's watch follows the old directory, or went with it). It reports whether
// another directory had been watched.
func (f *Follower) WatchRoot(fi fs.FileInfo) (moved bool, err error) {
	moved = f.UnwatchRoot()
	f.root = dirStateOf(fi, false)
	if err := f.Add(f.dir); err != nil {
		return moved, err
	}
	f.root.watched = true
	return moved, nil
}

// UnwatchRoot drops the watch on the followed directory, which is gone, and reports whether a
// directory had been watched.
func (f *Follower) UnwatchRoot() bool {
	if f.root.watched {
		f.Remove(f.dir)
	}
	had := f.root != dirState{}
	f.root = dirState{}
	return had
}

// Due delivers when a pass is due; call Take then.
func (f *Follower) Due() <-chan time.Time { return f.timer.C }

// Request asks for a pass within delay. Requests made while a requested pass is already due by
// then fold into it.
func (f *Follower) Request(reason string, delay time.Duration) {
	if f.pending && f.urgent && !f.at.After(time.Now().Add(delay)) {
		f.folded++
		return
	}
	if !f.pending || !f.urgent {
		f.folded, f.reason = 0, reason
	}
	f.folded++
	f.schedule(true, f.reason, delay)
}

// Take says why the pass now due is due: requested or a retry (urgent, with the number of
// requests it answers), or the periodic resync.
func (f *Follower) Take() (reason string, urgent bool, requests int) {
	reason, urgent, requests = f.reason, f.urgent, f.folded
	f.pending, f.urgent, f.folded = false, false, 0
	return reason, urgent, requests
}

// Done schedules the pass after one that just ran, unless one was requested meanwhile: a retry
// with backoff if it failed (it returns the wait), else the periodic resync.
func (f *Follower) Done(err error) (retryIn time.Duration) {
	switch {
	case f.pending && f.urgent:
	case err != nil:
		f.backoff = min(max(f.backoff*2, f.pacing.MinBackoff), f.pacing.MaxBackoff)
		f.folded = 1
		f.schedule(true, "retry: "+err.Error(), f.backoff)
		return f.backoff
	default:
		f.backoff = 0
		if f.pacing.Resync > 0 {
			f.schedule(false, "periodic resync", f.pacing.Resync)
		}
	}
	return 0
}

func (f *Follower) schedule(urgent bool, reason string, delay time.Duration) {
	f.pending, f.urgent, f.reason, f.at = true, urgent, reason, time.Now().Add(delay)
	f.timer.Reset(delay)
}

// Drain takes the events queued already (at most 4096), for a user that decides on what the
// directory holds, not on the events: a burst (a file written in pieces) is one look. It
// reports false if the event channel is closed.
func (f *Follower) Drain() bool {
	for range 4096 {
		select {
		case _, ok := <-f.Events:
			if !ok {
				return false
			}
		default:
			return true
		}
	}
	return true
}

// dirState is what is known of a directory: its identity and whether it is watched.
type dirState struct {
	dev, ino uint64
	watched  bool
}

func dirStateOf(fi fs.FileInfo, watched bool) dirState {
	id := identityOf(fi)
	return dirState{dev: id.Dev, ino: id.Ino, watched: watched}
}

// sameFile reports whether fi is the directory recorded in st.
func sameFile(st dirState, fi fs.FileInfo) bool {
	id := identityOf(fi)
	return st.dev == id.Dev && st.ino == id.Ino
}
