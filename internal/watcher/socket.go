package watcher

import (
	"fmt"
	"time"
)

// Identity tells apart two sockets that had the same path at different times. The kubelet stamps
// a wall-clock time on every create event; wasmhost uses what the file system says: device and
// inode, plus the change time at which the socket was first seen. A socket replaced at the same
// path (a plugin restart) gets a new Identity even when the file system reuses the inode.
type Identity struct {
	Dev   uint64
	Ino   uint64
	Ctime int64 // nanoseconds since the epoch, as first seen
}

// String renders the identity compactly for logs.
func (id Identity) String() string {
	return fmt.Sprintf("%d:%d@%d", id.Dev, id.Ino, id.Ctime)
}

// Socket is what the watcher reports of a unix socket that exists under the directory: one
// entry of the desired state.
type Socket struct {
	Path string
	ID   Identity
	Seen time.Time // when the watcher first saw this identity at this path
}

// Desired is where the watcher keeps the sockets it finds: the desired state. The watcher only
// writes what changed, and reads back what it wrote to tell a re-list's removals. Every method
// must be safe for concurrent use; internal/state's store implements it.
type Desired interface {
	// Upsert records s and reports whether anything changed (an unknown path, or a known
	// path with another identity).
	Upsert(s Socket) bool
	// Remove forgets the socket at path and reports whether there was one.
	Remove(path string) bool
	// RemoveUnder forgets every socket below dir and returns how many there were.
	RemoveUnder(dir string) int
	Get(path string) (Socket, bool)
	// List returns every socket recorded.
	List() []Socket
	Len() int
}
