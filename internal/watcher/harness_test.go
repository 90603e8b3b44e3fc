package watcher

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
)

// waitFor is how long a script waits for the desired state to reach what it expects. It is a
// failure deadline, not a timing target.
const waitFor = 15 * time.Second

// harness runs one Watcher over a fresh socket directory <tmp>/p and runs script steps on it.
type harness struct {
	t       testing.TB
	base    string // the temp dir; the socket directory is base/p
	dir     string
	desired *memDesired
	w       *Watcher
	fsw     chan *fsnotify.Watcher // the fsnotify watcher Run created, for injecting errors
	cur     *fsnotify.Watcher
	ids     map[string]Identity
	ls      []*net.UnixListener
	syncN   int
	cancel  context.CancelFunc
	done    chan error
	logs    *logBuffer
}

// option changes the Config before New, or the Watcher after it.
type option struct {
	cfg func(*Config)
	w   func(*Watcher)
}

// withResync sets Config.Resync.
func withResync(d time.Duration) option { return option{cfg: func(c *Config) { c.Resync = d }} }

// withUnwatchable makes adding a watch fail with ENOSPC for every directory named name, as
// when fs.inotify.max_user_watches is reached.
func withUnwatchable(name string) option {
	return option{w: func(w *Watcher) {
		w.addWatch = func(p string) error {
			if filepath.Base(p) == name {
				return fmt.Errorf("add %s: %w", p, syscall.ENOSPC)
			}
			return w.f.Add(p)
		}
	}}
}

// withUnreadable makes adding a watch fail with EACCES for a directory its owner may not read,
// as it does for a user other than root (root may watch it: the test runs as either).
func withUnreadable() option {
	return option{w: func(w *Watcher) {
		w.addWatch = func(p string) error {
			if fi, err := os.Stat(p); err == nil && fi.Mode().Perm()&0o400 == 0 {
				return fmt.Errorf("add %s: %w", p, syscall.EACCES)
			}
			return w.f.Add(p)
		}
	}}
}

// newHarness creates the socket directory's parent; setup runs before the watcher starts.
func newHarness(t testing.TB, setup []string, opts ...option) *harness {
	t.Helper()
	base, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{
		t: t, base: base, dir: filepath.Join(base, "p"),
		desired: newMemDesired(),
		fsw:     make(chan *fsnotify.Watcher, 1),
		ids:     make(map[string]Identity),
		logs:    &logBuffer{},
	}
	t.Cleanup(func() {
		h.stop()
		for _, l := range h.ls {
			l.Close()
		}
		os.RemoveAll(base)
	})
	if err := os.Mkdir(h.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, line := range setup {
		h.step(line)
	}
	cfg := Config{Dir: h.dir, Desired: h.desired}
	if _, bench := t.(*testing.B); !bench {
		cfg.Logger = testLogger(t, h.logs)
	}
	for _, o := range opts {
		if o.cfg != nil {
			o.cfg(&cfg)
		}
	}
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range opts {
		if o.w != nil {
			o.w(w)
		}
	}
	inner := w.newFSW
	w.newFSW = func() (*fsnotify.Watcher, error) {
		fsw, err := inner()
		if err == nil {
			h.fsw <- fsw
		}
		return fsw, err
	}
	h.w = w
	h.startRun()
	return h
}

// startRun starts h.w.Run and waits until it has synced.
func (h *harness) startRun() {
	h.t.Helper()
	w := h.w
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan error, 1)
	go func() { h.done <- w.Run(ctx) }()
	select {
	case h.cur = <-h.fsw:
	case err := <-h.done:
		h.t.Fatalf("Run returned at start: %v", err)
	}
	select {
	case <-w.Synced():
	case <-time.After(waitFor):
		h.t.Fatal("watcher never synced")
	}
}

// stop cancels Run and waits for it to return.
func (h *harness) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	h.cancel = nil
	select {
	case err := <-h.done:
		if err != nil {
			h.t.Errorf("Run: %v", err)
		}
	case <-time.After(waitFor):
		h.t.Errorf("Run did not return after its context was cancelled")
	}
}

func (h *harness) abs(rel string) string {
	if rel == "." {
		return h.dir
	}
	return filepath.Join(h.dir, rel)
}

// got returns the desired sockets, relative to the socket directory, sorted.
func (h *harness) got() []string {
	var out []string
	for _, s := range h.desired.List() {
		rel, err := filepath.Rel(h.dir, s.Path)
		if err != nil || strings.HasPrefix(rel, "..") {
			rel = s.Path
		}
		out = append(out, rel)
	}
	return out
}

// waitUntil polls cond until it holds or the deadline passes; it wakes on every change of the
// desired state and at least every 10 ms.
func (h *harness) waitUntil(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.NewTimer(waitFor)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-h.desired.Changed():
		case <-tick.C:
		case <-deadline.C:
			h.t.Fatalf("timed out waiting for %s; desired is %q", what, h.got())
		}
	}
}

// want waits until the desired state is exactly the sockets named (relative paths).
func (h *harness) want(rel ...string) {
	h.t.Helper()
	slices.Sort(rel)
	if rel == nil {
		rel = []string{}
	}
	h.waitUntil(fmt.Sprintf("desired = %q", rel), func() bool {
		got := h.got()
		if got == nil {
			got = []string{}
		}
		return slices.Equal(got, rel)
	})
}

// sync makes sure every event caused by earlier steps has been handled: it creates a socket
// in the socket directory, waits for it, removes it and waits for that. inotify delivers
// events in order, so what came before has been handled too.
func (h *harness) sync() {
	h.t.Helper()
	h.syncN++
	p := h.abs("zz-sync-" + strconv.Itoa(h.syncN))
	h.mksock(p)
	h.waitUntil("sync socket", func() bool { _, ok := h.desired.Get(p); return ok })
	if err := os.Remove(p); err != nil {
		h.t.Fatal(err)
	}
	h.waitUntil("sync socket removed", func() bool { _, ok := h.desired.Get(p); return !ok })
}

func (h *harness) mksock(p string) *net.UnixListener {
	h.t.Helper()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
	if err != nil {
		h.t.Fatalf("mksock %s: %v", p, err)
	}
	// A later step may put another socket at this path; closing this listener must not
	// unlink that one.
	l.SetUnlinkOnClose(false)
	h.ls = append(h.ls, l)
	return l
}

// relist injects an fsnotify error and waits until the re-list it causes is done.
func (h *harness) relist(err error) {
	h.t.Helper()
	before := h.w.Stats().Relists
	h.cur.Errors <- err
	h.waitUntil("a re-list", func() bool { return h.w.Stats().Relists > before })
}

// run runs script lines in order.
func (h *harness) run(script []string) {
	h.t.Helper()
	for i, line := range script {
		h.t.Logf("step %d: %s", i, line)
		h.step(line)
	}
}

// step runs one script line. Paths are relative to the socket directory.
//
//	mksock P          a listening unix socket
//	mkstale P         a socket file nobody serves (a plugin killed with SIGKILL)
//	mkdir P           mkdir -p
//	mkfile P          a regular file
//	mkfifo P          a named pipe
//	symlink T P       a symbolic link P -> T (T relative to P's directory, or absolute)
//	chmod P MODE      octal mode
//	rm P              unlink
//	rmrf P            rm -rf
//	mv A B            rename
//	mkdirsock D N     mkdir -p D and at once N sockets s0..sN-1 in it, without waiting
//	want [P...]       wait until the desired state is exactly these sockets
//	sync              wait until every earlier event has been handled
//	relist            inject fsnotify.ErrEventOverflow and wait for the re-list
//	id P NAME         remember the identity of the desired socket P as NAME
//	sameid P NAME     the desired socket P has identity NAME
//	newid P NAME      the desired socket P has an identity other than NAME
//	corrupt-add P     put a socket that does not exist into Desired by hand
//	corrupt-rm P      remove a desired socket by hand
//	waitroot          wait until the socket directory exists again
func (h *harness) step(line string) {
	h.t.Helper()
	f := strings.Fields(line)
	arg := func(i int) string {
		if len(f) <= i {
			h.t.Fatalf("%q: missing argument %d", line, i)
		}
		return f[i]
	}
	check := func(err error) {
		if err != nil {
			h.t.Fatalf("%q: %v", line, err)
		}
	}
	switch f[0] {
	case "mksock":
		h.mksock(h.abs(arg(1)))
	case "mkstale":
		l := h.mksock(h.abs(arg(1)))
		check(l.Close())
	case "mkdir":
		check(os.MkdirAll(h.abs(arg(1)), 0o755))
	case "mkfile":
		check(os.WriteFile(h.abs(arg(1)), []byte("x"), 0o644))
	case "mkfifo":
		check(syscall.Mkfifo(h.abs(arg(1)), 0o644))
	case "symlink":
		check(os.Symlink(arg(1), h.abs(arg(2))))
	case "chmod":
		mode, err := strconv.ParseUint(arg(2), 8, 32)
		check(err)
		check(os.Chmod(h.abs(arg(1)), os.FileMode(mode)))
	case "rm":
		check(os.Remove(h.abs(arg(1))))
	case "rmrf":
		check(os.RemoveAll(h.abs(arg(1))))
	case "mv":
		check(os.Rename(h.abs(arg(1)), h.abs(arg(2))))
	case "mkdirsock":
		d := h.abs(arg(1))
		n, err := strconv.Atoi(arg(2))
		check(err)
		check(os.MkdirAll(d, 0o755))
		for i := range n {
			h.mksock(filepath.Join(d, "s"+strconv.Itoa(i)))
		}
	case "want":
		h.want(f[1:]...)
	case "sync":
		h.sync()
	case "relist":
		h.relist(fsnotify.ErrEventOverflow)
	case "id":
		s, ok := h.desired.Get(h.abs(arg(1)))
		if !ok {
			h.t.Fatalf("%q: %s is not desired", line, arg(1))
		}
		h.ids[arg(2)] = s.ID
	case "sameid", "newid":
		s, ok := h.desired.Get(h.abs(arg(1)))
		if !ok {
			h.t.Fatalf("%q: %s is not desired", line, arg(1))
		}
		old, ok := h.ids[arg(2)]
		if !ok {
			h.t.Fatalf("%q: no identity named %s", line, arg(2))
		}
		if same := s.ID == old; same != (f[0] == "sameid") {
			h.t.Fatalf("%q: identity is %v, remembered %v", line, s.ID, old)
		}
	case "corrupt-add":
		h.desired.Upsert(Socket{Path: h.abs(arg(1)), ID: Identity{Ino: 1}, Seen: time.Now()})
	case "corrupt-rm":
		if !h.desired.Remove(h.abs(arg(1))) {
			h.t.Fatalf("%q: %s was not desired", line, arg(1))
		}
	case "waitroot":
		h.waitUntil("the socket directory to be recreated", func() bool {
			fi, err := os.Stat(h.dir)
			return err == nil && fi.IsDir()
		})
	default:
		h.t.Fatalf("unknown step %q", line)
	}
}

// testLogger sends the watcher's logs to the test log, shown when a test fails or with -v.
// The lines are also kept in buf for tests that check what was logged.
func testLogger(t testing.TB, buf *logBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(tlogWriter{t, buf}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tlogWriter struct {
	t   testing.TB
	buf *logBuffer
}

func (w tlogWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", bytes.TrimRight(p, "\n"))
	w.buf.mu.Lock()
	w.buf.b.Write(p)
	w.buf.mu.Unlock()
	return len(p), nil
}

// logBuffer holds what the watcher logged.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// String returns everything logged so far.
func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
