package tracing_test

import (
	"context"
	"errors"
	"maps"
	"net"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/wasmhost/wasmhost/internal/tracing"
	"github.com/wasmhost/wasmhost/internal/tracing/tracingtest"
)

// TestOffCostsNothing: without an endpoint, or with a rate of 0 as the kubelet's default, the
// provider has no tracer; starting a root and its children then allocates nothing and sends
// no traceparent.
func TestOffCostsNothing(t *testing.T) {
	for _, c := range []tracing.Config{{}, {Endpoint: "localhost:4317"}} {
		p, err := tracing.New(t.Context(), c)
		if err != nil {
			t.Fatal(err)
		}
		if p.Tracer() != nil {
			t.Errorf("%+v: a tracer, want none (off)", c)
		}
		if err := p.Shutdown(t.Context()); err != nil {
			t.Error(err)
		}
	}
	ctx, failed := context.Background(), errors.New("x")
	allocs := testing.AllocsPerRun(100, func() {
		rctx, root := tracing.StartRoot(ctx, nil, tracing.SpanRegister)
		cctx, child := tracing.Start(rctx, nil, tracing.SpanDial, trace.SpanKindClient)
		if child.IsRecording() {
			t.Fatal("a span that records")
		}
		tracing.Inject(cctx, func(k, v string) { t.Fatalf("sent %s: %s", k, v) })
		tracing.End(child, failed, "x")
		tracing.End(root, nil, "")
	})
	if allocs != 0 {
		t.Errorf("a pass with tracing off allocates %v times, want 0", allocs)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		c    tracing.Config
		want string // "" when valid
	}{
		{tracing.Config{}, ""},
		{tracing.Config{Endpoint: "localhost:4317", SamplingRatePerMillion: 1}, ""},
		{tracing.Config{Endpoint: "[::1]:4317", SamplingRatePerMillion: 1_000_000}, ""},
		{tracing.Config{Endpoint: "localhost"}, "want host:port"},
		{tracing.Config{Endpoint: "http://localhost:4317"}, "want host:port"},
		{tracing.Config{Endpoint: ":4317"}, "want host:port"},
		{tracing.Config{Endpoint: "localhost:99999"}, "port 1-65535"},
		{tracing.Config{SamplingRatePerMillion: 1_000_001}, "0 to 1000000"},
		{tracing.Config{SamplingRatePerMillion: -1}, "0 to 1000000"},
	} {
		err := tc.c.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, tracing.ErrConfig)) {
			t.Errorf("%+v: %v, want %q", tc.c, err, tc.want)
		}
	}
}

// hung is a collector that takes every export and never answers it.
type hung struct {
	coltrace.UnimplementedTraceServiceServer
	got chan struct{}
}

func (h *hung) Export(ctx context.Context, _ *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	select {
	case h.got <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestShutdownWithCollectorHung: a collector that never answers holds neither the spans'
// ends nor the shutdown past its grace, and leaves no goroutine behind.
func TestShutdownWithCollectorHung(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &hung{got: make(chan struct{}, 1)}
	srv := grpc.NewServer()
	coltrace.RegisterTraceServiceServer(srv, h)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	defer func() { srv.Stop(); <-done }()

	p, err := tracing.New(t.Context(), tracing.Config{Endpoint: ln.Addr().String(), SamplingRatePerMillion: 1_000_000})
	if err != nil {
		t.Fatal(err)
	}
	tr := p.Tracer()
	_, s := tracing.StartRoot(context.Background(), tr, tracing.SpanRegister)
	s.End()
	<-h.got // the exporter is in an export the collector holds
	for range 10_000 {
		_, s := tracing.StartRoot(context.Background(), tr, tracing.SpanRegister)
		s.End() // the queue fills and drops; End never waits
	}
	_ = p.Shutdown(context.Background())
}

// TestAttributesBounded: a string attribute as long as a plugin can make it reaches the
// collector cut to tracing.MaxAttributeBytes; the others as they were.
func TestAttributesBounded(t *testing.T) {
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
	col := tracingtest.Start(t)
	p, err := tracing.New(t.Context(), tracing.Config{Endpoint: col.Addr, SamplingRatePerMillion: 1_000_000})
	if err != nil {
		t.Fatal(err)
	}
	_, s := tracing.StartRoot(context.Background(), p.Tracer(), tracing.SpanRegister)
	s.SetAttributes(attribute.String("wasmhost.plugin.name", strings.Repeat("n", 1<<20)), attribute.String("wasmhost.outcome", "registered"))
	s.End()
	var got []*tracepb.Span
	for len(got) == 0 {
		var changed <-chan struct{}
		got, changed = col.Spans()
		if len(got) == 0 {
			<-changed
		}
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
	if n := len(tracingtest.Str(got[0], "wasmhost.plugin.name")); n != tracing.MaxAttributeBytes {
		t.Errorf("a 1 MiB attribute reached the collector as %d bytes, want %d", n, tracing.MaxAttributeBytes)
	}
	if v := tracingtest.Str(got[0], "wasmhost.outcome"); v != "registered" {
		t.Errorf("a short attribute is %q", v)
	}
}

// TestInjectAsTraceContext: Inject writes what OpenTelemetry's W3C propagator writes, sampled
// or not, with a trace state or without.
func TestInjectAsTraceContext(t *testing.T) {
	ts, err := trace.ParseTraceState("vendor=x")
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []trace.SpanContextConfig{
		{TraceID: trace.TraceID{1, 2, 3, 0xff}, SpanID: trace.SpanID{9, 8, 0xab}, TraceFlags: trace.FlagsSampled},
		{TraceID: trace.TraceID{0xde, 0xad}, SpanID: trace.SpanID{1}, TraceState: ts},
	} {
		ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(cfg))
		want := propagation.MapCarrier{}
		propagation.TraceContext{}.Inject(ctx, want)
		got := propagation.MapCarrier{}
		tracing.Inject(ctx, got.Set)
		if !maps.Equal(got, want) {
			t.Errorf("Inject wrote %v, the W3C propagator %v", got, want)
		}
	}
}
