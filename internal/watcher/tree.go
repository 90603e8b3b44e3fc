package watcher

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
)

// handleEvent applies one fsnotify event. What it does depends on what is at the path now,
// not on the event, except that a Remove or Rename first forgets the old name.
func (w *Watcher) handleEvent(ev fsnotify.Event) {
	if !ev.Has(fsnotify.Create | fsnotify.Remove | fsnotify.Rename) {
		// Chmod and Write: nothing a plugin's socket does needs them. But a directory that
		// could not be watched (or read) may have become readable: look at it again now,
		// rather than at the next periodic re-list.
		if ev.Has(fsnotify.Chmod) {
			p := filepath.Clean(ev.Name)
			if st, ok := w.dirs[p]; ok && !st.watched && p != w.dir {
				w.events.Add(1)
				w.log.Debug("an unwatched directory changed mode; looking again", "path", p)
				w.look(p)
			}
		}
		return
	}
	w.events.Add(1)
	p := filepath.Clean(ev.Name)
	if p == w.dir {
		w.rootEvent(ev)
		return
	}
	if !w.below(p) || ignored(filepath.Base(p)) {
		return
	}
	if ev.Has(fsnotify.Remove | fsnotify.Rename) {
		w.forget(p)
	}
	w.look(p)
}

// below reports whether p is strictly inside the socket directory.
func (w *Watcher) below(p string) bool {
	return strings.HasPrefix(p, strings.TrimSuffix(w.dir, "/")+"/")
}

// ignored reports whether a name below the socket directory is skipped: dot-names are.
func ignored(name string) bool { return strings.HasPrefix(name, ".") }

// look makes the desired state agree with what is at p now.
func (w *Watcher) look(p string) {
	fi, err := os.Lstat(p)
	switch {
	case err != nil:
		if !errors.Is(err, fs.ErrNotExist) {
			w.log.Warn("cannot stat path; treating it as gone", "socket", p, "err", err)
		}
		w.forget(p)
	case fi.Mode().Type() == fs.ModeSocket:
		if _, ok := w.dirs[p]; ok {
			w.forget(p) // a directory was replaced by a socket
		}
		w.upsertNew(p, fi)
	case fi.IsDir():
		w.desired.Remove(p) // a socket was replaced by a directory
		if st, ok := w.dirs[p]; ok && !sameFile(st, fi) {
			w.forget(p) // a directory replaced by another one
		}
		w.scan(p, fi, nil)
	default:
		w.forget(p) // a regular file, fifo, symlink…: never desired
	}
}

// forget removes what was known at p: the socket at p, or, if p was a directory, every socket
// below it and the watches on it and its subdirectories. It is cheap for a path that was
// neither, so that a burst of removals stays linear.
func (w *Watcher) forget(p string) {
	if w.desired.Remove(p) {
		w.log.Debug("socket removed", "socket", p)
	}
	if _, ok := w.dirs[p]; ok {
		if n := w.desired.RemoveUnder(p); n > 0 {
			w.log.Debug("directory removed with its sockets", "path", p, "sockets", n)
		}
		w.dropDirs(p)
	}
}

// dropDirs forgets the directory p and every directory below it, removing their watches. A
// watch whose directory was renamed keeps following the directory under its new name, with
// events reported under the old one, so it must go before the new name is watched.
func (w *Watcher) dropDirs(p string) {
	prefix := strings.TrimSuffix(p, "/") + "/"
	for d, st := range w.dirs {
		if d != p && !strings.HasPrefix(d, prefix) {
			continue
		}
		if st.watched {
			w.f.Remove(d)
		}
		delete(w.dirs, d)
	}
}

// upsertNew records the socket at p as an event sees it: it keeps the identity already desired
// only if device, inode and change time are all the same (the same file seen twice, by a scan
// and an event); anything else is a new socket, such as a plugin that restarted and bound the
// same path again.
func (w *Watcher) upsertNew(p string, fi fs.FileInfo) {
	id := identityOf(fi)
	if old, ok := w.desired.Get(p); ok && old.ID == id {
		return
	}
	w.desired.Upsert(Socket{Path: p, ID: id, Seen: time.Now()})
	w.log.Debug("socket found", "socket", p, "id", id)
}

// upsertListed records the socket at p as a re-list sees it: the identity already desired is
// kept when device and inode match, so that a chmod after bind does not make a new plugin. It
// reports whether Desired changed.
func (w *Watcher) upsertListed(p string, fi fs.FileInfo) bool {
	id := identityOf(fi)
	if old, ok := w.desired.Get(p); ok && old.ID.Dev == id.Dev && old.ID.Ino == id.Ino {
		return false
	}
	return w.desired.Upsert(Socket{Path: p, ID: id, Seen: time.Now()})
}

// scan watches the directory p and every directory below it, each before reading it, so that a
// socket created meanwhile is either read or reported by an event. Sockets found go into
// found, or straight into Desired when found is nil. It reports whether p could be watched.
func (w *Watcher) scan(p string, fi fs.FileInfo, found map[string]fs.FileInfo) bool {
	type dir struct {
		path string
		fi   fs.FileInfo
	}
	rootWatched := true
	stack := []dir{{p, fi}}
	for len(stack) > 0 {
		d := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if !w.watchDir(d.path, d.fi) && d.path == p {
			rootWatched = false
		}
		entries, err := readDir(d.path)
		if err != nil {
			if d.path == w.dir && errors.Is(err, fs.ErrNotExist) {
				continue // the caller finds out by the stat it does next
			}
			if !errors.Is(err, fs.ErrNotExist) {
				w.log.Warn("cannot read directory", "path", d.path, "err", err)
			}
			continue
		}
		for _, e := range entries {
			name := e.Name()
			if ignored(name) {
				continue
			}
			t := e.Type()
			if t != fs.ModeSocket && t != fs.ModeDir {
				continue
			}
			child := d.path + "/" + name
			cfi, err := e.Info() // lstat: the type may have changed since the listing
			if err != nil {
				continue // gone already; its Remove event follows
			}
			switch {
			case cfi.Mode().Type() == fs.ModeSocket:
				if found != nil {
					found[child] = cfi
				} else {
					w.upsertNew(child, cfi)
				}
			case cfi.IsDir():
				stack = append(stack, dir{child, cfi})
			}
		}
	}
	return rootWatched
}

// readDir lists a directory without sorting it.
func readDir(p string) ([]fs.DirEntry, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.ReadDir(-1)
}

// watchDir records the directory p and adds a watch on it unless it has one. A failure is
// logged and counted; outside a re-list it asks for one, which lists the directory even
// though it cannot be watched. It reports whether p is watched.
func (w *Watcher) watchDir(p string, fi fs.FileInfo) bool {
	st, known := w.dirs[p]
	if known && st.watched && sameFile(st, fi) {
		return true
	}
	if known && !sameFile(st, fi) {
		w.dropDirs(p)
		known = false
	}
	add := w.f.Add
	if w.addWatch != nil {
		add = w.addWatch
	}
	err := add(p)
	w.dirs[p] = dirStateOf(fi, err == nil)
	if err == nil {
		return true
	}
	w.errs.Add(1)
	w.watchFailures.Add(1)
	if w.inRelist {
		w.unwatched++
	}
	if errors.Is(err, syscall.ENOSPC) {
		w.log.Warn("cannot watch directory: inotify watch limit reached; raise the sysctl fs.inotify.max_user_watches (its sockets are found only by the periodic re-list until then)",
			"path", p, "err", err)
	} else {
		w.log.Warn("cannot watch directory (its sockets are found only by re-lists until then)", "path", p, "err", err)
	}
	if !w.inRelist {
		w.f.Request(fmt.Sprintf("cannot watch %s: %v", p, err), relistDelay)
	}
	return false
}

// rootEvent handles an event on the socket directory itself, reported by the watch on its
// parent or by its own watch. The directory's own IN_DELETE_SELF cannot be relied on: a socket
// that a live plugin still has bound pins the directory, and the kernel reports the deletion
// only when the last such socket is closed. An event about a directory that looks like the one
// watched (same device and inode) is watched anew and re-listed, not taken as gone.
func (w *Watcher) rootEvent(ev fsnotify.Event) {
	if !ev.Has(fsnotify.Remove | fsnotify.Rename) {
		return
	}
	st, ok := w.dirs[w.dir]
	if fi, err := os.Stat(w.dir); ok && err == nil && fi.IsDir() && sameFile(st, fi) {
		// The same device and inode number: a stale or duplicate event, or the directory
		// was removed and made again at once and the new one got the old one's inode number
		// (tmpfs and ext4 hand freed numbers out again), its watch still on the old one.
		// Watch it anew and list it, without taking its sockets out of Desired first: the
		// re-list keeps what is there and removes what is not, so a stale event costs a
		// re-list and no plugin's registration.
		w.dropDirs(w.dir)
		w.f.Request("an event says the socket directory went, and one of the same inode number is there", 0)
		return
	}
	if !ok && w.f.pending && w.f.urgent {
		return // already handled; the re-list that recreates it is due
	}
	w.rootGone(ev.Op.String())
}

// rootGone handles the socket directory itself being removed or renamed: every socket leaves
// Desired, every watch goes, and a re-list right away recreates and watches the directory
// (retried with backoff while that fails).
func (w *Watcher) rootGone(op string) {
	n := w.desired.RemoveUnder(w.dir)
	w.dropDirs(w.dir)
	w.log.Warn("socket directory removed; recreating it", "op", op, "sockets_removed", n)
	w.f.Request("socket directory removed", 0)
}

// relist lists the whole tree and makes Desired equal to it: it upserts every socket found and
// removes every desired socket not found. Directories are watched as they are listed. It fails
// only when the socket directory itself cannot be created, watched or read; it still lists
// what it can.
func (w *Watcher) relist(reason string, urgent bool) (err error) {
	start := time.Now()
	w.inRelist = true
	w.unwatched = 0
	defer func() { w.inRelist = false }()

	// Forget the directories that are gone or replaced, so that their stale watches do not
	// swallow the watches of the directories listed below.
	for d, st := range w.dirs {
		fi, serr := os.Lstat(d)
		if d == w.dir {
			fi, serr = os.Stat(d)
		}
		if serr != nil || !fi.IsDir() || !sameFile(st, fi) {
			w.dropDirs(d)
		}
	}

	fi, err := os.Stat(w.dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err = ensureDir(w.dir); err == nil {
			w.log.Warn("socket directory was missing; recreated it")
			fi, err = os.Stat(w.dir)
		}
	}
	if err == nil && !fi.IsDir() {
		err = fmt.Errorf("%w: %s is not a directory", ErrSocketDir, w.dir)
	}
	if err == nil {
		if perr := w.f.WatchParent(); perr != nil {
			w.errs.Add(1)
			w.watchFailures.Add(1)
			w.log.Warn("cannot watch the socket directory's parent; its removal is noticed only by the periodic re-list",
				"path", filepath.Dir(w.dir), "err", perr)
		}
	}
	found := make(map[string]fs.FileInfo, w.desired.Len())
	listed := false
	if err == nil {
		listed = true
		if !w.scan(w.dir, fi, found) {
			err = fmt.Errorf("%w: cannot watch %s", ErrSocketDir, w.dir)
		}
		// The directory may have gone while it was read.
		if _, serr := os.Stat(w.dir); serr != nil {
			err = fmt.Errorf("%w: %w", ErrSocketDir, serr)
			listed = false
			clear(found)
			w.dropDirs(w.dir)
		}
	}

	var added, removed int
	for p, sfi := range found {
		if w.upsertListed(p, sfi) {
			added++
		}
	}
	for _, s := range w.desired.List() {
		if _, ok := found[s.Path]; !ok && w.desired.Remove(s.Path) {
			removed++
		}
	}
	w.relists.Add(1)
	if listed {
		w.syncedOnce.Do(func() { close(w.synced) })
	}

	attrs := []any{"reason", reason, "sockets", len(found), "added", added, "removed", removed,
		"unwatched_dirs", w.unwatched, "took", time.Since(start)}
	switch {
	case reason == relistStart:
		w.log.Info("watching socket directory", attrs...)
	case !urgent && added+removed > 0:
		w.log.Warn("periodic re-list repaired the desired state (events were missed, or directories are unwatched)", attrs...)
	case urgent:
		w.log.Info("re-list done", attrs...)
	default:
		w.log.Debug("re-list done", attrs...)
	}
	return err
}

// identityOf returns what tells this file apart from another one at the same path.
func identityOf(fi fs.FileInfo) Identity {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return statIdentity(st)
	}
	return Identity{Ctime: fi.ModTime().UnixNano()}
}
