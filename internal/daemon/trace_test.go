package daemon

import (
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/oci/ocitest"
	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
	"github.com/wasmhost/wasmhost/internal/tracing"
	"github.com/wasmhost/wasmhost/internal/tracing/tracingtest"
)

// traceOf returns the spans c received of the trace whose root span, named root, has the
// attribute wasmhost.socket = socket, once that root has arrived.
func traceOf(t *testing.T, c *tracingtest.Collector, root, socket string) []*tracepb.Span {
	t.Helper()
	var spans []*tracepb.Span
	var rootSpan *tracepb.Span
	waitUntil(t, fmt.Sprintf("the collector to get the %s span of %s", root, socket), func() bool {
		spans, _ = c.Spans()
		for _, s := range spans {
			if s.GetName() == root && tracingtest.Str(s, tracing.AttrSocket) == socket {
				rootSpan = s
				return true
			}
		}
		return false
	})
	var out []*tracepb.Span
	for _, s := range spans {
		if string(s.GetTraceId()) == string(rootSpan.GetTraceId()) {
			out = append(out, s)
		}
	}
	return out
}

func strAttr(s *tracepb.Span, key string) string { return tracingtest.Str(s, key) }

// tracedDaemonConfig is a daemon's config that traces every registration to r, with the
// traced.example handler (testdata/traced.wat: its validate asks the plugin /svc.Echo/Echo).
func tracedDaemonConfig(t *testing.T, endpoint string) config.Config {
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
	cfg.Tracing = config.TracingConfig{Endpoint: endpoint, SamplingRatePerMillion: 1_000_000}
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
// the registrar's handler calls and NotifyRegistrationStatus under it, the guest's call (its
// export, CPU, memory, host calls, result code) under each, the handler's plugin_call under the
// guest's call, each call to the plugin a client span with rpc.* and server.address; and the
// plugin received the traceparent of each of its calls, the plugin_call's included.
func TestTraceOfARegistration(t *testing.T) {
	r := tracingtest.Start(t)
	cfg := tracedDaemonConfig(t, r.Addr)
	d := runTestDaemon(t, cfg, nil)
	p := serveTraced(t, cfg, "traced-1")
	if n := p.WaitNotification(t, hostileWait); !n.Registered {
		t.Fatalf("notification %+v, want registered", n)
	}
	spans := traceOf(t, r, tracing.SpanRegister, p.Path())
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
		tracing.SpanQueued:                                         tracing.SpanRegister,
		tracing.SpanDial:                                           tracing.SpanRegister,
		"pluginregistration.Registration/GetInfo":                  tracing.SpanRegister,
		"wasmhost.handler.validate":                                tracing.SpanRegister,
		"wasmhost.handler.register":                                tracing.SpanRegister,
		"pluginregistration.Registration/NotifyRegistrationStatus": tracing.SpanRegister,
		"wasmhost.call.wasmhost_validate":                          "wasmhost.handler.validate",
		"wasmhost.call.wasmhost_register":                          "wasmhost.handler.register",
		"svc.Echo/Echo":                                            "wasmhost.call.wasmhost_validate",
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
	// A first pass starts when the socket was seen: its wait until the pass began is a span.
	if q := byName[tracing.SpanQueued]; q != nil && q.GetStartTimeUnixNano() != root.GetStartTimeUnixNano() {
		t.Errorf("the wait starts at %d, the root at %d: want both at the socket seen", q.GetStartTimeUnixNano(), root.GetStartTimeUnixNano())
	}
	if a := tracingtest.Attr(root, tracing.AttrAttempt); a.GetIntValue() != 1 {
		t.Errorf("root %s = %v, want 1", tracing.AttrAttempt, a)
	}
	// The guest's call: what it cost, and its answer. The handler's validate makes one host
	// call (plugin_call) and answers 0 (StatusOK); its memory is one page.
	if call := byName["wasmhost.call.wasmhost_validate"]; call != nil {
		for key, want := range map[string]int64{tracing.AttrHostCalls: 1, tracing.AttrResultCode: 0, tracing.AttrMemory: 65536} {
			if got := tracingtest.Attr(call, key); got == nil || got.GetIntValue() != want {
				t.Errorf("handler call %s = %v, want %d", key, got, want)
			}
		}
		if cpu := tracingtest.Attr(call, tracing.AttrCPU).GetIntValue(); cpu <= 0 {
			t.Errorf("handler call %s = %d, want the CPU it used", tracing.AttrCPU, cpu)
		}
		if strAttr(call, tracing.AttrExport) != "wasmhost_validate" || strAttr(call, tracing.AttrRevision) != "sha256:"+v.HandlerSHA256 {
			t.Errorf("handler call attributes %v", call.GetAttributes())
		}
	}
	// The handler's load, before: a trace of its own (spans end in order, so it has arrived).
	all, _ := r.Spans()
	var reload *tracepb.Span
	for _, s := range all {
		if s.GetName() == tracing.SpanReload && strAttr(s, tracing.AttrFile) == filepath.Join(cfg.HandlerDir, "traced.wasm") {
			reload = s
		}
	}
	if reload == nil || strAttr(reload, tracing.AttrOutcome) != "loaded" || strAttr(reload, tracing.AttrRevision) != "sha256:"+v.HandlerSHA256 || len(reload.GetParentSpanId()) != 0 {
		t.Errorf("the load of traced.wasm: %v, want a root span, loaded, its revision", reload)
	}
	if got := r.Resource("service.name"); got != tracing.ServiceName {
		t.Errorf("service.name %q, want %q", got, tracing.ServiceName)
	}
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
	r := tracingtest.Start(t)
	r.Hold()
	cfg := tracedDaemonConfig(t, r.Addr)
	runTestDaemon(t, cfg, nil)
	first := serveTraced(t, cfg, "traced-1")
	if n := first.WaitNotification(t, hostileWait); !n.Registered {
		t.Fatalf("notification %+v, want registered", n)
	}
	waitUntil(t, "the collector to be sent the first spans", func() bool { return r.Exports() > 0 })
	// The exporter is now stuck in an export the collector does not answer.
	for i := 2; i <= 4; i++ {
		p := serveTraced(t, cfg, fmt.Sprintf("traced-%d", i))
		if n := p.WaitNotification(t, hostileWait); !n.Registered {
			t.Fatalf("%s: notification %+v, want registered", p.Path(), n)
		}
	}
	r.Release()
	traceOf(t, r, tracing.SpanRegister, first.Path())
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
	cfg := tracedDaemonConfig(t, addr)
	runTestDaemon(t, cfg, nil)
	for i := 1; i <= 3; i++ {
		p := serveTraced(t, cfg, fmt.Sprintf("traced-%d", i))
		if n := p.WaitNotification(t, hostileWait); !n.Registered {
			t.Fatalf("%s: notification %+v, want registered", p.Path(), n)
		}
	}
}

// TestTracesOfPullsAndPublishing: a handler source pulled from a registry is a trace of its
// own, its signature check a span under it; each write of a sink is a trace of its own.
func TestTracesOfPullsAndPublishing(t *testing.T) {
	reg := ocitest.Start(t)
	key := ocitest.NewKey(t, t.TempDir(), "trusted")
	ref := ocitest.PushArtifact(t, reg.Ref("h/ok:v1"), testdataModule(t, "ok")) // ok.example
	ocitest.Sign(t, ref, key)
	c := tracingtest.Start(t)
	cfg := tracedDaemonConfig(t, c.Addr)
	cfg.Handlers.Sources = []string{ref.String()}
	cfg.Handlers.Trust = config.TrustConfig{Keys: []config.TrustKey{{PublicKey: key.PublicPEM, PluginTypes: []string{"ok.example"}}}}
	cfg.Publish.FeatureFile.Dir = t.TempDir()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	runTestDaemon(t, cfg, nil)
	var pull, verify, write *tracepb.Span
	waitUntil(t, "the spans of the pull, its signature check and a write of the feature file", func() bool {
		spans, _ := c.Spans()
		for _, s := range spans {
			switch s.GetName() {
			case tracing.SpanPull:
				pull = s
			case tracing.SpanVerify:
				verify = s
			case tracing.SpanPublish + ".featureFile":
				write = s
			}
		}
		return pull != nil && verify != nil && write != nil
	})
	if strAttr(pull, tracing.AttrSource) != ref.String() || strAttr(pull, tracing.AttrOutcome) != "pulled" || len(pull.GetParentSpanId()) != 0 {
		t.Errorf("pull span: attributes %v, parent %x; want the source, pulled, a root", pull.GetAttributes(), pull.GetParentSpanId())
	}
	if string(verify.GetParentSpanId()) != string(pull.GetSpanId()) {
		t.Errorf("the signature check's parent is %x, want the pull %x", verify.GetParentSpanId(), pull.GetSpanId())
	}
	if by := tracingtest.Attr(verify, "wasmhost.oci.signed_by").GetArrayValue().GetValues(); len(by) != 1 {
		t.Errorf("signed_by %v, want the one key", by)
	}
	if strAttr(write, tracing.AttrSink) != "featureFile" || len(write.GetParentSpanId()) != 0 || write.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("write span: attributes %v, status %v; want featureFile, a root, not an error", write.GetAttributes(), write.GetStatus())
	}
}
