//go:build unix

package host

import (
	"fmt"
	"os"
	"syscall"
)

// checkNotShared refuses a handler file or directory that group or other may write, or that
// another user than the daemon's owns.
func checkNotShared(path, what string, fi os.FileInfo) error {
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("%w: %s %s has mode %v: writable by group or other (set Config.AllowInsecure to load it anyway)",
			ErrInsecure, what, path, perm)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return fmt.Errorf("%w: %s %s is owned by uid %d, not the daemon's uid %d (set Config.AllowInsecure to load it anyway)",
			ErrInsecure, what, path, st.Uid, os.Getuid())
	}
	return nil
}

// ensurePrivateDir creates dir (mode 0700) if needed and checks it is private.
func ensurePrivateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("host: cache directory: %w", err)
	}
	return checkPrivateDir(dir)
}

// checkPrivateDir refuses a directory that group or other may access in any way, or that
// another user owns: compiled code read from it runs unchecked.
func checkPrivateDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("host: cache directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("host: cache directory %s is not a directory", dir)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%w: cache directory %s has mode %v: group or other may access it (want 0700)", ErrInsecure, dir, perm)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return fmt.Errorf("%w: cache directory %s is owned by uid %d, not the daemon's uid %d", ErrInsecure, dir, st.Uid, os.Getuid())
	}
	return nil
}

// fileIdent tells whether a file may have changed since it was last read.
type fileIdent struct {
	dev, ino, uid uint64
	size          int64
	mtime         int64
	mode          os.FileMode
}

func identOf(fi os.FileInfo) fileIdent {
	id := fileIdent{size: fi.Size(), mtime: fi.ModTime().UnixNano(), mode: fi.Mode()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.dev, id.ino, id.uid = uint64(st.Dev), uint64(st.Ino), uint64(st.Uid)
	}
	return id
}

// openNonBlocking opens path for reading with O_NONBLOCK, so that opening a FIFO (or a device)
// that was swapped in after the path was stat'ed returns at once instead of waiting for a
// writer. For a regular file the flag changes nothing.
func openNonBlocking(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}
