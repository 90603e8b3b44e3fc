package reconciler

import (
	"container/heap"
	"sync"
	"time"
)

// notifier hands status changes to Config.OnStatusChange from a goroutine of its own, so that
// the loop never waits for the callback. Changes of one socket that the callback has not seen
// yet are coalesced into the newest.
type notifier struct {
	mu      sync.Mutex
	pending map[string]SocketStatus
	order   []string // paths in pending, in the order they first became pending
	wake    chan struct{}
}

func newNotifier() *notifier {
	return &notifier{pending: make(map[string]SocketStatus), wake: make(chan struct{}, 1)}
}

func (n *notifier) put(st SocketStatus) {
	n.mu.Lock()
	if _, ok := n.pending[st.Path]; !ok {
		n.order = append(n.order, st.Path)
	}
	n.pending[st.Path] = st
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

func (n *notifier) take() []SocketStatus {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.order) == 0 {
		return nil
	}
	out := make([]SocketStatus, len(n.order))
	for i, p := range n.order {
		out[i] = n.pending[p]
	}
	n.order = nil
	clear(n.pending)
	return out
}

// run delivers changes until stop is closed, then delivers what is left and returns.
func (n *notifier) run(stop <-chan struct{}, fn func(SocketStatus)) {
	for {
		select {
		case <-n.wake:
		case <-stop:
			for _, st := range n.take() {
				fn(st)
			}
			return
		}
		for _, st := range n.take() {
			fn(st)
		}
	}
}

// retry is one entry of the backoff schedule.
type retry struct {
	due  time.Time
	path string
}

// retryHeap orders retries by due time. Entries are never updated in place: a socket whose
// schedule changed leaves a stale entry, which is dropped when it reaches the top.
type retryHeap []retry

func (h retryHeap) Len() int           { return len(h) }
func (h retryHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h retryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *retryHeap) Push(x any)        { *h = append(*h, x.(retry)) }
func (h *retryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

func (h *retryHeap) push(e retry) { heap.Push(h, e) }
func (h *retryHeap) pop() retry   { return heap.Pop(h).(retry) }
