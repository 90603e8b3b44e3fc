package watcher

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/wasmhost/wasmhost/internal/testwait"
	"go.uber.org/goleak"
)

// TestFollowDir: a burst of changes in the followed directory wakes its user (Changed) at
// least once and at most as often as it looks, and Close leaves no goroutine behind and closes
// nothing its user still reads.
func TestFollowDir(t *testing.T) {
	before := goleak.IgnoreCurrent()
	dir, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	d, err := FollowDir(dir, time.Hour, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.WatchRoot(fi); err != nil {
		t.Fatal(err)
	}
	if _, watched, err := d.Root(); !watched || err != nil {
		t.Fatalf("Root: watched %v, %v; want the directory watched", watched, err)
	}
	for i := range 50 {
		if err := os.WriteFile(filepath.Join(dir, "f"+string(rune('a'+i%26))), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The 50 writes' events (hundreds) are folded: a wake-up is pending, not one per event.
	select {
	case _, ok := <-d.Changed():
		if !ok {
			t.Fatal("Changed closed")
		}
	case <-t.Context().Done():
		t.Fatal("no wake-up for 50 writes")
	}
	if got := cap(d.Changed()); got != 1 {
		t.Errorf("Changed has room for %d wake-ups; want 1, so that a burst is one look", got)
	}
	if err := d.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Errorf("Close again: %v", err)
	}
	testwait.NoLeaks(t, before)
}

// TestFollowDirRootEvent: once an event says the followed directory itself went, Root reports
// it not watched even though a directory of the same device and inode number is there (made
// again at once, it can get the freed number back, the watch left on the old one), so that
// its user watches it anew; once watched again, it is.
func TestFollowDirRootEvent(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	d, err := FollowDir(dir, time.Hour, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.WatchRoot(fi); err != nil {
		t.Fatal(err)
	}
	d.f.fsw.Events <- fsnotify.Event{Name: dir, Op: fsnotify.Remove} // as its removal, made again under the same inode number, reports it
	<-d.Changed()
	if _, watched, err := d.Root(); watched || err != nil {
		t.Fatalf("Root after an event of its removal: watched %v, %v; want not watched", watched, err)
	}
	if moved, err := d.WatchRoot(fi); !moved || err != nil {
		t.Fatalf("WatchRoot: moved %v, %v; want the old watch dropped", moved, err)
	}
	if _, watched, err := d.Root(); !watched || err != nil {
		t.Fatalf("Root once watched anew: watched %v, %v", watched, err)
	}
}
