package watcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/wasmhost/wasmhost/internal/testwait"
	"go.uber.org/goleak"
)

// TestScripts runs the watcher scenarios. Each one sets up a tree before the watcher starts,
// then runs steps, waiting after each "want" for the desired state to match.
func TestScripts(t *testing.T) {
	tests := []struct {
		name   string
		setup  []string // run before the watcher starts
		script []string
		opts   []option
		after  func(t *testing.T, h *harness) // more checks once the script is done
	}{
		{
			name: "existing sockets at start, nested",
			setup: []string{
				"mksock a.sock", "mkdir x/y/z", "mksock x/b.sock", "mksock x/y/z/c.sock",
				"mkstale dead.sock",
			},
			script: []string{"want a.sock dead.sock x/b.sock x/y/z/c.sock"},
		},
		{
			name: "dot-names ignored at start",
			setup: []string{
				"mksock .hidden.sock", "mkdir .d", "mksock .d/s", "mkdir ok/.e", "mksock ok/.e/s",
				"mksock ok/s",
			},
			script: []string{"want ok/s"},
		},
		{
			name: "dot-names ignored",
			script: []string{
				"mksock .hidden.sock", "mkdir .d/e", "mksock .d/s", "mksock .d/e/s",
				"mkdir a/.f", "mksock a/.f/s", "mksock a/.s",
				"sync", "want",
				"mv .hidden.sock visible.sock", "want visible.sock",
				"mv .d d", "want visible.sock d/s d/e/s",
				"mv d .d", "want visible.sock",
				"mv visible.sock .again", "want",
			},
		},
		{
			name:  "non-sockets ignored",
			setup: []string{"mkfile f0", "mkfifo p0", "symlink /nonexistent l0"},
			script: []string{
				"mksock real.sock",
				"mkfile f", "mkfifo p", "symlink real.sock link.sock", "symlink /tmp dirlink",
				"mkdir d", "mkfile d/f", "symlink ../real.sock d/link.sock",
				"sync", "want real.sock",
				"rm f", "rm link.sock", "rm dirlink", "rmrf d", "sync", "want real.sock",
			},
		},
		{
			name: "socket created and removed",
			script: []string{
				"mksock a", "want a",
				"mksock b", "want a b",
				"rm a", "want b",
				"mkstale c", "want b c",
				"rm c", "rm b", "want",
			},
		},
		{
			name: "new subdirectory with a socket made at once",
			script: []string{
				"mkdirsock d1 1", "want d1/s0",
				"mkdirsock d2 5", "want d1/s0 d2/s0 d2/s1 d2/s2 d2/s3 d2/s4",
				"rmrf d1", "rmrf d2", "want",
			},
		},
		{
			name: "mkdir -p with sockets at every level",
			script: []string{
				"mkdirsock a/b/c/d 2",
				"want a/b/c/d/s0 a/b/c/d/s1",
				"mksock a/top", "mksock a/b/c/mid",
				"want a/top a/b/c/mid a/b/c/d/s0 a/b/c/d/s1",
			},
		},
		{
			name: "socket renamed away and in",
			script: []string{
				"mksock a", "want a",
				"mv a b", "want b",
				"mkdir d", "mv b d/c", "want d/c",
				"mv d/c ../outside", "want",
				"mv ../outside back", "want back",
			},
		},
		{
			name:  "directory removed or renamed removes everything below",
			setup: []string{"mkdir d/e/f", "mksock d/s", "mksock d/e/s", "mksock d/e/f/s", "mksock keep"},
			script: []string{
				"want keep d/s d/e/s d/e/f/s",
				"mv d/e d/e2", "want keep d/s d/e2/s d/e2/f/s",
				// the renamed directory's subdirectories are watched under their new names
				"mksock d/e2/f/new", "want keep d/s d/e2/s d/e2/f/s d/e2/f/new",
				"rm d/e2/f/new", "want keep d/s d/e2/s d/e2/f/s",
				"mv d ../moved", "want keep",
				"mv ../moved d", "want keep d/s d/e2/s d/e2/f/s",
				"rmrf d/e2", "want keep d/s",
				"rmrf d", "want keep",
				// the same name again is a fresh directory, watched again
				"mkdirsock d/e2/f 1", "want keep d/e2/f/s0",
			},
		},
		{
			name: "directory replaced by a socket and back",
			script: []string{
				"mkdir x", "mksock x/s", "want x/s",
				"mkstale ../tmpsock", "rmrf x", "mv ../tmpsock x", "want x",
				"rm x", "mkdirsock x 1", "want x/s0",
			},
		},
		{
			name: "socket replaced at the same path gets a new identity",
			script: []string{
				"mksock s", "want s", "id s first",
				"rm s", "mksock s", "sync", "want s", "newid s first", "id s second",
				// replaced by a rename over it: no Remove event, only Create
				"mkstale ../other", "mv ../other s", "sync", "want s", "newid s second",
			},
		},
		{
			name: "chmod keeps the identity",
			script: []string{
				"mksock s", "want s", "id s a",
				"chmod s 0600", "sync", "sameid s a",
				"relist", "sameid s a",
			},
		},
		{
			name:  "an overflow re-list repairs a corrupted desired state",
			setup: []string{"mkdir d", "mksock d/s", "mksock t"},
			script: []string{
				"want d/s t", "id t before",
				"corrupt-add ghost", "corrupt-add d/ghost", "corrupt-rm d/s", "corrupt-rm t",
				"want d/ghost ghost",
				"relist", "want d/s t",
			},
		},
		{
			name:  "socket directory removed and recreated",
			setup: []string{"mkdir d", "mksock d/s", "mksock t"},
			script: []string{
				"want d/s t",
				"rmrf .", "want", "waitroot",
				"mksock new", "mkdirsock d 1", "want new d/s0",
			},
		},
		{
			name:  "socket directory renamed away and recreated",
			setup: []string{"mkdir d", "mksock d/s"},
			script: []string{
				"want d/s",
				"mv . ../old", "want", "waitroot",
				"mksock ../old/d/gone", // the old tree is no longer watched
				"mkdirsock d 1", "sync", "want d/s0",
			},
		},
		{
			// Found on its mode change, not at the next periodic re-list (an hour here).
			name:  "a subdirectory that becomes readable is watched at once",
			opts:  []option{withUnreadable(), withResync(time.Hour)},
			setup: []string{"mkdir locked", "mksock locked/s", "chmod locked 000"},
			script: []string{
				"chmod locked 755", "mksock locked/s2", "want locked/s locked/s2",
			},
		},
		{
			name: "an unwatchable directory is found by re-lists",
			opts: []option{withUnwatchable("nowatch"), withResync(50 * time.Millisecond)},
			script: []string{
				"mkdir nowatch", "mksock nowatch/s", "want nowatch/s",
				"mksock nowatch/s2", "want nowatch/s nowatch/s2",
				"mkdirsock nowatch/deeper 1", "want nowatch/s nowatch/s2 nowatch/deeper/s0",
				"rm nowatch/s", "want nowatch/s2 nowatch/deeper/s0",
			},
			after: func(t *testing.T, h *harness) {
				if st := h.w.Stats(); st.WatchFailures == 0 || st.Errors < st.WatchFailures {
					t.Errorf("stats = %+v, want watch failures counted as errors", st)
				}
				logs := h.logs.String()
				for _, want := range []string{"fs.inotify.max_user_watches", "path=" + h.abs("nowatch")} {
					if !strings.Contains(logs, want) {
						t.Errorf("the logs do not mention %q", want)
					}
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, tt.setup, tt.opts...)
			h.run(tt.script)
			if tt.after != nil {
				tt.after(t, h)
			}
		})
	}
}

// TestSyncedHoldsExisting checks that the sockets present at start are desired by the time
// Synced is closed, without waiting.
func TestSyncedHoldsExisting(t *testing.T) {
	var setup []string
	for i := range 50 {
		setup = append(setup, fmt.Sprintf("mkdir d%d", i%5), fmt.Sprintf("mkstale d%d/s%d", i%5, i))
	}
	h := newHarness(t, setup)
	if n := h.desired.Len(); n != 50 {
		t.Fatalf("after Synced, %d sockets desired, want 50: %q", n, h.got())
	}
	if st := h.w.Stats(); st.Relists != 1 || st.Watches != 7 {
		t.Errorf("stats = %+v, want 1 re-list and 7 watches (6 directories and the parent)", st)
	}
}

// TestRaceNewDirectories creates many directories each with a socket made right away, the
// race the watch-then-scan order exists for.
func TestRaceNewDirectories(t *testing.T) {
	h := newHarness(t, nil)
	var want []string
	for i := range 30 {
		d := "r" + strconv.Itoa(i)
		h.step("mkdirsock " + d + "/x/y 2")
		want = append(want, d+"/x/y/s0", d+"/x/y/s1")
	}
	h.want(want...)
	if st := h.w.Stats(); st.Errors != 0 {
		t.Errorf("stats = %+v, want no errors", st)
	}
}

// TestErrorsCoalesce checks that a burst of watcher errors makes a few re-lists, not one per
// error, and that every error is counted.
func TestErrorsCoalesce(t *testing.T) {
	h := newHarness(t, []string{"mksock s"})
	before := h.w.Stats()
	const burst = 100
	for i := range burst {
		err := fsnotify.ErrEventOverflow
		if i%2 == 1 {
			err = errors.New("some other inotify error")
		}
		h.cur.Errors <- err
	}
	h.waitUntil("a re-list", func() bool { return h.w.Stats().Relists > before.Relists })
	after := h.w.Stats()
	if got := after.Errors - before.Errors; got != burst {
		t.Errorf("errors counted = %d, want %d", got, burst)
	}
	if got := after.Relists - before.Relists; got > burst/4 {
		t.Errorf("%d errors made %d re-lists; they should coalesce", burst, got)
	}
	h.want("s")
}

// TestRunReturnsAndLeavesNoGoroutines checks that Run waits for what it started.
func TestRunReturnsAndLeavesNoGoroutines(t *testing.T) {
	before := goleak.IgnoreCurrent()
	for range 3 {
		h := newHarness(t, []string{"mksock s"})
		h.step("mkdirsock d 3")
		h.want("s", "d/s0", "d/s1", "d/s2")
		h.stop()
		if st := h.w.Stats(); st.Watches != 0 {
			t.Errorf("after Run returned, %d watches are counted", st.Watches)
		}
	}
	testwait.NoLeaks(t, before)
}

func TestRunTwice(t *testing.T) {
	h := newHarness(t, nil)
	if err := h.w.Run(context.Background()); !errors.Is(err, ErrStarted) {
		t.Fatalf("second Run = %v, want ErrStarted", err)
	}
}

func TestNewConfig(t *testing.T) {
	base, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	d := newMemDesired()

	if _, err := New(Config{Desired: d}); !errors.Is(err, ErrConfig) {
		t.Errorf("no Dir: %v, want ErrConfig", err)
	}
	if _, err := New(Config{Dir: base}); !errors.Is(err, ErrConfig) {
		t.Errorf("no Desired: %v, want ErrConfig", err)
	}
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Dir: file, Desired: d}); !errors.Is(err, ErrSocketDir) {
		t.Errorf("Dir is a file: %v, want ErrSocketDir", err)
	}

	deep := filepath.Join(base, "a", "b", "plugins_registry")
	w, err := New(Config{Dir: deep, Desired: d})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(deep)
	if err != nil || !fi.IsDir() {
		t.Fatalf("New did not create %s: %v", deep, err)
	}
	if w.resync != DefaultResync {
		t.Errorf("resync = %v, want the default %v", w.resync, DefaultResync)
	}
	if w.Dir() != deep {
		t.Errorf("Dir() = %q, want %q", w.Dir(), deep)
	}
}

// TestRelistIdentityRules checks the two identity rules directly: a re-list keeps an identity
// whose device and inode match even if the change time differs (a chmod after bind); an event
// keeps it only if all three match.
func TestRelistIdentityRules(t *testing.T) {
	h := newHarness(t, []string{"mksock s"})
	h.stop()
	p := h.abs("s")
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	real := identityOf(fi)
	orig, _ := h.desired.Get(p)
	if orig.ID != real {
		t.Fatalf("desired identity %v, stat says %v", orig.ID, real)
	}

	older := real
	older.Ctime--
	h.desired.Upsert(Socket{Path: p, ID: older, Seen: orig.Seen})
	if h.w.upsertListed(p, fi) {
		t.Error("a re-list replaced an identity whose device and inode match")
	}
	h.w.upsertNew(p, fi)
	if s, _ := h.desired.Get(p); s.ID != real || !s.Seen.After(orig.Seen) {
		t.Errorf("an event kept identity %v (seen %v) though the change time differs", s.ID, s.Seen)
	}
	seen, _ := h.desired.Get(p)
	h.w.upsertNew(p, fi)
	if s, _ := h.desired.Get(p); s != seen {
		t.Errorf("the same file seen twice changed the entry: %+v -> %+v", seen, s)
	}

	other := real
	other.Ino++
	h.desired.Upsert(Socket{Path: p, ID: other})
	if !h.w.upsertListed(p, fi) {
		t.Error("a re-list kept an identity with another inode")
	}
}

// TestRootEventWithTheSameInode: an event says the socket directory went, yet a directory of
// the same device and inode number is there: a duplicate or stale event, or the directory was
// removed and made again at once and got the freed inode number back (tmpfs and ext4 hand
// them out again), the watch left on the old one. The watcher watches it anew and lists it:
// its sockets stay desired throughout (no plugin deregistered), and a socket made afterwards
// is seen from the new watch's events. Here the watch is taken away behind the watcher's back,
// as a directory made again under the same inode number leaves it.
func TestRootEventWithTheSameInode(t *testing.T) {
	h := newHarness(t, []string{"mksock a.sock"}, withResync(time.Hour))
	h.run([]string{"want a.sock", "id a.sock A"})
	if err := h.cur.Remove(h.dir); err != nil {
		t.Fatal(err)
	}
	before := h.w.Stats().Relists
	h.cur.Events <- fsnotify.Event{Name: h.dir, Op: fsnotify.Remove}
	h.waitUntil("the re-list the event asks for", func() bool { return h.w.Stats().Relists > before })
	h.run([]string{"want a.sock", "sameid a.sock A", "mksock b.sock", "want a.sock b.sock"})
	if h.desired.removed(h.abs("a.sock")) {
		t.Error("a.sock left Desired on an event about a directory that is still there")
	}
}
