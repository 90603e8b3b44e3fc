package registrar

import (
	"context"
	"errors"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/status"

	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/tracing"
	"github.com/wasmhost/wasmhost/internal/typeslots"
)

// The spans of a registration pass (docs/observability.md, Traces). The pass's root span is
// the caller's (the reconciler starts one per operation); Register and Deregister say on it
// which plugin it was, with what revision of its handler and how it went, and add a child
// span for the dial, each call to the plugin (GetInfo, NotifyRegistrationStatus) and each
// handler call, under which the host traces the guest's export and its plugin_call.

// startRPC starts the client span of a call to the plugin at socket, of the gRPC method
// fullMethod (/package.Service/Method).
func (r *Registrar) startRPC(ctx context.Context, fullMethod, socket string) (context.Context, trace.Span) {
	ctx, span := tracing.Start(ctx, r.cfg.Tracer, strings.TrimPrefix(fullMethod, "/"), trace.SpanKindClient)
	if span.IsRecording() {
		span.SetAttributes(rpcAttributes(fullMethod, socket)...)
	}
	return ctx, span
}

// rpcAttributes are the semantic conventions' attributes of a gRPC call of fullMethod to the
// unix socket at address.
func rpcAttributes(fullMethod, address string) []attribute.KeyValue {
	svc, method, _ := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	return []attribute.KeyValue{
		attribute.String(tracing.RPCSystem, "grpc"),
		attribute.String(tracing.RPCService, svc),
		attribute.String(tracing.RPCMethod, method),
		attribute.String(tracing.ServerAddress, address),
	}
}

// endRPC ends the span of a call to the plugin, with its gRPC status.
func (r *Registrar) endRPC(span trace.Span, err error) {
	if span.IsRecording() {
		span.SetAttributes(attribute.Int(tracing.RPCStatusCode, int(status.Code(err))))
	}
	tracing.End(span, err, r.errorType(err))
}

// endPass says on the pass's root span which plugin it was and how it went.
func (r *Registrar) endPass(ctx context.Context, socket string, err error) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{attribute.String(tracing.AttrSocket, socket)}
	var pe *PluginError
	switch {
	case err == nil:
		attrs = append(attrs, attribute.String(tracing.AttrOutcome, tracing.OutcomeRegistered))
		if p, ok := r.cfg.Actual.Get(socket); ok {
			attrs = append(attrs,
				attribute.String(tracing.AttrPluginType, p.Type),
				attribute.String(tracing.AttrPluginName, p.Name),
				attribute.Bool(tracing.AttrStandby, p.Standby))
			if p.HandlerSHA256 != "" {
				attrs = append(attrs, attribute.String(tracing.AttrRevision, "sha256:"+p.HandlerSHA256))
			}
		}
	case errors.As(err, &pe):
		attrs = append(attrs,
			attribute.String(tracing.AttrOutcome, r.errorType(err)),
			attribute.String(tracing.AttrPluginType, pe.Type),
			attribute.String(tracing.AttrPluginName, pe.Name))
	default:
		attrs = append(attrs, attribute.String(tracing.AttrOutcome, r.errorType(err)))
	}
	span.SetAttributes(attrs...)
	if err != nil {
		span.SetAttributes(attribute.String(tracing.ErrorType, r.errorType(err)))
	}
}

// errorType names the class of err for error.type and the outcome: Config.ErrorType's (the
// daemon's: the metrics' result label), else the registration sentinel it wraps.
func (r *Registrar) errorType(err error) string {
	if err == nil {
		return ""
	}
	if f := r.cfg.ErrorType; f != nil {
		return f(err)
	}
	return ErrorType(err)
}

// ErrorType names the registration sentinel err wraps: the class of a failure, for error.type.
func ErrorType(err error) string {
	for _, c := range []struct {
		err  error
		name string
	}{
		{context.DeadlineExceeded, "timeout"},
		{typeslots.ErrBusy, "type_busy"},
		{registration.ErrProtocol, "protocol"},
		{registration.ErrNoHandler, "no_handler"},
		{registration.ErrRejected, "rejected"},
		{registration.ErrHandlerFailed, "handler_failed"},
		{registration.ErrUnreachable, "unreachable"},
		{registration.ErrInvalidInfo, "invalid_info"},
		{registration.ErrNotifyFailed, "notify_failed"},
	} {
		if errors.Is(err, c.err) {
			return c.name
		}
	}
	return "error"
}
