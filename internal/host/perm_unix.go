//go:build unix

package host

import (
	"os"
	"syscall"
)

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
