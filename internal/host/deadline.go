package host

import (
	"container/heap"
	"errors"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A call's deadline is enforced by the host's deadline thread: one goroutine locked to an OS
// thread of its own, asleep in ppoll(2) until the earliest deadline, which then closes the
// instance of every call past its deadline itself (wazero stops the guest at its next loop or
// call check, and the call returns an exit error). A Go timer does the same through the
// runtime's timer heap and a goroutine, and fires late when the Ps are busy: measured on 2
// cores with one looping call, a plain goroutine waiting on the call's context saw its
// deadline 3.1 ms late at p99 (0.4 ms p50), and with four looping calls 8.3 ms; the timers of
// a P running guest code wait for another P, and guest code cannot be preempted. The thread
// asks the kernel directly, and needs a P only for the few instructions that close an
// instance. The call's context deadline stays as the fallback.
type deadlines struct {
	mu      sync.Mutex
	h       deadlineHeap
	efd     int       // eventfd: wakes the thread for an earlier deadline, or to stop
	wakeAt  time.Time // when the sleeping thread wakes by itself; zero: not before it is woken
	stopped bool
	done    chan struct{}
}

// deadline is one call's deadline.
type deadline struct {
	at    time.Time
	fire  func()
	idx   int           // in the heap; -1 once out of it
	fired bool          // taken out of the heap to fire
	done  chan struct{} // closed when fire has returned
}

type deadlineHeap []*deadline

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h deadlineHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *deadlineHeap) Push(x any) {
	d := x.(*deadline)
	d.idx = len(*h)
	*h = append(*h, d)
}
func (h *deadlineHeap) Pop() any {
	old := *h
	d := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	d.idx = -1
	return d
}

// startDeadlines starts the deadline thread; stop ends it.
func startDeadlines() (*deadlines, error) {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, err
	}
	ds := &deadlines{efd: efd, done: make(chan struct{})}
	go ds.run()
	return ds, nil
}

// at arranges for fire to be called at t, on the deadline thread, unless cancel is called
// first. cancel reports whether fire was called (it returns once fire has returned).
func (ds *deadlines) at(t time.Time, fire func()) (cancel func() (fired bool)) {
	d := &deadline{at: t, fire: fire, done: make(chan struct{})}
	ds.mu.Lock()
	heap.Push(&ds.h, d)
	// A deadline after the thread's own wake-up waits for it: most calls end long before
	// their deadline, so the thread is seldom woken.
	early := ds.wakeAt.IsZero() || t.Before(ds.wakeAt)
	if early {
		ds.wakeAt = t
	}
	ds.mu.Unlock()
	if early {
		ds.wake()
	}
	return func() bool {
		ds.mu.Lock()
		if !d.fired {
			if d.idx >= 0 {
				heap.Remove(&ds.h, d.idx)
			}
			ds.mu.Unlock()
			return false
		}
		ds.mu.Unlock()
		<-d.done
		return true
	}
}

func (ds *deadlines) wake() {
	var one [8]byte
	one[0] = 1 // the eventfd counter is host-endian; 1 is non-zero either way
	_, _ = unix.Write(ds.efd, one[:])
}

// stop ends the deadline thread and waits for it; deadlines not yet due never fire.
func (ds *deadlines) stop() {
	ds.mu.Lock()
	ds.stopped = true
	ds.mu.Unlock()
	ds.wake()
	<-ds.done
	_ = unix.Close(ds.efd)
}

func (ds *deadlines) run() {
	// Never unlocked: the thread ends with the goroutine, and the scheduler does not hand it
	// other goroutines while it sleeps.
	runtime.LockOSThread()
	defer close(ds.done)
	// A higher priority where the daemon may take one (root): it runs for microseconds.
	_ = unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), -5)
	fds := []unix.PollFd{{Fd: int32(ds.efd), Events: unix.POLLIN}}
	var buf [8]byte
	var due []*deadline
	for {
		ds.mu.Lock()
		if ds.stopped {
			ds.mu.Unlock()
			return
		}
		now := time.Now()
		due = due[:0]
		for len(ds.h) > 0 && !ds.h[0].at.After(now) {
			d := heap.Pop(&ds.h).(*deadline)
			d.fired = true
			due = append(due, d)
		}
		var ts *unix.Timespec
		ds.wakeAt = time.Time{}
		if len(ds.h) > 0 {
			ds.wakeAt = ds.h[0].at
			t := unix.NsecToTimespec(max(ds.wakeAt.Sub(now).Nanoseconds(), 1))
			ts = &t
		}
		ds.mu.Unlock()
		if len(due) > 0 {
			for _, d := range due {
				d.fire()
				close(d.done)
			}
			clear(due)
			continue
		}
		if _, err := unix.Ppoll(fds, ts, nil); err != nil && !errors.Is(err, unix.EINTR) {
			time.Sleep(time.Millisecond) // not expected; do not spin
		}
		if fds[0].Revents&unix.POLLIN != 0 {
			_, _ = unix.Read(ds.efd, buf[:])
		}
	}
}

// deadlineThread returns the host's deadline thread, started on first use; nil once the
// host is closed (or if it could not start: the calls' context deadlines still hold).
func (h *Host) deadlineThread() *deadlines {
	h.dlMu.Lock()
	defer h.dlMu.Unlock()
	if h.dl == nil && !h.dlClosed {
		dl, err := startDeadlines()
		if err != nil {
			h.log.Warn("deadline thread not started; calls are stopped by their context's timer", "error", err)
			h.dlClosed = true
			return nil
		}
		h.dl = dl
	}
	return h.dl
}

// stopDeadlineThread ends the deadline thread, if it was started.
func (h *Host) stopDeadlineThread() {
	h.dlMu.Lock()
	dl := h.dl
	h.dl, h.dlClosed = nil, true
	h.dlMu.Unlock()
	if dl != nil {
		dl.stop()
	}
}
