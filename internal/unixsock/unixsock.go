// Package unixsock listens on the daemon's own unix sockets (the admin API, the metrics)
// safely: private permissions from the first moment, a stale socket from a dead daemon
// removed, a live one or anything else in the way refused.
package unixsock

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// MaxPath is the longest path a unix socket can be bound to on Linux (sun_path is 108 bytes
// with the terminating NUL).
const MaxPath = 107

// Sentinel errors, matched with errors.Is.
var (
	// ErrInUse: another process answers on the socket (another daemon?).
	ErrInUse = errors.New("another process is serving on the socket")
	// ErrNotSocket: something that is not a socket is in the way at the path.
	ErrNotSocket = errors.New("not a socket")
)

// Listen listens on a unix socket at path with mode 0600, creating its directory (0700) when
// missing and removing a stale socket left at path. The socket is bound in a private
// directory beside path, made 0600 and renamed into place, so it is never reachable with
// looser permissions, whatever the umask. cleanup closes the listener and removes the socket
// if it is still the one made here.
func Listen(path string) (_ net.Listener, cleanup func(), err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("creating the directory of socket %s: %w", path, err)
	}
	if err := removeStale(path); err != nil {
		return nil, nil, err
	}
	tmpDir, err := os.MkdirTemp(dir, ".s")
	if err != nil {
		return nil, nil, fmt.Errorf("socket %s: %w", path, err)
	}
	defer os.RemoveAll(tmpDir)
	bind := filepath.Join(tmpDir, "s")
	if len(bind) > MaxPath {
		bind = path // no room for the detour; chmod right after bind instead
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: bind, Net: "unix"})
	if err != nil {
		return nil, nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	l.SetUnlinkOnClose(false)
	fail := func(err error) (net.Listener, func(), error) {
		l.Close()
		os.Remove(bind)
		return nil, nil, fmt.Errorf("socket %s: %w", path, err)
	}
	if err := os.Chmod(bind, 0o600); err != nil {
		return fail(err)
	}
	if bind != path {
		if err := os.Rename(bind, path); err != nil {
			return fail(err)
		}
	}
	mine, err := os.Lstat(path)
	if err != nil {
		return fail(err)
	}
	return l, func() {
		l.Close()
		if cur, err := os.Lstat(path); err == nil && os.SameFile(mine, cur) {
			os.Remove(path)
		}
	}, nil
}

// removeStale removes the socket at path if nothing answers on it. A live socket, or
// anything that is not a socket, is left alone and reported.
func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("socket %s: %w", path, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%w: %s exists and is not a socket (mode %s); remove it or choose another path",
			ErrNotSocket, path, fi.Mode())
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("%w: %s (is another wasmhost running?)", ErrInUse, path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("probing the existing socket %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing the stale socket %s: %w", path, err)
	}
	return nil
}
