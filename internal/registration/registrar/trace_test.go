package registrar_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	regapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/registration/registrar"
	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
	"github.com/wasmhost/wasmhost/internal/state"
	"github.com/wasmhost/wasmhost/internal/tracing"
)

// traced is a tracer that samples everything and keeps the spans ended, in order.
func traced(t *testing.T) (trace.Tracer, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(tracing.Sampler(1_000_000)))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp.Tracer(tracing.TracerName), exp
}

// registerTraced runs Register under a root span, as the reconciler does.
func registerTraced(e *env, tr trace.Tracer, path string) error {
	ctx, root := tracing.StartRoot(context.Background(), tr, tracing.SpanRegister)
	err := e.reg.Register(ctx, state.Socket{Path: path, ID: state.Identity{Ino: 42}})
	tracing.End(root, err, "")
	return err
}

func attrOf(s tracetest.SpanStub, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// TestRegisterTraced: a registration is one trace: the root says which plugin and how it went;
// the dial, GetInfo, each handler call and the notification are its children, each call to
// the plugin a client span with the semantic conventions' rpc.* and server.address; the
// plugin receives the traceparent of the span of its call.
func TestRegisterTraced(t *testing.T) {
	tr, exp := traced(t)
	e := newEnv(t, func(c *registrar.Config) { c.Tracer = tr })
	p := e.serve("demo", demoInfo("demo-1"), registrationtest.Options{})
	if err := registerTraced(e, tr, p.Path()); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	byName := map[string]tracetest.SpanStub{}
	var order []string
	for _, s := range spans {
		byName[s.Name] = s
		order = append(order, s.Name)
	}
	want := []string{tracing.SpanDial, "pluginregistration.Registration/GetInfo", "wasmhost.handler.validate", "wasmhost.handler.register", "pluginregistration.Registration/NotifyRegistrationStatus", tracing.SpanRegister}
	if strings.Join(order, " ") != strings.Join(want, " ") {
		t.Fatalf("spans ended: %v, want %v", order, want)
	}
	root := byName[tracing.SpanRegister]
	for _, s := range spans[:len(spans)-1] {
		if s.Parent.SpanID() != root.SpanContext.SpanID() || s.SpanContext.TraceID() != root.SpanContext.TraceID() {
			t.Errorf("%s: parent %s, want the root %s", s.Name, s.Parent.SpanID(), root.SpanContext.SpanID())
		}
	}
	for key, want := range map[string]string{tracing.AttrPluginType: testType, tracing.AttrPluginName: "demo-1", tracing.AttrSocket: p.Path(), tracing.AttrOutcome: tracing.OutcomeRegistered} {
		if v, _ := attrOf(root, key); v.AsString() != want {
			t.Errorf("root %s = %q, want %q", key, v.AsString(), want)
		}
	}
	gi := byName["pluginregistration.Registration/GetInfo"]
	if gi.SpanKind != trace.SpanKindClient {
		t.Errorf("GetInfo span kind %v, want client", gi.SpanKind)
	}
	for key, want := range map[string]string{tracing.RPCSystem: "grpc", tracing.RPCService: "pluginregistration.Registration", tracing.RPCMethod: "GetInfo", tracing.ServerAddress: p.Path()} {
		if v, _ := attrOf(gi, key); v.AsString() != want {
			t.Errorf("GetInfo %s = %q, want %q", key, v.AsString(), want)
		}
	}
	if v, _ := attrOf(byName["pluginregistration.Registration/NotifyRegistrationStatus"], tracing.AttrRegistered); !v.AsBool() {
		t.Error("the notification's span does not say registered")
	}
	for method, span := range map[string]string{
		regapi.Registration_GetInfo_FullMethodName:                  "pluginregistration.Registration/GetInfo",
		regapi.Registration_NotifyRegistrationStatus_FullMethodName: "pluginregistration.Registration/NotifyRegistrationStatus",
	} {
		sc := byName[span].SpanContext
		want := fmt.Sprintf("00-%s-%s-01", sc.TraceID(), sc.SpanID())
		if got := p.TraceParents(method); len(got) != 1 || got[0] != want {
			t.Errorf("%s: the plugin received traceparent %q, want %q", method, got, want)
		}
	}
}

// TestRegisterTracedRefused: a plugin its handler refuses ends a trace whose root and handler
// span say so (error.type rejected), with the notification that told it no.
func TestRegisterTracedRefused(t *testing.T) {
	tr, exp := traced(t)
	e := newEnv(t, func(c *registrar.Config) { c.Tracer = tr })
	e.handler.SetError(registrationtest.MethodValidate, fmt.Errorf("%w: version v1 unsupported", registration.ErrRejected))
	p := e.serve("demo", demoInfo("demo-1"), registrationtest.Options{})
	if err := registerTraced(e, tr, p.Path()); !errors.Is(err, registration.ErrRejected) {
		t.Fatalf("Register: %v, want rejected", err)
	}
	byName := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		byName[s.Name] = s
	}
	for _, name := range []string{tracing.SpanRegister, "wasmhost.handler.validate"} {
		s := byName[name]
		if v, _ := attrOf(s, tracing.ErrorType); v.AsString() != "rejected" || s.Status.Code.String() != "Error" {
			t.Errorf("%s: error.type %q status %v, want rejected, Error", name, v.AsString(), s.Status)
		}
	}
	if v, _ := attrOf(byName[tracing.SpanRegister], tracing.AttrOutcome); v.AsString() != "rejected" {
		t.Errorf("root outcome %q, want rejected", v.AsString())
	}
	if v, ok := attrOf(byName["pluginregistration.Registration/NotifyRegistrationStatus"], tracing.AttrRegistered); !ok || v.AsBool() {
		t.Error("no span of the notification that told the plugin no")
	}
	if _, ok := byName["wasmhost.handler.register"]; ok {
		t.Error("a span of RegisterPlugin, which a refused plugin never reaches")
	}
}

// TestRegisterUntracedSendsNoParent: without a tracer nothing is traced and no traceparent is
// sent.
func TestRegisterUntracedSendsNoParent(t *testing.T) {
	e := newEnv(t, nil)
	p := e.serve("demo", demoInfo("demo-1"), registrationtest.Options{})
	if err := e.register(p.Path()); err != nil {
		t.Fatal(err)
	}
	if got := p.TraceParents(regapi.Registration_GetInfo_FullMethodName); len(got) != 1 || got[0] != "" {
		t.Errorf("traceparents %q, want one call with none", got)
	}
}

// TestPluginCallTraced: a plugin_call is a client span under the caller's, and the plugin
// receives its traceparent in the request's metadata.
func TestPluginCallTraced(t *testing.T) {
	tr, exp := traced(t)
	dir := registrationtest.SocketDir(t)
	const method = "/csi.v1.Node/NodeGetInfo"
	p := registrationtest.Serve(t, dir+"/csi.sock", demoInfo("csi"), registrationtest.Options{Calls: map[string][]byte{method: {0x0a, 0x01, 'n'}}})
	ctx, parent := tr.Start(context.Background(), "handler call")
	if _, err := (registrar.PluginCaller{Tracer: tr}).Call(ctx, "unix://"+p.Path(), method, nil, 1<<10); err != nil {
		t.Fatal(err)
	}
	parent.End()
	spans := exp.GetSpans()
	if len(spans) != 2 || spans[0].Name != "csi.v1.Node/NodeGetInfo" || spans[0].SpanKind != trace.SpanKindClient ||
		spans[0].Parent.SpanID() != parent.SpanContext().SpanID() {
		t.Fatalf("spans %+v, want the call's client span under the caller's", spans)
	}
	for key, want := range map[string]string{tracing.RPCSystem: "grpc", tracing.RPCService: "csi.v1.Node", tracing.RPCMethod: "NodeGetInfo", tracing.ServerAddress: p.Path()} {
		if v, _ := attrOf(spans[0], key); v.AsString() != want {
			t.Errorf("%s = %q, want %q", key, v.AsString(), want)
		}
	}
	sc := spans[0].SpanContext
	if got, want := p.TraceParents(method), fmt.Sprintf("00-%s-%s-01", sc.TraceID(), sc.SpanID()); len(got) != 1 || got[0] != want {
		t.Errorf("the plugin received traceparent %q, want %q", got, want)
	}
	// Without a tracer, nothing is sent.
	if _, err := (registrar.PluginCaller{}).Call(context.Background(), p.Path(), method, nil, 1<<10); err != nil {
		t.Fatal(err)
	}
	if got := p.TraceParents(method); len(got) != 2 || got[1] != "" {
		t.Errorf("untraced call: traceparents %q, want none the second time", got)
	}
}

// BenchmarkRegisterTraced is BenchmarkRegisterOne under a pass's root span, as the reconciler
// starts it: tracing off (no tracer), on at 1 in a million (a span context and a sampling
// decision, nothing recorded), and on for every pass (the spans recorded and handed to an
// exporter that drops them): what tracing adds to the registrar's CPU and allocations.
func BenchmarkRegisterTraced(b *testing.B) {
	for _, bc := range []struct {
		name string
		rate int32 // 0: off
	}{{"off", 0}, {"1-per-million", 1}, {"every", 1_000_000}} {
		b.Run(bc.name, func(b *testing.B) {
			var tr trace.Tracer
			if bc.rate > 0 {
				tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter()), sdktrace.WithSampler(tracing.Sampler(bc.rate)))
				b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
				tr = tp.Tracer(tracing.TracerName)
			}
			handlers := registration.NewRegistry()
			handlers.Set(testType, registrationtest.NewRecordingHandler())
			actual := state.NewActual()
			reg, err := registrar.New(registrar.Config{Handlers: handlers, Actual: actual, Tracer: tr})
			if err != nil {
				b.Fatal(err)
			}
			p := registrationtest.Serve(b, registrationtest.SocketDir(b)+"/one.sock", demoInfo("one"), registrationtest.Options{})
			s := state.Socket{Path: p.Path(), Seen: time.Now()}
			b.ReportAllocs()
			for b.Loop() {
				ctx, root := tracing.StartRoot(context.Background(), tr, tracing.SpanRegister)
				err := reg.Register(ctx, s)
				tracing.End(root, err, "")
				if err != nil {
					b.Fatal(err)
				}
				actual.Remove(s.Path)
			}
		})
	}
}
