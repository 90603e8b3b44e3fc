package sandbox

import (
	"context"
	"os"
	"sync"

	"github.com/tetratelabs/wazero/experimental"
	"golang.org/x/sys/unix"
)

// Instances keep the memory their guest grew, up to MemoryLimit each, and a pool holds up to
// PoolSize of them: 16 instances of 64 MiB took a daemon to 1,057 MB, which it still held
// 93 s after every plugin had left. So the host counts the memory of every live instance
// (read after each call), and when they hold more than Limits.InstanceMemory together, the
// idle ones are closed, largest first, until they are back under it. Instances in a call are
// not closed: the ceiling holds for what is idle, and a call's own instance may grow past it
// by at most MemoryLimit.
//
// Closing an instance hands its memory back to the system before the close returns, because
// its linear memory is not in the Go heap (linearMemory). By default wazero (v1.12) keeps it
// in a Go []byte: memory.grow appends to it, which copies it and leaves the old buffer as
// garbage (a memory grown a page at a time to 64 MiB leaves about 256 MiB of it), and a
// closed instance's memory is the system's again only once a garbage collection has found
// it and the scavenger has returned it. An idle daemon whose heap is 1 GB does not collect
// for a long time (the next collection waits for the heap to double), and forcing one
// (debug.FreeOSMemory) is a stop of every goroutine and a scavenge of the whole heap on the
// serving path: 16 instances of 64 MiB over a 512 MiB ceiling left 1.2-1.35 GB resident for
// good (issue 27), and a shadow that grew to 64 MiB and trapped moved the serving revision's
// p99 from 2 ms to 223 ms.

// memSize returns the size of the instance's memory now.
func (in *instance) memSize() int64 {
	if in.mod == nil || in.mod.Memory() == nil {
		return 0
	}
	return int64(in.mod.Memory().Size())
}

// noteMemory records the instance's memory size after a call (or its instantiation).
func (in *instance) noteMemory() {
	n := in.memSize()
	d := n - in.mem
	in.mem = n
	in.m.mem.Add(d)
}

// memoryUsed returns the memory of the live instances of every open module, as last read.
func (sb *Sandbox) memoryUsed() int64 {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	var n int64
	for m := range sb.modules {
		n += m.mem.Load()
	}
	return n
}

// closed takes a closed instance's memory off the count.
func (in *instance) closed() {
	in.m.mem.Add(-in.mem)
	in.mem = 0
}

// trimMemory closes idle instances, largest first, while the live ones hold more than
// Limits.InstanceMemory. One trim runs at a time: calls that return at once would each see
// the total over the ceiling and each close an instance, more than it takes.
func (sb *Sandbox) trimMemory() {
	sb.trimMu.Lock()
	defer sb.trimMu.Unlock()
	limit := int64(sb.cfg.Limits.InstanceMemory)
	for sb.memoryUsed() > limit {
		sb.mu.Lock()
		var biggest *Module
		var size int64
		for m := range sb.modules {
			if len(m.idle) > 0 && m.mem.Load() > size {
				biggest, size = m, m.mem.Load()
			}
		}
		sb.mu.Unlock()
		if biggest == nil || !biggest.closeIdle() {
			return
		}
	}
}

// closeIdle closes the largest of the module's idle instances; false if none was idle.
func (m *Module) closeIdle() bool {
	if !m.Enter() {
		return false
	}
	defer m.Leave()
	var all []*instance
	for range len(m.idle) {
		select {
		case in := <-m.idle:
			all = append(all, in)
		default:
		}
	}
	if len(all) == 0 {
		return false
	}
	big := 0
	for i, in := range all {
		if in.mem > all[big].mem {
			big = i
		}
	}
	victim := all[big]
	for i, in := range all {
		if i != big {
			m.idle <- in
		}
	}
	size := victim.mem
	_ = victim.mod.Close(context.Background())
	victim.closed()
	<-m.slots
	m.sb.log.Debug("idle handler instance closed: instances over handlers.limits.instanceMemory", "handler", m.file, "memory", size)
	return true
}

// linearMemory is the linear memory of one instance, a mapping of its own outside the Go
// heap (wazero's experimental.LinearMemory): its address space is reserved whole when the
// instance is made, for the most it may grow to, and inaccessible, which costs no memory;
// growing makes more of it accessible in place (no copy, and the kernel's pages are already
// zero); closing the instance unmaps it. Guest code may still run on it when the instance is
// closed under a call (a module closed by force, a guest's proc_exit): the unmapping then
// waits for the last user to leave, so that no access ever meets an unmapped page.
type linearMemory struct {
	mu    sync.Mutex
	max   int    // the most it may grow to, in bytes
	res   []byte // the reservation of max bytes; nil once unmapped
	size  int    // its first size bytes are accessible
	heap  []byte // the memory in the Go heap instead, when the reservation failed
	users int    // guest code running on it: a call, or the instantiation
	freed bool   // the instance was closed: unmap when the last user leaves
}

// newLinearMemory reserves a linear memory that may grow to max bytes. It has one user, the
// instantiation, which leaves once the instance's start functions have run. When the
// address space cannot be reserved, the memory is in the Go heap, as wazero's own.
func newLinearMemory(max uint64) *linearMemory {
	lm := &linearMemory{max: int(max), users: 1}
	res, err := unix.Mmap(-1, 0, int(max), unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err == nil {
		lm.res = res
	}
	return lm
}

// allocator returns what makes the instance's linear memory when wazero instantiates it
// (experimental.WithMemoryAllocator), at most MemoryLimit whatever the module declares; it
// keeps the memory in in.lm.
func (in *instance) allocator() experimental.MemoryAllocator {
	return experimental.MemoryAllocatorFunc(func(_, max uint64) experimental.LinearMemory {
		in.lm = newLinearMemory(min(max, uint64(in.m.sb.cfg.MemoryLimit)))
		return in.lm
	})
}

// Reallocate implements experimental.LinearMemory: the memory's first size bytes, or nil
// when it cannot grow to size.
func (lm *linearMemory) Reallocate(size uint64) []byte {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	n := int(size)
	switch {
	case lm.freed || size > uint64(lm.max):
		return nil
	case lm.res == nil:
		if n > len(lm.heap) {
			lm.heap = append(lm.heap, make([]byte, n-len(lm.heap))...)
		}
		return lm.heap[:n:n]
	}
	if n > lm.size {
		// Wasm pages (64 KiB) are whole pages of the system's; round up all the same.
		ps := os.Getpagesize()
		end := min((n+ps-1)/ps*ps, len(lm.res))
		if err := unix.Mprotect(lm.res[lm.size:end], unix.PROT_READ|unix.PROT_WRITE); err != nil {
			return nil
		}
		lm.size = end
	}
	return lm.res[:n:n]
}

// Free implements experimental.LinearMemory: wazero calls it when it closes the instance.
func (lm *linearMemory) Free() {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	lm.freed = true
	if lm.users == 0 {
		lm.unmapLocked()
	}
}

// enter counts a user in: guest code is about to run on the memory.
func (lm *linearMemory) enter() {
	if lm == nil {
		return
	}
	lm.mu.Lock()
	lm.users++
	lm.mu.Unlock()
}

// leave counts a user out; the last one out of a freed memory unmaps it.
func (lm *linearMemory) leave() {
	if lm == nil {
		return
	}
	lm.mu.Lock()
	defer lm.mu.Unlock()
	if lm.users--; lm.users == 0 && lm.freed {
		lm.unmapLocked()
	}
}

func (lm *linearMemory) unmapLocked() {
	lm.heap = nil
	if lm.res != nil {
		_ = unix.Munmap(lm.res)
		lm.res, lm.size = nil, 0
	}
}
