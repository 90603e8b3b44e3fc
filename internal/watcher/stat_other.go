//go:build !linux

package watcher

import (
	"syscall"

	"github.com/wasmhost/wasmhost/internal/statecache"
)

// statIdentity takes device and inode from a stat. The daemon targets Linux; elsewhere the
// change time is not read and is left zero, so a socket replaced at the same path is told
// apart only by its inode.
func statIdentity(st *syscall.Stat_t) statecache.Identity {
	return statecache.Identity{Dev: uint64(st.Dev), Ino: uint64(st.Ino)}
}
