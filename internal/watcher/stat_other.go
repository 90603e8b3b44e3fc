//go:build !linux

package watcher

import (
	"syscall"
)

// statIdentity takes device and inode from a stat. The daemon targets Linux; elsewhere the
// change time is not read and is left zero, so a socket replaced at the same path is told
// apart only by its inode.
func statIdentity(st *syscall.Stat_t) Identity {
	return Identity{Dev: uint64(st.Dev), Ino: uint64(st.Ino)}
}
