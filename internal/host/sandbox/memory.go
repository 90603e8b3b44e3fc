package sandbox

import (
	"context"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Instances keep the memory their guest grew, up to MemoryLimit each, and a pool holds up to
// PoolSize of them: 16 instances of 64 MiB took a daemon to 1,057 MB, which it still held
// 93 s after every plugin had left. So the host counts the memory of every live instance
// (read after each call), and when they hold more than Limits.InstanceMemory together, the
// idle ones are closed, largest first, until they are back under it; the memory of closed
// instances is handed back to the system at once (debug.FreeOSMemory, at most every
// freeMemoryEvery), not when the Go runtime's scavenger gets to it. Instances in a call are
// not closed: the ceiling holds for what is idle, and a call's own instance may grow past it
// by at most MemoryLimit.

// freeMemoryEvery is how often at most the host returns freed instance memory to the system
// (a forced garbage collection each time).
const freeMemoryEvery = time.Second

// freeMemoryAfter is how much instance memory must have been closed before it is returned.
const freeMemoryAfter = 8 << 20

// instanceMemory is the accounting of the memory of live instances.
type instanceMemory struct {
	freed atomic.Int64 // bytes of closed instances not yet returned to the system

	mu       sync.Mutex
	lastFree time.Time
	pending  bool
}

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
	in.m.sb.memory.freed.Add(in.mem)
	in.mem = 0
	in.m.sb.returnMemory()
}

// moduleClosed takes what the instances of a closed module still counted off the count.
func (sb *Sandbox) moduleClosed(m *Module) {
	sb.memory.freed.Add(m.mem.Swap(0))
	sb.returnMemory()
}

// trimMemory closes idle instances, largest first, while the live ones hold more than
// Limits.InstanceMemory.
func (sb *Sandbox) trimMemory() {
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
	_ = victim.mod.Close(context.Background())
	victim.closed()
	<-m.slots
	m.sb.log.Debug("idle handler instance closed: instances over handlers.limits.instanceMemory", "handler", m.file, "memory", victim.mem)
	return true
}

// returnMemory hands the memory of closed instances back to the system, in the background and
// at most every freeMemoryEvery, once at least freeMemoryAfter bytes were freed.
func (sb *Sandbox) returnMemory() {
	if sb.memory.freed.Load() < freeMemoryAfter {
		return
	}
	sb.memory.mu.Lock()
	if sb.memory.pending {
		sb.memory.mu.Unlock()
		return
	}
	sb.memory.pending = true
	wait := time.Until(sb.memory.lastFree.Add(freeMemoryEvery))
	sb.memory.mu.Unlock()
	sb.GoAsync(func() {
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-sb.ctx.Done():
				t.Stop()
			}
		}
		sb.memory.freed.Store(0)
		debug.FreeOSMemory()
		sb.memory.mu.Lock()
		sb.memory.lastFree, sb.memory.pending = time.Now(), false
		sb.memory.mu.Unlock()
	})
}
