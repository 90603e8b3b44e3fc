package daemon

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
	"github.com/wasmhost/wasmhost/internal/tracing"
)

// receiver is an OpenTelemetry collector's OTLP/gRPC trace receiver, in process: a server of
// the OTLP proto's TraceService that keeps every span it is sent. While held, it takes every
// export and answers none (a collector that hangs).
type receiver struct {
	coltrace.UnimplementedTraceServiceServer
	addr string

	mu       sync.Mutex
	spans    []*tracepb.Span
	resource []*commonpb.KeyValue
	held     chan struct{} // closed to let exports through; nil when not held
	exports  int           // export requests received, answered or not
}

// startReceiver serves a receiver on a loopback port until the test ends.
func startReceiver(t *testing.T) *receiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{addr: ln.Addr().String()}
	srv := grpc.NewServer()
	coltrace.RegisterTraceServiceServer(srv, r)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		r.release()
		srv.Stop()
		<-done
	})
	return r
}

func (r *receiver) Export(ctx context.Context, req *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	r.exports++
	held := r.held
	r.mu.Unlock()
	if held != nil {
		select {
		case <-held:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		r.resource = rs.GetResource().GetAttributes()
		for _, ss := range rs.GetScopeSpans() {
			r.spans = append(r.spans, ss.GetSpans()...)
		}
	}
	return &coltrace.ExportTraceServiceResponse{}, nil
}

// hold makes every export wait until release.
func (r *receiver) hold() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.held = make(chan struct{})
}

func (r *receiver) release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.held != nil {
		close(r.held)
		r.held = nil
	}
}

func (r *receiver) exportsSeen() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.exports
}

// trace returns the spans received of the trace whose root span, named root, has the
// attribute wasmhost.socket = socket, once that root has arrived.
func (r *receiver) trace(t *testing.T, root, socket string) []*tracepb.Span {
	t.Helper()
	var rootSpan *tracepb.Span
	waitUntil(t, fmt.Sprintf("the receiver to get the %s span of %s", root, socket), func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, s := range r.spans {
			if s.GetName() == root && strAttr(s, tracing.AttrSocket) == socket {
				rootSpan = s
				return true
			}
		}
		return false
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range r.spans {
		if string(s.GetTraceId()) == string(rootSpan.GetTraceId()) {
			out = append(out, s)
		}
	}
	return out
}

func attrOf(s *tracepb.Span, key string) *commonpb.AnyValue {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			return kv.GetValue()
		}
	}
	return nil
}

func strAttr(s *tracepb.Span, key string) string { return attrOf(s, key).GetStringValue() }

// tracedDaemonConfig is a daemon's config that traces every registration to r, with the
// traced.example handler (testdata/traced.wat: its validate asks the plugin /svc.Echo/Echo).
func tracedDaemonConfig(t *testing.T, r *receiver) config.Config {
	t.Helper()
	// The SDK's batch processor exports every 5 s by default; the test waits on the spans
	// arriving, and need not wait that long for them.
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
	cfg, _ := testDaemonConfig(t)
	b, err := os.ReadFile(filepath.Join("testdata", "traced.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg.HandlerDir, "traced.wasm"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.Handlers.Types = map[string]config.TypeConfig{"traced.example": {Capabilities: []string{"plugin_call"}}}
	cfg.Tracing = config.TracingConfig{Endpoint: r.addr, SamplingRatePerMillion: 1_000_000}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

const echoMethod = "/svc.Echo/Echo"

func serveTraced(t *testing.T, cfg config.Config, name string) *registrationtest.Plugin {
	return registrationtest.Serve(t, filepath.Join(cfg.SocketDir, name+".sock"),
		registrationtest.Info{Type: "traced.example", Name: name, Versions: []string{"1.0.0"}},
		registrationtest.Options{Calls: map[string][]byte{echoMethod: {0x0a, 0x01, 'y'}}})
}

// TestTraceOfARegistration: with tracing on, one registration with a wasm handler that calls
// its plugin is one trace, as docs/observability.md describes it: the root from the socket
// seen to the notification, with the plugin, its handler's revision and the outcome; GetInfo,
// the handler calls and NotifyRegistrationStatus under it, the handler's plugin_call under
// its call, each call to the plugin a client span with rpc.* and server.address; and the
// plugin received the traceparent of each of its calls, the plugin_call's included.
func TestTraceOfARegistration(t *testing.T) {
	r := startReceiver(t)
	cfg := tracedDaemonConfig(t, r)
	d := runTestDaemon(t, cfg, nil)
	p := serveTraced(t, cfg, "traced-1")
	if n := p.WaitNotification(t, hostileWait); !n.Registered {
		t.Fatalf("notification %+v, want registered", n)
	}
	spans := r.trace(t, tracing.SpanRegister, p.Path())
	byName := map[string]*tracepb.Span{}
	for _, s := range spans {
		if _, dup := byName[s.GetName()]; dup {
			t.Errorf("two spans named %s in the trace", s.GetName())
		}
		byName[s.GetName()] = s
	}
	root := byName[tracing.SpanRegister]
	if len(root.GetParentSpanId()) != 0 {
		t.Errorf("the root has a parent %x", root.GetParentSpanId())
	}
	v, _ := d.State().Plugin(p.Path())
	for key, want := range map[string]string{
		tracing.AttrPluginType: "traced.example",
		tracing.AttrPluginName: "traced-1",
		tracing.AttrSocket:     p.Path(),
		tracing.AttrOutcome:    tracing.OutcomeRegistered,
		tracing.AttrRevision:   "sha256:" + v.HandlerSHA256,
	} {
		if got := strAttr(root, key); got != want || want == "sha256:" {
			t.Errorf("root %s = %q, want %q", key, got, want)
		}
	}
	// parent of each span, by name.
	parents := map[string]string{
		tracing.SpanDial: tracing.SpanRegister,
		"pluginregistration.Registration/GetInfo":                  tracing.SpanRegister,
		"wasmhost.handler.validate":                                tracing.SpanRegister,
		"wasmhost.handler.register":                                tracing.SpanRegister,
		"pluginregistration.Registration/NotifyRegistrationStatus": tracing.SpanRegister,
		"svc.Echo/Echo":                                            "wasmhost.handler.validate",
	}
	for name, parent := range parents {
		s, ok := byName[name]
		if !ok {
			t.Errorf("no span %s in the trace; got %v", name, names(spans))
			continue
		}
		if hex.EncodeToString(s.GetParentSpanId()) != hex.EncodeToString(byName[parent].GetSpanId()) {
			t.Errorf("%s: parent %x, want %s (%x)", name, s.GetParentSpanId(), parent, byName[parent].GetSpanId())
		}
		if s.GetStartTimeUnixNano() < root.GetStartTimeUnixNano() || s.GetEndTimeUnixNano() > root.GetEndTimeUnixNano() {
			t.Errorf("%s is not within the root's time", name)
		}
	}
	for name, method := range map[string]string{
		"pluginregistration.Registration/GetInfo":                  "/pluginregistration.Registration/GetInfo",
		"pluginregistration.Registration/NotifyRegistrationStatus": "/pluginregistration.Registration/NotifyRegistrationStatus",
		"svc.Echo/Echo": echoMethod,
	} {
		s := byName[name]
		if s == nil {
			continue
		}
		if s.GetKind() != tracepb.Span_SPAN_KIND_CLIENT || strAttr(s, tracing.RPCSystem) != "grpc" ||
			"/"+strAttr(s, tracing.RPCService)+"/"+strAttr(s, tracing.RPCMethod) != method || strAttr(s, tracing.ServerAddress) != p.Path() {
			t.Errorf("%s: kind %v, attributes %v; want a client span with rpc.* of %s and server.address %s", name, s.GetKind(), s.GetAttributes(), method, p.Path())
		}
		want := fmt.Sprintf("00-%x-%x-01", s.GetTraceId(), s.GetSpanId())
		if got := p.TraceParents(method); len(got) != 1 || got[0] != want {
			t.Errorf("%s: the plugin received traceparent %q, want %q", method, got, want)
		}
	}
	if got := resourceAttr(r, "service.name"); got != tracing.ServiceName {
		t.Errorf("service.name %q, want %q", got, tracing.ServiceName)
	}
}

func resourceAttr(r *receiver, key string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, kv := range r.resource {
		if kv.GetKey() == key {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}

func names(spans []*tracepb.Span) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.GetName())
	}
	return out
}

// TestTracingCollectorHangs: a collector that takes the spans and never answers holds no
// registration: plugins register one after another while every export waits, and once it
// answers their traces arrive. (What it costs in time is measured by
// BenchmarkE2ERegisterTracing, not asserted here.)
func TestTracingCollectorHangs(t *testing.T) {
	r := startReceiver(t)
	r.hold()
	cfg := tracedDaemonConfig(t, r)
	runTestDaemon(t, cfg, nil)
	first := serveTraced(t, cfg, "traced-1")
	if n := first.WaitNotification(t, hostileWait); !n.Registered {
		t.Fatalf("notification %+v, want registered", n)
	}
	waitUntil(t, "the collector to be sent the first spans", func() bool { return r.exportsSeen() > 0 })
	// The exporter is now stuck in an export the collector does not answer.
	for i := 2; i <= 4; i++ {
		p := serveTraced(t, cfg, fmt.Sprintf("traced-%d", i))
		if n := p.WaitNotification(t, hostileWait); !n.Registered {
			t.Fatalf("%s: notification %+v, want registered", p.Path(), n)
		}
	}
	r.release()
	r.trace(t, tracing.SpanRegister, first.Path())
}

// TestTracingCollectorDown: with no collector listening at the endpoint, plugins register, and
// the daemon stops within its shutdown (runTestDaemon waits for Run to return).
func TestTracingCollectorDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nobody listens there now
	cfg := tracedDaemonConfig(t, &receiver{addr: addr})
	runTestDaemon(t, cfg, nil)
	for i := 1; i <= 3; i++ {
		p := serveTraced(t, cfg, fmt.Sprintf("traced-%d", i))
		if n := p.WaitNotification(t, hostileWait); !n.Registered {
			t.Fatalf("%s: notification %+v, want registered", p.Path(), n)
		}
	}
}
