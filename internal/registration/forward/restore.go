package forward

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/wasmhost/wasmhost/internal/state"
)

// RestoreCheck is how often the forwarder looks for forward sockets someone else removed when
// no event told it: while the kubelet's directory cannot be watched (it is not there yet), and
// after the watch lost events. With a watch, a removal is seen at once.
const RestoreCheck = 10 * time.Second

// watch makes again, until ctx is done or the forwarder is closed, every forward socket that
// someone else removed from the kubelet's directory (a clean-up script, an operator): the
// kubelet deregistered the plugin when its socket went, and registers it again when it comes
// back, while the plugin stays registered with wasmhost. A file someone else put in its place
// is left alone.
func (f *Forwarder) watch(ctx context.Context) {
	var events <-chan fsnotify.Event
	var errs <-chan error
	w, err := fsnotify.NewWatcher()
	if err == nil {
		defer w.Close()
	}
	watching := false
	addWatch := func() {
		if w == nil || watching {
			return
		}
		if err := w.Add(f.cfg.Dir); err == nil {
			watching = true
			events, errs = w.Events, w.Errors
		}
	}
	addWatch()
	tick := time.NewTicker(RestoreCheck)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.done:
			return
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
				f.restoreAt(filepath.Clean(ev.Name))
			}
		case _, ok := <-errs: // lost events (overflow): look at every socket
			if !ok {
				errs = nil
				continue
			}
			f.restoreAll()
		case <-tick.C:
			addWatch()
			f.restoreAll()
		}
	}
}

// restoreAll makes again every placed forward socket that is not there.
func (f *Forwarder) restoreAll() {
	f.mu.Lock()
	paths := make([]string, 0, len(f.byPlugin))
	for _, e := range f.byPlugin {
		paths = append(paths, e.path)
	}
	f.mu.Unlock()
	for _, p := range paths {
		f.restoreAt(p)
	}
}

// restoreAt makes the forward socket at path again if it is one of the forwarder's, placed,
// and gone. It holds the lock throughout, so that Open, Remove and the kubelet's calls see
// the entry before or after, never half made again.
func (f *Forwarder) restoreAt(path string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	var e *entry
	for _, c := range f.byPlugin {
		if c.path == path && c.placed {
			e = c
			break
		}
	}
	if e == nil {
		return
	}
	if _, err := os.Lstat(e.path); !errors.Is(err, fs.ErrNotExist) {
		return // still there, or a file someone else put there (left alone)
	}
	log := f.log.With("plugin_type", e.info.Type, "plugin", e.info.Name, "socket", e.info.Socket, "forward_socket", e.path)
	lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: e.bound, Net: "unix"})
	if err != nil {
		log.Warn("the forward socket was removed by someone else and could not be made again; the kubelet has deregistered the plugin until its next registration", "error", err)
		return
	}
	lis.SetUnlinkOnClose(false)
	fail := func(err error) {
		lis.Close()
		os.Remove(e.bound)
		log.Warn("the forward socket was removed by someone else and could not be made again; the kubelet has deregistered the plugin until its next registration", "error", err)
	}
	if err := os.Chmod(e.bound, 0o600); err != nil {
		fail(err)
		return
	}
	id, err := identity(e.bound)
	if err != nil || !id.socket {
		fail(err)
		return
	}
	if err := f.writeRecord(record{Path: e.path, Temp: e.bound, Dev: id.dev, Ino: id.ino}); err != nil {
		fail(err)
		return
	}
	f.serving.Add(1)
	go func() {
		defer f.serving.Done()
		_ = f.srv.Serve(lis)
	}()
	if err := renameNoReplace(e.bound, e.path); err != nil {
		fail(err) // Serve returns: its listener is closed
		// The record names the socket before again: it is still open, and Remove removes it.
		_ = f.writeRecord(record{Path: e.path, Temp: e.bound, Dev: e.dev, Ino: e.ino})
		return
	}
	e.lis.Close() // the old one, whose file is gone
	e.lis, e.dev, e.ino = lis, id.dev, id.ino
	if placed, err := identity(e.path); err == nil && placed.dev == id.dev && placed.ino == id.ino {
		e.ctime = placed.ctime
	}
	e.kubelet = state.Kubelet{State: state.KubeletPending, Socket: e.path, Since: f.cfg.Now()}
	f.setStatus(e.info.Socket, e.kubelet)
	log.Info("the forward socket was removed by someone else: made again, for the kubelet to register the plugin again")
}
