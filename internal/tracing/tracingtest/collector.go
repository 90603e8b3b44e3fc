// Package tracingtest is an OpenTelemetry collector for tests: an in-process server of the
// OTLP protocol's TraceService (its official proto, go.opentelemetry.io/proto/otlp) that
// keeps every span it is sent, and can hang like a collector that takes exports and never
// answers them.
//
// This package is part of the daemon's tests, not a stable API.
package tracingtest

import (
	"context"
	"net"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// Collector is a running OTLP/gRPC trace receiver. Its methods are safe for concurrent use.
type Collector struct {
	coltrace.UnimplementedTraceServiceServer
	// Addr is where it listens, host:port on the loopback: what tracing.endpoint names.
	Addr string

	mu       sync.Mutex
	spans    []*tracepb.Span
	resource []*commonpb.KeyValue
	held     chan struct{} // closed to let exports through; nil when not held
	exports  int           // export requests received, answered or not
	changed  chan struct{} // closed and replaced when spans arrive
}

// Start serves a collector on a loopback port until the test ends.
func Start(tb testing.TB) *Collector {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	c := &Collector{Addr: ln.Addr().String(), changed: make(chan struct{})}
	srv := grpc.NewServer()
	coltrace.RegisterTraceServiceServer(srv, c)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	tb.Cleanup(func() {
		c.Release()
		srv.Stop()
		<-done
	})
	return c
}

// Export is the TraceService's one method: it keeps the spans (once released, when held).
func (c *Collector) Export(ctx context.Context, req *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	c.exports++
	held := c.held
	c.mu.Unlock()
	if held != nil {
		select {
		case <-held:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		c.resource = rs.GetResource().GetAttributes()
		for _, ss := range rs.GetScopeSpans() {
			c.spans = append(c.spans, ss.GetSpans()...)
		}
	}
	close(c.changed)
	c.changed = make(chan struct{})
	return &coltrace.ExportTraceServiceResponse{}, nil
}

// Hold makes every export wait, unanswered, until Release (or the exporter gives up).
func (c *Collector) Hold() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held == nil {
		c.held = make(chan struct{})
	}
}

// Release answers the exports held, and every one after.
func (c *Collector) Release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held != nil {
		close(c.held)
		c.held = nil
	}
}

// Exports is the number of export requests received, answered or not.
func (c *Collector) Exports() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exports
}

// Spans returns the spans kept so far, and a channel closed when more arrive.
func (c *Collector) Spans() ([]*tracepb.Span, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*tracepb.Span(nil), c.spans...), c.changed
}

// Resource returns the attribute of the last resource spans arrived from, "" when none.
func (c *Collector) Resource(key string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, kv := range c.resource {
		if kv.GetKey() == key {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}

// Attr returns the value of a span's attribute key, nil when it has none.
func Attr(s *tracepb.Span, key string) *commonpb.AnyValue {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			return kv.GetValue()
		}
	}
	return nil
}

// Str returns a span's string attribute key, "" when it has none.
func Str(s *tracepb.Span, key string) string { return Attr(s, key).GetStringValue() }
