package watcher

import (
	"io/fs"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// DirFollower is a Follower for a user that decides on what a directory holds, never on the
// events: the host's follower of the handler directory (host.DirFollower, which it satisfies;
// the daemon hands FollowDir to the host, so that the host links no file watcher). Its events
// are folded into one signal, Changed, and its errors come through Errors, in fsnotify's types
// neither; the rest is the Follower's.
type DirFollower struct {
	f       *Follower
	changed chan struct{} // one slot: something may have changed since the last receive
	errs    chan error
	stop    chan struct{}
	done    sync.WaitGroup // the forwarding goroutine
	once    sync.Once
	// rootGone: an event said the directory itself was removed or renamed. Root then reports
	// it not watched, even if the directory there has the same device and inode number: made
	// again at once, it can get the freed number back while the watch stays on the old one.
	rootGone atomic.Bool
}

// FollowDir starts a DirFollower of the directory dir (absolute and clean), watching nothing
// yet, whose passes are due every resync after one that succeeded and every retry after one
// that failed. Close it when done.
func FollowDir(dir string, resync, retry time.Duration) (*DirFollower, error) {
	f, err := NewFollower(dir, Pacing{Resync: resync, MinBackoff: retry, MaxBackoff: retry})
	if err != nil {
		return nil, err
	}
	d := &DirFollower{f: f, changed: make(chan struct{}, 1), errs: make(chan error), stop: make(chan struct{})}
	d.done.Add(1)
	go d.forward()
	return d, nil
}

// forward folds the events into changed, and passes the errors on, until Close. When fsnotify
// closes its channels (it stopped), changed is closed.
func (d *DirFollower) forward() {
	defer d.done.Done()
	for {
		select {
		case <-d.stop:
			return
		case ev, ok := <-d.f.Events:
			if !ok {
				close(d.changed)
				return
			}
			if filepath.Clean(ev.Name) == d.f.dir && ev.Has(fsnotify.Remove|fsnotify.Rename) {
				d.rootGone.Store(true)
			}
			select {
			case d.changed <- struct{}{}:
			default: // a wake-up is pending already: this event is folded into it
			}
		case err, ok := <-d.f.Errors:
			if !ok {
				close(d.changed)
				return
			}
			select {
			case d.errs <- err:
			case <-d.stop:
				return
			}
		}
	}
}

// Changed receives when something may have changed in the directory or its parent since the
// last receive (any number of events); it is closed if the inotify instance stopped.
func (d *DirFollower) Changed() <-chan struct{} { return d.changed }

// Errors delivers the inotify instance's errors: each means that events may have been missed.
func (d *DirFollower) Errors() <-chan error { return d.errs }

// Close stops forwarding and closes the Follower; it returns once the forwarding goroutine has
// exited. Further calls do nothing.
func (d *DirFollower) Close() error {
	var err error
	d.once.Do(func() {
		close(d.stop)
		err = d.f.Close()
		d.done.Wait()
	})
	return err
}

// The rest is the Follower's.

func (d *DirFollower) Due() <-chan time.Time                            { return d.f.Due() }
func (d *DirFollower) Take() (reason string, urgent bool, requests int) { return d.f.Take() }
func (d *DirFollower) Request(reason string, delay time.Duration)       { d.f.Request(reason, delay) }
func (d *DirFollower) Done(err error) (retryIn time.Duration)           { return d.f.Done(err) }

// Root is the Follower's, but for a directory an event said was removed or renamed since the
// last call: that one is reported not watched (rootGone), so that its user watches it anew.
func (d *DirFollower) Root() (fi fs.FileInfo, watched bool, err error) {
	fi, watched, err = d.f.Root()
	if d.rootGone.Swap(false) {
		watched = false
	}
	return fi, watched, err
}
func (d *DirFollower) WatchRoot(fi fs.FileInfo) (moved bool, err error) { return d.f.WatchRoot(fi) }
func (d *DirFollower) UnwatchRoot() bool                                { return d.f.UnwatchRoot() }
func (d *DirFollower) WatchParent() error                               { return d.f.WatchParent() }
