package state

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

func sock(path string, ino uint64) Socket {
	return Socket{Path: path, ID: Identity{Dev: 1, Ino: ino, Ctime: int64(ino) * 1000}}
}

func drained(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestDesiredUpsertIsIdempotent(t *testing.T) {
	d := NewDesired()
	if !d.Upsert(sock("/s/a.sock", 1)) {
		t.Fatal("first Upsert reported no change")
	}
	if !drained(d.Changed()) {
		t.Fatal("Upsert did not wake Changed")
	}
	if got := d.TakeDirty(); !slices.Equal(got, []string{"/s/a.sock"}) {
		t.Fatalf("TakeDirty = %v", got)
	}
	// The same identity again, as a re-list would report it: nothing changes, nobody wakes.
	if d.Upsert(sock("/s/a.sock", 1)) {
		t.Error("re-recording the same identity reported a change")
	}
	if drained(d.Changed()) || d.TakeDirty() != nil {
		t.Error("re-recording the same identity woke the reconciler")
	}
	// A new identity at the same path is a new plugin.
	if !d.Upsert(sock("/s/a.sock", 2)) {
		t.Error("a replaced socket reported no change")
	}
	if s, _ := d.Get("/s/a.sock"); s.ID.Ino != 2 {
		t.Errorf("Get after replace = %+v", s)
	}
	if got := d.TakeDirty(); !slices.Equal(got, []string{"/s/a.sock"}) {
		t.Errorf("TakeDirty after replace = %v", got)
	}
}

func TestDesiredRemove(t *testing.T) {
	d := NewDesired()
	for i, p := range []string{"/s/a.sock", "/s/sub/b.sock", "/s/sub/deeper/c.sock", "/s/subway.sock"} {
		d.Upsert(sock(p, uint64(i+1)))
	}
	d.TakeDirty()
	if d.Remove("/s/nothing.sock") {
		t.Error("removing an unknown path reported a change")
	}
	if n := d.RemoveUnder("/s/sub"); n != 2 {
		t.Errorf("RemoveUnder(/s/sub) removed %d, want 2 (not /s/subway.sock)", n)
	}
	dirty := d.TakeDirty()
	slices.Sort(dirty)
	if !slices.Equal(dirty, []string{"/s/sub/b.sock", "/s/sub/deeper/c.sock"}) {
		t.Errorf("dirty after RemoveUnder = %v", dirty)
	}
	if !d.Remove("/s/a.sock") {
		t.Error("Remove of a known path reported no change")
	}
	var paths []string
	for _, s := range d.List() {
		paths = append(paths, s.Path)
	}
	if !slices.Equal(paths, []string{"/s/subway.sock"}) {
		t.Errorf("List = %v", paths)
	}
}

func TestActual(t *testing.T) {
	a := NewActual()
	a.Add(Plugin{Socket: "/s/b.sock", Name: "b"})
	a.Add(Plugin{Socket: "/s/a.sock", Name: "a"})
	if !drained(a.Changed()) {
		t.Error("Add did not signal")
	}
	if !a.Update("/s/a.sock", func(p *Plugin) { p.Published = map[string]string{"k": "v"} }) {
		t.Error("Update of a known plugin reported none")
	}
	if a.Update("/s/zzz.sock", func(p *Plugin) { t.Error("fn called for an unknown plugin") }) {
		t.Error("Update of an unknown plugin reported one")
	}
	if p, _ := a.Get("/s/a.sock"); p.Published["k"] != "v" {
		t.Errorf("Get after Update = %+v", p)
	}
	if l := a.List(); len(l) != 2 || l[0].Name != "a" || l[1].Name != "b" {
		t.Errorf("List not sorted by socket: %+v", l)
	}
	if p, ok := a.Remove("/s/b.sock"); !ok || p.Name != "b" {
		t.Errorf("Remove = %+v, %v", p, ok)
	}
	if a.Len() != 1 {
		t.Errorf("Len = %d", a.Len())
	}
}

// TestHammer writes, removes and reads both caches from many goroutines at once (run with
// -race), then checks that no change was lost: every path touched is reported dirty, and the
// final state is what the last writer of each path left.
func TestHammer(t *testing.T) {
	d := NewDesired()
	a := NewActual()
	const writers, paths, rounds = 8, 50, 400
	dirty := make(map[string]bool)
	var dirtyMu sync.Mutex
	stop := make(chan struct{})
	var readers sync.WaitGroup
	readers.Add(1)
	go func() { // the reconciler's side: drain dirty paths while writers work
		defer readers.Done()
		for {
			select {
			case <-stop:
				return
			case <-d.Changed():
			}
			for _, p := range d.TakeDirty() {
				dirtyMu.Lock()
				dirty[p] = true
				dirtyMu.Unlock()
			}
			_ = d.List()
			_ = a.List()
		}
	}()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				// Each writer owns the paths p ≡ w (mod writers), so the end state is known.
				p := fmt.Sprintf("/s/%d/%d.sock", w, r%(paths/writers+1))
				switch r % 4 {
				case 0, 1:
					d.Upsert(sock(p, uint64(r)))
					a.Add(Plugin{Socket: p, Name: p})
				case 2:
					d.Remove(p)
					a.Remove(p)
				case 3:
					d.RemoveUnder(fmt.Sprintf("/s/%d", w))
					a.Update(p, func(pl *Plugin) { pl.Name = "updated" })
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	for _, p := range d.TakeDirty() {
		dirty[p] = true
	}
	for w := range writers {
		for i := range paths/writers + 1 {
			p := fmt.Sprintf("/s/%d/%d.sock", w, i)
			touched := i < rounds
			if touched && !dirty[p] {
				t.Errorf("%s was changed but never reported dirty", p)
			}
		}
	}
	// Replay one writer's sequence alone to find the expected end state of its paths.
	want := NewDesired()
	for r := range rounds {
		p := fmt.Sprintf("/s/0/%d.sock", r%(paths/writers+1))
		switch r % 4 {
		case 0, 1:
			want.Upsert(sock(p, uint64(r)))
		case 2:
			want.Remove(p)
		case 3:
			want.RemoveUnder("/s/0")
		}
	}
	var got []Socket
	for _, s := range d.List() {
		if len(s.Path) > 4 && s.Path[:4] == "/s/0" {
			got = append(got, s)
		}
	}
	if !slices.Equal(got, want.List()) {
		t.Errorf("writer 0's paths ended as %v, want %v", got, want.List())
	}
}

func TestActualGroups(t *testing.T) {
	a := NewActual()
	a.Add(Plugin{Socket: "/r/b.sock", Type: "DRAPlugin", Name: "gpu"})
	a.Add(Plugin{Socket: "/r/a.sock", Type: "DRAPlugin", Name: "gpu"})
	a.Add(Plugin{Socket: "/r/c.sock", Type: "DRAPlugin", Name: "other"})
	if g := a.Group("DRAPlugin", "gpu"); len(g) != 2 || g[0].Socket != "/r/a.sock" || g[1].Socket != "/r/b.sock" {
		t.Fatalf("group = %+v", g)
	}
	a.Update("/r/a.sock", func(p *Plugin) { p.Name = "renamed" })
	if g := a.Group("DRAPlugin", "gpu"); len(g) != 1 || g[0].Socket != "/r/b.sock" {
		t.Fatalf("group after a rename = %+v", g)
	}
	a.Remove("/r/b.sock")
	if g := a.Group("DRAPlugin", "gpu"); len(g) != 0 {
		t.Fatalf("group after removal = %+v", g)
	}
	if g := a.Group("DRAPlugin", "renamed"); len(g) != 1 {
		t.Fatalf("renamed group = %+v", g)
	}
}

func status(path string, st PluginState, attempts int) Status {
	return Status{Path: path, State: st, PluginType: "T", PluginName: "n", Attempts: attempts}
}

// A subscriber gets one newest view per socket changed since it last asked, in revision order;
// a removal as Deleted with the last view; a socket added and removed in between not at all.
func TestSubscriptionChanges(t *testing.T) {
	s := New()
	s.SetStatus(status("/a", StatePending, 0))
	sub, list := s.Subscribe()
	defer sub.Close()
	if len(list) != 1 || list[0].Path != "/a" {
		t.Fatalf("list = %+v", list)
	}
	s.SetStatus(status("/a", StateFailing, 1))
	s.SetStatus(status("/a", StateFailing, 2))
	s.SetStatus(status("/b", StatePending, 0))
	s.SetStatus(status("/c", StatePending, 0))
	s.DeleteStatus("/c", time.Time{})
	select {
	case <-sub.C():
	default:
		t.Fatal("no wake-up after changes")
	}
	changes, reset, _ := sub.Next()
	if reset || len(changes) != 2 {
		t.Fatalf("changes = %+v (reset %v), want /a modified and /b added", changes, reset)
	}
	if c := changes[0]; c.Type != Modified || c.View.Path != "/a" || c.View.Attempts != 2 {
		t.Errorf("first change %+v, want /a at attempt 2", c)
	}
	if c := changes[1]; c.Type != Added || c.View.Path != "/b" {
		t.Errorf("second change %+v, want /b added", c)
	}
	s.SetStatus(status("/a", StateFailing, 2)) // the same again: no change
	if changes, _, _ := sub.Next(); len(changes) != 0 {
		t.Errorf("changes after an equal status: %+v", changes)
	}
	s.DeleteStatus("/a", time.Time{})
	changes, _, _ = sub.Next()
	if len(changes) != 1 || changes[0].Type != Deleted || changes[0].View.State != StateGone || changes[0].View.PluginName != "n" {
		t.Errorf("after a removal: %+v, want /a deleted with its last view", changes)
	}
}

// A handler swap changes the views of the plugins of its type, and only those.
func TestHandlerSwapChangesViews(t *testing.T) {
	s := New()
	for _, p := range []Plugin{{Socket: "/a", Type: "T", Name: "a"}, {Socket: "/b", Type: "U", Name: "b"}} {
		s.Actual().Add(p)
		s.SetStatus(Status{Path: p.Socket, State: StateRegistered})
	}
	s.SetHandlers([]Handler{{File: "/h/t.wasm", PluginTypes: []string{"T"}, SHA256: "01", Serving: true}})
	sub, _ := s.Subscribe()
	defer sub.Close()
	s.SetHandlers([]Handler{{File: "/h/t.wasm", PluginTypes: []string{"T"}, SHA256: "02", Serving: true}})
	changes, _, _ := sub.Next()
	if len(changes) != 1 || changes[0].View.Path != "/a" || changes[0].View.HandlerSHA256 != "02" {
		t.Fatalf("changes after a swap = %+v, want /a with the new module", changes)
	}
	s.SetHandlers([]Handler{{File: "/h/t.wasm", PluginTypes: []string{"T"}, SHA256: "02", Serving: true}})
	if changes, _, _ := sub.Next(); len(changes) != 0 {
		t.Errorf("changes after the same handler set: %+v", changes)
	}
}

// A subscriber that fell behind more removals than the store keeps is reset with the list;
// one that keeps up is not, however many removals there are.
func TestSubscriptionReset(t *testing.T) {
	s := New()
	s.SetMaxTombstones(4)
	slow, _ := s.Subscribe()
	defer slow.Close()
	fast, _ := s.Subscribe()
	defer fast.Close()
	s.SetStatus(status("/keep", StatePending, 0))
	for i := range 10 {
		p := fmt.Sprintf("/gone%d", i)
		s.SetStatus(status(p, StatePending, 0))
		if _, reset, _ := fast.Next(); reset {
			t.Fatal("a subscriber that keeps up was reset")
		}
		s.DeleteStatus(p, time.Time{})
		if _, reset, _ := fast.Next(); reset {
			t.Fatal("a subscriber that keeps up was reset")
		}
	}
	_, reset, list := slow.Next()
	if !reset || len(list) != 1 || list[0].Path != "/keep" {
		t.Fatalf("slow subscriber: reset %v, list %+v; want a reset with /keep", reset, list)
	}
	if changes, reset, _ := slow.Next(); reset || len(changes) != 0 {
		t.Errorf("after the reset: %+v, %v", changes, reset)
	}
}

// Writers of every kind and subscribers at once: no race, and a subscriber that reads to the
// end holds exactly the views the store lists.
func TestStoreHammer(t *testing.T) {
	s := New()
	s.SetMaxTombstones(8)
	sub, list := s.Subscribe()
	defer sub.Close()
	held := map[string]PluginView{}
	for _, v := range list {
		held[v.Path] = v
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 500 {
				p := fmt.Sprintf("/p%d", (w*7+i)%20)
				switch i % 5 {
				case 0, 1:
					s.SetStatus(status(p, StateFailing, i))
				case 2:
					s.Actual().Add(Plugin{Socket: p, Type: "T", Name: p})
				case 3:
					s.DeleteStatus(p, time.Time{})
					s.Actual().Remove(p)
				case 4:
					s.SetHandlers([]Handler{{File: "/h", PluginTypes: []string{"T"}, SHA256: fmt.Sprint(i), Serving: true}})
				}
			}
		})
	}
	apply := func() {
		changes, reset, list := sub.Next()
		if reset {
			clear(held)
			for _, v := range list {
				held[v.Path] = v
			}
		}
		for _, c := range changes {
			if c.Type == Deleted {
				delete(held, c.View.Path)
			} else {
				held[c.View.Path] = c.View
			}
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for running := true; running; {
		select {
		case <-sub.C():
			apply()
		case <-done:
			running = false
		}
	}
	apply()
	want := s.Plugins()
	if len(want) != len(held) {
		t.Fatalf("subscriber holds %d views, the store lists %d", len(held), len(want))
	}
	for _, v := range want {
		if h, ok := held[v.Path]; !ok || h.Rev != v.Rev || h.State != v.State || h.Attempts != v.Attempts {
			t.Errorf("%s: subscriber holds %+v, the store lists %+v", v.Path, h, v)
		}
	}
}
