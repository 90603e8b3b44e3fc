package interop

import (
	"context"
	"fmt"
	"net"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configgrpc"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/receiver/receivertest"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// collectorSpan is one span the collector received, with what the test looks at.
type collectorSpan struct {
	name, id, parent, trace string
	attrs                   map[string]any
}

// startCollector runs the OpenTelemetry collector's own OTLP receiver (otlpreceiver, gRPC
// only) on a loopback port, into a sink, until the test ends; it returns its address.
func startCollector(t *testing.T) (string, *consumertest.TracesSink) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	f := otlpreceiver.NewFactory()
	cfg := f.CreateDefaultConfig().(*otlpreceiver.Config)
	grpcCfg := configgrpc.NewDefaultServerConfig()
	grpcCfg.NetAddr.Endpoint = addr
	cfg.Protocols.GRPC = configoptional.Some(grpcCfg)
	cfg.Protocols.HTTP = configoptional.None[otlpreceiver.HTTPConfig]()
	sink := new(consumertest.TracesSink)
	r, err := f.CreateTraces(t.Context(), receivertest.NewNopSettings(f.Type()), cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(t.Context(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Shutdown(context.Background()) })
	return addr, sink
}

// spansOf flattens what the sink received.
func spansOf(sink *consumertest.TracesSink) []collectorSpan {
	var out []collectorSpan
	for _, td := range sink.AllTraces() {
		for _, rs := range td.ResourceSpans().All() {
			for _, ss := range rs.ScopeSpans().All() {
				for _, s := range ss.Spans().All() {
					out = append(out, collectorSpanOf(s))
				}
			}
		}
	}
	return out
}

func collectorSpanOf(s ptrace.Span) collectorSpan {
	c := collectorSpan{name: s.Name(), id: s.SpanID().String(), trace: s.TraceID().String(), attrs: s.Attributes().AsRaw()}
	if !s.ParentSpanID().IsEmpty() {
		c.parent = s.ParentSpanID().String()
	}
	return c
}

// TestTracesToTheCollector: `wasmhost run` with a tracing section, the shipped CSI handler and
// a CSI driver (the node-driver-registrar stand-in of these tests): the OpenTelemetry
// collector's own OTLP receiver gets the registration as one trace, from the socket to
// Notify, with the handler's call and its NodeGetInfo inside it; and the driver's gRPC server
// received the traceparent of that NodeGetInfo.
func TestTracesToTheCollector(t *testing.T) {
	addr, sink := startCollector(t)
	d := newDirs(t)
	startDaemon(t, d, daemonOptions{
		Handlers: []string{"csi"},
		Config: "apiVersion: wasmhost.dev/v1alpha1\nkind: WasmhostConfiguration\nhandlers:\n  types:\n    CSIPlugin:\n" +
			"      capabilities: [plugin_call]\n      pluginCallEndpoints: [" + d.Data + "]\n" +
			"tracing:\n  endpoint: " + addr + "\n  samplingRatePerMillion: 1000000\n",
	})
	const driver = "csi.interop.dev"
	p := startCSI(t, d, driver)
	p.calls.waitRegistered(t)

	var root collectorSpan
	waitFor(t, "the collector to receive the registration's root span", func() string {
		for _, s := range spansOf(sink) {
			if s.name == "wasmhost.register" && s.attrs["wasmhost.socket"] == p.RegSocket && s.attrs["wasmhost.outcome"] == "registered" {
				root = s
				return ""
			}
		}
		return fmt.Sprintf("%d spans received", sink.SpanCount())
	})
	if root.parent != "" || root.attrs["wasmhost.plugin.type"] != registerapi.CSIPlugin || root.attrs["wasmhost.plugin.name"] != driver {
		t.Errorf("root span %+v: want a root naming the CSI plugin", root)
	}
	byID, byName := map[string]collectorSpan{}, map[string][]collectorSpan{}
	for _, s := range spansOf(sink) {
		if s.trace == root.trace {
			byID[s.id] = s
			byName[s.name] = append(byName[s.name], s)
		}
	}
	for _, name := range []string{"pluginregistration.Registration/GetInfo", "wasmhost.handler.validate", "wasmhost.handler.register", "pluginregistration.Registration/NotifyRegistrationStatus"} {
		if s := byName[name]; len(s) != 1 || s[0].parent != root.id {
			t.Errorf("%s: %+v, want one span under the root", name, s)
		}
	}
	calls := byName["csi.v1.Node/NodeGetInfo"]
	if len(calls) == 0 {
		t.Fatalf("no NodeGetInfo span in the trace; spans: %v", byName)
	}
	for _, c := range calls {
		guest := byID[c.parent]
		handler := byID[guest.parent]
		if len(guest.name) < len("wasmhost.call.") || guest.name[:len("wasmhost.call.")] != "wasmhost.call." || handler.parent != root.id ||
			c.attrs["rpc.system"] != "grpc" || c.attrs["rpc.service"] != "csi.v1.Node" || c.attrs["rpc.method"] != "NodeGetInfo" || c.attrs["server.address"] != p.Endpoint {
			t.Errorf("NodeGetInfo span %+v under %q under %q: want the guest's call under a handler call under the root, with rpc.* and server.address", c, guest.name, handler.name)
		}
	}
	want := map[string]bool{}
	for _, c := range calls {
		want[fmt.Sprintf("00-%s-%s-01", c.trace, c.id)] = true
	}
	got := p.csi.TraceParents()
	if len(got) != len(calls) {
		t.Errorf("the driver received traceparents %q for %d NodeGetInfo spans", got, len(calls))
	}
	for _, tp := range got {
		if !want[tp] {
			t.Errorf("the driver received traceparent %q, which names no NodeGetInfo span of the trace (%v)", tp, want)
		}
	}
}
