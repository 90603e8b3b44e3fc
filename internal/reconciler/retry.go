package reconciler

import (
	"container/heap"
	"time"
)

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
