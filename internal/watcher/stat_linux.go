//go:build linux

package watcher

import (
	"syscall"
)

// statIdentity takes device, inode and change time (nanoseconds) from a stat.
func statIdentity(st *syscall.Stat_t) Identity {
	return Identity{Dev: uint64(st.Dev), Ino: uint64(st.Ino), Ctime: st.Ctim.Nano()}
}
