package sandbox

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/tracing"
)

// startSpan starts the span of a handler call, wasmhost.call.<export>, under the caller's
// (the registrar's handler call, in a registration's trace); the guest's plugin_call is traced
// under it. Nothing when the caller's trace is not sampled or tracing is off.
func (m *Module) startSpan(ctx context.Context, fn int, st *callState) (context.Context, trace.Span) {
	ctx, span := tracing.Start(ctx, m.sb.cfg.Tracer, callSpanNames[fn], trace.SpanKindInternal)
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String(tracing.AttrExport, st.export),
			attribute.String(tracing.AttrPluginType, st.pluginType),
			attribute.String(tracing.AttrPluginName, st.plugin),
			attribute.String(tracing.AttrHandler, m.file),
			attribute.String(tracing.AttrRevision, "sha256:"+m.sum))
	}
	return ctx, span
}

// callSpanNames are the names of the spans of the exports' calls, wasmhost.call.<export>,
// made once: a name made per call would cost an allocation with tracing off.
var callSpanNames = func() (names [numExports]string) {
	for i, e := range exportNames {
		names[i] = tracing.SpanCall + "." + e
	}
	return names
}()

// endSpan ends the span of a handler call with what it cost: CPU, memory, host calls, the
// export's result code, and on failure the class of the failure.
func (m *Module) endSpan(span trace.Span, st *callState, err error) {
	if span.IsRecording() {
		span.SetAttributes(
			attribute.Int64(tracing.AttrCPU, int64(st.cpu)),
			attribute.Int64(tracing.AttrMemory, st.mem),
			attribute.Int(tracing.AttrHostCalls, st.hostCalls),
			attribute.Int(tracing.AttrResultCode, int(st.status)))
	}
	tracing.End(span, err, callErrorType(err))
}

// callErrorType names the class of a handler call's failure, for error.type.
func callErrorType(err error) string {
	for _, c := range []struct {
		err  error
		name string
	}{
		{registration.ErrRejected, "rejected"},
		{context.DeadlineExceeded, "timeout"},
		{ErrCPUBudget, "cpu_budget"},
		{ErrBudget, "budget"},
		{ErrTrap, "trap"},
		{ErrBadResult, "bad_result"},
		{ErrHandlerFailed, "handler_failed"},
		{ErrRetired, "retired"},
		{ErrClosed, "closed"},
	} {
		if errors.Is(err, c.err) {
			return c.name
		}
	}
	return "error"
}
