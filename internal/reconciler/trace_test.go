package reconciler_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/wasmhost/wasmhost/internal/reconciler"
	"github.com/wasmhost/wasmhost/internal/tracing"
)

// TestPassesTraced: every operation is a trace of its own. A socket's first pass starts when
// the socket was seen, with its wait until the pass began as a span; a retry starts when it
// runs, with its attempt; a deregistration is a trace too.
func TestPassesTraced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(tracing.Sampler(1_000_000)))
		e := newEnv(t, reconciler.Config{Tracer: tp.Tracer(tracing.TracerName), InitialBackoff: time.Second, Resync: -1})
		e.ops.Fail("/p/a.sock", errors.New("boom"))
		s := sock("/p/a.sock", 1)
		s.Seen = time.Now()
		time.Sleep(time.Second) // seen a second before the reconciler runs
		e.desired.Upsert(s)
		e.start()
		synctest.Wait()
		e.ops.Fail("/p/a.sock", nil)
		time.Sleep(2 * time.Second) // the retry
		synctest.Wait()
		e.wantRegistered("/p/a.sock", 1)
		e.desired.Remove("/p/a.sock")
		synctest.Wait()

		var roots, queued []tracetest.SpanStub
		var dereg int
		for _, sp := range exp.GetSpans() {
			switch sp.Name {
			case tracing.SpanRegister:
				roots = append(roots, sp)
			case tracing.SpanQueued:
				queued = append(queued, sp)
			case tracing.SpanDeregister:
				dereg++
			}
		}
		if len(roots) != 2 || len(queued) != 1 || dereg != 1 {
			t.Fatalf("%d passes, %d waits, %d deregistrations traced; want 2, 1, 1", len(roots), len(queued), dereg)
		}
		first, retry := roots[0], roots[1]
		if !first.StartTime.Equal(s.Seen) || first.Status.Code.String() != "Error" {
			t.Errorf("first pass starts %v (socket seen %v), status %v; want at the socket seen, an error", first.StartTime, s.Seen, first.Status)
		}
		if q := queued[0]; q.Parent.SpanID() != first.SpanContext.SpanID() || !q.StartTime.Equal(s.Seen) || q.EndTime.Sub(q.StartTime) != time.Second {
			t.Errorf("the wait: parent %v, %v to %v; want under the first pass, the second from the socket seen", q.Parent.SpanID(), q.StartTime, q.EndTime)
		}
		if v, _ := attrOf(retry, tracing.AttrAttempt); v.AsInt64() != 2 || retry.StartTime.Sub(s.Seen) < 2*time.Second || retry.Parent.IsValid() {
			t.Errorf("the retry: attempt %v, started %v after the socket seen, parent %v; want attempt 2, when it ran, a root", v.AsInt64(), retry.StartTime.Sub(s.Seen), retry.Parent)
		}
	})
}

func attrOf(s tracetest.SpanStub, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}
