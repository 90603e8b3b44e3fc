package sandbox

import (
	"context"
	"time"
)

// Idle pools shrink. A module's pool grows to PoolSize instances when calls come at once, and
// each instance keeps the memory its guest grew (up to MemoryLimit: a handler can make each of
// its instances hold 64 MiB). An instance idle for Limits.IdleInstanceTimeout is closed, down
// to one kept warm, so that a burst, or a hostile handler, does not hold that memory for ever.

// Shrink closes the instances idle since before now-timeout, keeping at least one live
// instance; it returns how many it closed.
func (m *Module) Shrink(now time.Time, timeout time.Duration) int {
	if !m.Enter() {
		return 0
	}
	defer m.Leave()
	var keep []*instance
	closed := 0
	for range len(m.idle) {
		var in *instance
		select {
		case in = <-m.idle:
		default:
		}
		if in == nil {
			break
		}
		if now.Sub(in.idleSince) >= timeout && len(m.slots) > 1 {
			_ = in.mod.Close(context.Background())
			in.closed()
			<-m.slots
			closed++
			continue
		}
		keep = append(keep, in)
	}
	for _, in := range keep {
		m.idle <- in
	}
	return closed
}
