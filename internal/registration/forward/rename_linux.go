//go:build linux

package forward

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// renameNoReplace renames from to to, failing with an error matching os.ErrExist when to
// exists: a file wasmhost did not make is never replaced. The kubelet sees the socket appear
// at to (inotify's IN_MOVED_TO, which fsnotify reports as Create) and never the temporary
// dot-name (its creation is ignored, and a rename is not a removal).
func renameNoReplace(from, to string) error {
	err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EEXIST) {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: os.ErrExist}
	}
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) {
		return linkUnlink(from, to) // a kernel or file system without renameat2's flags
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
	}
	return nil
}
