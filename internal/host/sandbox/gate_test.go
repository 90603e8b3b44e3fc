package sandbox

import (
	"context"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/testwait"
)

// TestGateLendsToBackground: a background call's turn is lent: a call that comes to wait takes
// it over at once, the background call gives it up at its next yield and waits behind the
// other calls, and its release of the taken turn gives nothing back twice.
func TestGateLendsToBackground(t *testing.T) {
	g := newCPUGate(1)
	ctx := context.Background()
	bg, fg, fg2 := g.account(backgroundKey("shadow.example")), g.account("serving.example"), g.account("other.example")
	lent, err := g.acquire(ctx, bg)
	if err != nil || lent == nil {
		t.Fatalf("background acquire = %v, %v; want a lent turn", lent, err)
	}
	if g.yieldTo(bg, lent, time.Hour) {
		t.Error("a background call gives its turn up with nobody waiting")
	}
	if l, err := g.acquire(ctx, fg); err != nil || l != nil {
		t.Fatalf("foreground acquire = %v, %v; want the lent turn, not lent", l, err)
	}
	if !g.yieldTo(bg, lent, 0) {
		t.Error("the background call keeps a turn that was taken over")
	}
	g.release(lent) // the yield: nothing to give, it was taken
	bgTurn := make(chan *lentTurn)
	go func() {
		l, err := g.acquire(ctx, bg)
		if err != nil {
			t.Error(err)
		}
		bgTurn <- l
	}()
	testwait.Until(t, "the background call to wait", func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.waiters) == 1 })
	fgTurn := make(chan struct{})
	go func() {
		if _, err := g.acquire(ctx, fg2); err != nil {
			t.Error(err)
		}
		close(fgTurn)
	}()
	testwait.Until(t, "the second call to wait", func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.waiters) == 2 })
	if g.yieldTo(fg, nil, 0) {
		t.Error("a call gives its turn up within its slice")
	}
	if !g.yieldTo(fg, nil, guestSlice) {
		t.Error("a call keeps its turn past its slice while another waits")
	}
	g.release(nil)
	<-fgTurn // the waiting call first, though it came after the background one
	g.release(nil)
	if l := <-bgTurn; l == nil {
		t.Error("the background call's new turn is not lent")
	} else {
		g.release(l)
	}
	if g.free != 1 || len(g.lent) != 0 || len(g.waiters) != 0 {
		t.Errorf("free %d, lent %d, waiting %d; want the one turn free", g.free, len(g.lent), len(g.waiters))
	}
}
