package kube

import (
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/publish"
)

// TestRenewal: the object says when it was written and how often it is renewed, as the
// fleet view reads it back through JSON; it is stale after two renewals missed, not before,
// and an object that does not say is unknown, never stale.
func TestRenewal(t *testing.T) {
	obj := ToNodeFeature("wasmhost", "node-a", publish.Empty())
	if obj.GetLabels()[ManagedByLabel] != ManagedBy || obj.GetLabels()[NodeNameLabel] != "node-a" {
		t.Errorf("labels %v", obj.GetLabels())
	}
	if _, ok := RenewalOf(obj); ok {
		t.Error("an object without the annotations has a renewal")
	}
	at := time.Date(2026, 11, 28, 10, 0, 0, 123456789, time.FixedZone("x", 3600))
	SetRenewed(obj, at, 2*time.Second)
	b, err := obj.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	back := obj.DeepCopy()
	if err := back.UnmarshalJSON(b); err != nil {
		t.Fatal(err)
	}
	r, ok := RenewalOf(back)
	if !ok || !r.At.Equal(at.Truncate(time.Microsecond)) || r.Every != 2*time.Second {
		t.Fatalf("renewal %+v %v, want %v every 2s", r, ok, at)
	}
	for _, c := range []struct {
		after  time.Duration
		missed int
		stale  bool
	}{{0, 0, false}, {1999 * time.Millisecond, 0, false}, {2 * time.Second, 1, false}, {3999 * time.Millisecond, 1, false}, {4 * time.Second, 2, true}, {time.Hour, 1800, true}} {
		now := r.At.Add(c.after)
		if r.Missed(now) != c.missed || r.Stale(now) != c.stale {
			t.Errorf("after %v: missed %d stale %v, want %d %v", c.after, r.Missed(now), r.Stale(now), c.missed, c.stale)
		}
	}
	obj.SetAnnotations(map[string]string{RenewTimeAnnotation: "yesterday", RenewIntervalAnnotation: "10m"})
	if _, ok := RenewalOf(obj); ok {
		t.Error("an unreadable renew time is a renewal")
	}
}
