package typeslots_test

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wasmhost/wasmhost/internal/typeslots"
)

func TestPerTypeAndTotal(t *testing.T) {
	s := typeslots.New(2, 3)
	a1, ok1 := s.TryAcquire("a")
	_, ok2 := s.TryAcquire("a")
	if !ok1 || !ok2 {
		t.Fatal("two slots of a type bounded at two: not both taken")
	}
	if _, ok := s.TryAcquire("a"); ok {
		t.Error("a third slot of a type bounded at two was taken")
	}
	if _, ok := s.TryAcquire("b"); !ok {
		t.Error("another type's first slot was refused with one left in total")
	}
	if _, ok := s.TryAcquire("c"); ok {
		t.Error("a fourth slot was taken with a bound of three across types")
	}
	if got := s.Free("c"); got != 0 {
		t.Errorf("Free(c) with every slot of all types taken = %d, want 0", got)
	}
	a1()
	a1() // a second release is a no-op
	if got := s.Free("c"); got != 1 {
		t.Errorf("Free(c) after one release (and a repeated release) = %d, want 1", got)
	}
	if got := s.Free("a"); got != 1 {
		t.Errorf("Free(a) after one of its two was released = %d, want 1", got)
	}
	select {
	case <-s.Released():
	default:
		t.Error("Released did not fire after a release")
	}
	if got := s.TakeReleased(); !slices.Equal(got, []string{"a"}) {
		t.Errorf("TakeReleased = %v, want [a]", got)
	}
	if got := s.TakeReleased(); len(got) != 0 {
		t.Errorf("TakeReleased again = %v, want nothing", got)
	}
}

func TestNoBoundAcrossTypesAndAtLeastOnePerType(t *testing.T) {
	s := typeslots.New(0, 0) // per is at least 1; total 0 is no bound across types
	for _, typ := range []string{"a", "b", "c", "d"} {
		if _, ok := s.TryAcquire(typ); !ok {
			t.Errorf("first slot of %s refused with no bound across types", typ)
		}
		if _, ok := s.TryAcquire(typ); ok {
			t.Errorf("second slot of %s taken with per = 0 (meaning 1)", typ)
		}
	}
}

func TestAcquireWaitsForARelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := typeslots.New(1, 0)
		release, _ := s.TryAcquire("a")
		time.AfterFunc(10*time.Millisecond, release)
		start := time.Now()
		r, ok := s.Acquire(context.Background(), "a", time.Second)
		if !ok {
			t.Fatal("Acquire gave up though the slot was released within its wait")
		}
		if waited := time.Since(start); waited != 10*time.Millisecond {
			t.Errorf("Acquire returned after %v, want at the release (10ms)", waited)
		}
		r()
	})
}

func TestAcquireGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := typeslots.New(1, 0)
		s.TryAcquire("a")
		start := time.Now()
		if _, ok := s.Acquire(context.Background(), "a", 50*time.Millisecond); ok {
			t.Fatal("Acquire took a slot that was never released")
		}
		if waited := time.Since(start); waited != 50*time.Millisecond {
			t.Errorf("Acquire gave up after %v, want its wait (50ms)", waited)
		}
		if _, ok := s.Acquire(context.Background(), "a", 0); ok {
			t.Error("Acquire with no wait took a taken slot")
		}

		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(5*time.Millisecond, cancel)
		start = time.Now()
		if _, ok := s.Acquire(ctx, "a", time.Hour); ok {
			t.Fatal("Acquire took a slot after its context was cancelled")
		}
		if waited := time.Since(start); waited != 5*time.Millisecond {
			t.Errorf("Acquire returned %v after it began, want at the cancellation (5ms)", waited)
		}
	})
}
