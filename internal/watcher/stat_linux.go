//go:build linux

package watcher

import (
	"syscall"

	"github.com/wasmhost/wasmhost/internal/statecache"
)

// statIdentity takes device, inode and change time (nanoseconds) from a stat.
func statIdentity(st *syscall.Stat_t) statecache.Identity {
	return statecache.Identity{Dev: uint64(st.Dev), Ino: uint64(st.Ino), Ctime: st.Ctim.Nano()}
}
