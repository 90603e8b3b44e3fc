//go:build linux

package liveness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wasmhost/wasmhost/internal/state"
)

// Monitor watches registered plugins. Make it with New and run it with Run; Watch and Forget
// may be called at any time, from any goroutine.
type Monitor struct {
	cfg  Config
	log  *slog.Logger
	epfd int
	wake int // an eventfd in the epoll set: Run's stop signal

	mu       sync.Mutex
	closed   bool
	byFD     map[int]*entry
	byPath   map[string]*entry
	want     map[string]uint64 // path -> generation of its current watch; gone once forgotten
	probing  sync.WaitGroup
	ran      bool
	stopping bool // Run is ending: no more probes
}

type entry struct {
	watched
	fd    int
	since time.Time // when the connection was made
	drops int       // connections in a row that the server dropped soon after they were made
	acked bool      // the server's SETTINGS were acknowledged (Run's goroutine only)
}

// settingsAck acknowledges the server's first SETTINGS frame, as an HTTP/2 client must (some
// servers close a connection whose settings are not acknowledged).
var settingsAck = []byte{0, 0, 0, 4, 1, 0, 0, 0, 0}

// shortLived is how long a watch connection must last for a drop to count as an idle
// connection closed by the server rather than a server that drops every connection; the
// re-watch of the latter backs off (redialDelay).
const shortLived = 10 * time.Second

// redialDelay is the wait before dialling again after drops short-lived connections in a row.
func redialDelay(drops int) time.Duration {
	if drops <= 1 {
		return 0
	}
	return min(100*time.Millisecond<<min(drops-2, 10), time.Minute)
}

var gens atomic.Uint64

func nextGen() uint64 { return gens.Add(1) }

// New returns a monitor. It holds an epoll set and an eventfd until Run returns (or Close).
func New(cfg Config) (*Monitor, error) {
	if cfg.OnDead == nil {
		return nil, errors.New("liveness: Config.OnDead is required")
	}
	cfg = cfg.withDefaults()
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("liveness: epoll_create1: %w", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("liveness: eventfd: %w", err)
	}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wake, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wake)}); err != nil {
		unix.Close(wake)
		unix.Close(epfd)
		return nil, fmt.Errorf("liveness: epoll_ctl: %w", err)
	}
	return &Monitor{cfg: cfg, log: cfg.Logger, epfd: epfd, wake: wake,
		byFD: make(map[int]*entry), byPath: make(map[string]*entry), want: make(map[string]uint64)}, nil
}

// Len returns how many plugins are watched.
func (m *Monitor) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.want)
}

// Watch dials the socket at path and watches the plugin registered from it with identity id
// over that connection, replacing any earlier watch of path. (The daemon uses Adopt, with the
// connection the plugin registered over.) When nobody listens any more, OnDead is called
// before Watch returns the dial's error.
func (m *Monitor) Watch(ctx context.Context, path string, id state.Identity) error {
	w := watched{path: path, id: id, gen: nextGen()}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return errors.New("liveness: monitor stopped")
	}
	m.want[path] = w.gen
	m.mu.Unlock()
	return m.watchNow(ctx, w)
}

// Adopt watches the plugin registered from the socket at path with identity id over c, a
// connection to it that the caller opened and is done with (the registration's, which said
// the HTTP/2 preface and acknowledged the server's settings): it costs the plugin nothing
// more. The monitor owns c from then on (it keeps a duplicate of its descriptor and closes c).
func (m *Monitor) Adopt(path string, id state.Identity, c net.Conn) error {
	defer c.Close()
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("liveness: %s: not a unix connection", path)
	}
	fd, err := dupConn(uc)
	if err != nil {
		return err
	}
	w := watched{path: path, id: id, gen: nextGen()}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		unix.Close(fd)
		return errors.New("liveness: monitor stopped")
	}
	m.want[path] = w.gen
	m.mu.Unlock()
	return m.add(&entry{watched: w, fd: fd, since: time.Now(), acked: true})
}

// dupConn returns a close-on-exec duplicate of c's descriptor.
func dupConn(c *net.UnixConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	var dupErr error
	if err := raw.Control(func(s uintptr) {
		fd, dupErr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return -1, err
	}
	if dupErr != nil {
		return -1, fmt.Errorf("liveness: dup: %w", dupErr)
	}
	return fd, nil
}

// watchNow dials w's socket and adds the connection to the epoll set.
func (m *Monitor) watchNow(ctx context.Context, w watched) error {
	path, id := w.path, w.id
	fd, err := m.connect(ctx, path)
	if err != nil {
		if !nobodyListens(err) {
			// Something is there but dropped the connection at once: follow it as a probe
			// does, backing off.
			m.mu.Lock()
			if m.closed || m.stopping || m.want[path] != w.gen {
				m.mu.Unlock()
				return err
			}
			m.probing.Add(1)
			m.mu.Unlock()
			go func() {
				defer m.probing.Done()
				m.probe(ctx, &entry{watched: w, since: time.Now()})
			}()
			return err
		}
		// Nobody listens: it went between its registration and now (it answered GetInfo and
		// Notify a moment ago), dead already.
		m.mu.Lock()
		current := m.want[path] == w.gen
		if current {
			delete(m.want, path)
		}
		m.mu.Unlock()
		if current {
			m.log.Info("plugin stopped answering right after it registered", "socket", path, "error", err)
			m.cfg.OnDead(path, id)
		}
		return err
	}
	return m.add(&entry{watched: w, fd: fd, since: time.Now()})
}

func (m *Monitor) add(e *entry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		unix.Close(e.fd)
		return errors.New("liveness: monitor stopped")
	}
	if m.want[e.path] != e.gen {
		unix.Close(e.fd) // forgotten or watched anew meanwhile
		return nil
	}
	if old := m.byPath[e.path]; old != nil {
		m.dropLocked(old)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(e.fd)}
	if err := unix.EpollCtl(m.epfd, unix.EPOLL_CTL_ADD, e.fd, &ev); err != nil {
		unix.Close(e.fd)
		return fmt.Errorf("liveness: watching %s: epoll_ctl: %w", e.path, err)
	}
	m.byFD[e.fd] = e
	m.byPath[e.path] = e
	return nil
}

// Forget stops watching path (its plugin was deregistered).
func (m *Monitor) Forget(path string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.want, path)
	if e := m.byPath[path]; e != nil {
		m.dropLocked(e)
	}
}

func (m *Monitor) dropLocked(e *entry) {
	_ = unix.EpollCtl(m.epfd, unix.EPOLL_CTL_DEL, e.fd, nil)
	unix.Close(e.fd)
	delete(m.byFD, e.fd)
	if m.byPath[e.path] == e {
		delete(m.byPath, e.path)
	}
}

// connect dials path, sends the HTTP/2 client preface, and returns a descriptor of the
// connection of the monitor's own (close-on-exec), the net.Conn closed.
func (m *Monitor) connect(ctx context.Context, path string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.DialTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return -1, err
	}
	defer c.Close()
	_ = c.SetWriteDeadline(time.Now().Add(m.cfg.DialTimeout))
	if _, err := c.Write(http2Preface); err != nil {
		return -1, err
	}
	return dupConn(c.(*net.UnixConn))
}

// Close releases what New took, for a monitor that will not Run (Run releases it itself).
func (m *Monitor) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ran || m.closed {
		return
	}
	m.closed = true
	for _, e := range m.byFD {
		m.dropLocked(e)
	}
	unix.Close(m.wake)
	unix.Close(m.epfd)
}

// Run watches until ctx is done, then closes every watch and returns when the probes it
// started have ended. It may be called once.
func (m *Monitor) Run(ctx context.Context) error {
	m.mu.Lock()
	if m.ran || m.closed {
		m.mu.Unlock()
		return errors.New("liveness: Run called twice, or after Close")
	}
	m.ran = true
	m.mu.Unlock()

	woken := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(woken)
		var one [8]byte
		one[0] = 1
		_, _ = unix.Write(m.wake, one[:])
	})
	defer func() {
		if !stop() {
			<-woken
		}
		m.mu.Lock()
		m.stopping = true // no probe starts after this
		m.mu.Unlock()
		m.probing.Wait()
		m.mu.Lock()
		m.closed = true
		for _, e := range m.byFD {
			m.dropLocked(e)
		}
		m.mu.Unlock()
		unix.Close(m.wake)
		unix.Close(m.epfd)
	}()

	events := make([]unix.EpollEvent, 128)
	buf := make([]byte, 4096)
	for {
		n, err := unix.EpollWait(m.epfd, events, -1)
		if err != nil {
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			return fmt.Errorf("liveness: epoll_wait: %w", err)
		}
		for _, ev := range events[:n] {
			fd := int(ev.Fd)
			if fd == m.wake {
				return nil
			}
			m.readable(ctx, fd, buf)
		}
	}
}

// readable drains what the server sent on fd (its SETTINGS, a PING, a GOAWAY: nothing to act
// on) and, when the connection has closed, probes the socket.
func (m *Monitor) readable(ctx context.Context, fd int, buf []byte) {
	m.mu.Lock()
	cur := m.byFD[fd]
	m.mu.Unlock()
	if cur == nil {
		return
	}
	for {
		n, _, err := unix.Recvfrom(fd, buf, unix.MSG_DONTWAIT)
		if n > 0 {
			if !cur.acked {
				cur.acked = true
				_, _ = unix.Write(fd, settingsAck)
			}
			continue
		}
		if err != nil && (errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR)) {
			return // still open
		}
		break // n == 0: closed by the peer; or an error: closed either way
	}
	m.mu.Lock()
	e := m.byFD[fd]
	if e == nil {
		m.mu.Unlock()
		return
	}
	m.dropLocked(e)
	if m.stopping {
		m.mu.Unlock()
		return
	}
	m.probing.Add(1)
	m.mu.Unlock()
	go func() {
		defer m.probing.Done()
		m.probe(ctx, e)
	}()
}

// probe tells a server that dropped an idle connection (watch the new one) from a dead plugin
// (OnDead). It dials at once whatever the drops before: a server that keeps dropping its
// connections is watched again only after a wait (redialDelay), so as not to spin on it, but
// a plugin that died is reported at once. (A process killed with SIGKILL closes its
// connections before its listener, so the dial that follows the first close may land in the
// dying listener's backlog; the next close, a "drop", must not wait before it finds nobody
// there.)
func (m *Monitor) probe(ctx context.Context, e *entry) {
	drops := 0
	if time.Since(e.since) < shortLived {
		drops = e.drops + 1
	}
	var pause time.Duration // before the next dial
	for {
		if pause > 0 {
			t := time.NewTimer(pause)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
		fd, err := m.connect(ctx, e.path)
		if ctx.Err() != nil {
			if fd >= 0 {
				unix.Close(fd)
			}
			return
		}
		m.mu.Lock()
		superseded := m.want[e.path] != e.gen // forgotten, or watched anew, meanwhile
		m.mu.Unlock()
		if superseded {
			if fd >= 0 {
				unix.Close(fd)
			}
			return
		}
		if err == nil {
			if d := redialDelay(drops); d > 0 && pause == 0 {
				// Alive, but it dropped the connections before soon after they were made:
				// watch again after a wait.
				unix.Close(fd)
				pause = d
				continue
			}
			if err := m.add(&entry{watched: e.watched, fd: fd, since: time.Now(), drops: drops}); err != nil {
				m.log.Debug("liveness: watch not renewed", "socket", e.path, "error", err)
			}
			return
		}
		if nobodyListens(err) {
			break
		}
		// Something is there but dropped the connection at once, or its backlog is full:
		// not dead; try again, backing off.
		drops++
		pause = redialDelay(drops)
	}
	m.log.Info("plugin stopped answering: its connection closed and nobody listens at its socket",
		"socket", e.path)
	m.mu.Lock()
	if m.want[e.path] == e.gen {
		delete(m.want, e.path)
	}
	m.mu.Unlock()
	m.cfg.OnDead(e.path, e.id)
}

// nobodyListens reports whether a dial error says that no server is at the socket (refused,
// or the file is gone), as opposed to one that is there but busy or rude.
func nobodyListens(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT)
}
