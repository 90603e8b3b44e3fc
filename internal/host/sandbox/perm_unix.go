//go:build unix

package sandbox

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// CheckNotShared refuses a handler file or directory that group or other may write, or that
// another user than the daemon's owns.
func CheckNotShared(path, what string, fi os.FileInfo) error {
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("%w: %s %s has mode %v: writable by group or other (set handlers.allowInsecure or --allow-insecure-handlers to load it anyway)",
			ErrInsecure, what, path, perm)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return fmt.Errorf("%w: %s %s is owned by uid %d, not the daemon's uid %d (set handlers.allowInsecure or --allow-insecure-handlers to load it anyway)",
			ErrInsecure, what, path, st.Uid, os.Getuid())
	}
	return nil
}

// EnsurePrivateDir creates dir (mode 0700) if needed and checks it is private.
func EnsurePrivateDir(dir string) error {
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

// openNonBlocking opens path for reading with O_NONBLOCK, so that opening a FIFO (or a device)
// that was swapped in after the path was stat'ed returns at once instead of waiting for a
// writer. For a regular file the flag changes nothing.
func openNonBlocking(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}

// ReadOwnFile reads a file of the daemon's own (an index, a kept revision, a compile cache
// entry) as carefully as a handler file: opened without blocking, and only if it is a regular
// file, so that a FIFO or device put in its place is an error, not a read that never returns.
// At most limit bytes are read (limit < 0: no limit).
func ReadOwnFile(path string, limit int64) ([]byte, error) {
	f, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if limit < 0 {
		return io.ReadAll(f)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(b)) > limit {
		err = fmt.Errorf("%s: over %d bytes", path, limit)
	}
	return b, err
}

// openRegular opens path for reading without blocking, and refuses what is not a regular file.
func openRegular(path string) (*os.File, error) {
	f, err := openNonBlocking(path)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s: not a regular file (%s)", path, fileKind(fi.Mode()))
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// sweepIrregular removes what is neither a directory nor a regular file under dir (a FIFO, a
// socket, a device, a symbolic link): the compile cache is read by wazero, which would block on
// a FIFO. It returns what it removed.
func sweepIrregular(dir string) []string {
	var removed []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Type().IsRegular() {
			return nil
		}
		if os.Remove(p) == nil {
			removed = append(removed, p)
		}
		return nil
	})
	return removed
}
