// Package tracing is the daemon's OpenTelemetry tracing, in the kubelet's style: off unless
// configured, spans exported over OTLP/gRPC to a collector, sampled at a rate per million of
// new traces. It holds what every traced stage shares: the tracer provider (a no-op one when
// off, so that a span costs a call that does nothing), the attribute names, and the W3C
// trace-context propagation into a plugin call's metadata. The stages take a trace.Tracer and
// start their own spans; a nil one means off.
//
// A collector that is down or slow never holds a registration: spans are queued and exported
// in the background, and dropped when the queue is full.
//
// This package is part of the daemon, not a stable API.
package tracing

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Config is the daemon's tracing: the kubelet's TracingConfiguration, with its names.
type Config struct {
	// Endpoint is the collector's OTLP/gRPC address, host:port. Defaults to "": tracing off.
	// A config file with a tracing section and no endpoint gets DefaultEndpoint, as the
	// kubelet's does.
	Endpoint string
	// SamplingRatePerMillion is how many new traces in a million are sampled. Defaults to 0,
	// as in the kubelet: none (a span whose parent was sampled would be, but the daemon's
	// traces start in the daemon). Up to 1000000: every one.
	SamplingRatePerMillion int32
	// Version is the daemon's version, the resource's service.version.
	Version string
	// ExportTimeout bounds each export to the collector, its retries included. Defaults to
	// DefaultExportTimeout.
	ExportTimeout time.Duration
	// Logger is told when exports fail (a collector down), at most once per
	// failureLogInterval. Defaults to nil: discarded.
	Logger *slog.Logger
}

// failureLogInterval spaces the warnings of failed exports: a collector that is down fails
// every batch.
const failureLogInterval = time.Minute

// DefaultEndpoint is the collector's address when a tracing section names none: the OTLP
// gRPC port on the node, the kubelet's default.
const DefaultEndpoint = "localhost:4317"

// DefaultExportTimeout bounds one export. A collector that hangs costs the exporter's
// goroutine this long, never a registration.
const DefaultExportTimeout = 5 * time.Second

// ShutdownGrace is how long shutdown waits for the spans still queued to be exported; past
// it, the export in progress is abandoned and the rest dropped, so that a collector that is
// down or hangs delays the daemon's exit by this much at most.
const ShutdownGrace = time.Second

// ServiceName is the resource's service.name.
const ServiceName = "wasmhost"

// TracerName is the instrumentation scope of the daemon's spans.
const TracerName = "github.com/wasmhost/wasmhost"

// ErrConfig is the error of a tracing section that cannot be used.
var ErrConfig = errors.New("tracing: invalid configuration")

// On reports whether c turns tracing on: a collector to export to and a rate above 0 (with 0,
// no trace the daemon starts is ever sampled, so nothing is set up).
func (c Config) On() bool { return c.Endpoint != "" && c.SamplingRatePerMillion > 0 }

// Validate checks the endpoint is host:port and the rate within 0..1000000.
func (c Config) Validate() error {
	if c.SamplingRatePerMillion < 0 || c.SamplingRatePerMillion > 1_000_000 {
		return fmt.Errorf("%w: tracing.samplingRatePerMillion %d: must be 0 to 1000000", ErrConfig, c.SamplingRatePerMillion)
	}
	if c.Endpoint == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(c.Endpoint)
	if err != nil {
		return fmt.Errorf("%w: tracing.endpoint %q: want host:port (OTLP over gRPC, e.g. %s): %v", ErrConfig, c.Endpoint, DefaultEndpoint, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || host == "" {
		return fmt.Errorf("%w: tracing.endpoint %q: want host:port with a port 1-65535 (OTLP over gRPC, e.g. %s)", ErrConfig, c.Endpoint, DefaultEndpoint)
	}
	return nil
}

// Provider gives the daemon's tracer and flushes it at shutdown. The zero value and nil are
// off.
type Provider struct {
	sdk   *sdktrace.TracerProvider // nil when off
	abort context.CancelFunc       // ends every export in progress and to come
}

// New returns the provider of c: off (a no-op tracer) unless c.On. The exporter connects
// lazily and reconnects by itself: a collector that is not there yet is not an error.
func New(ctx context.Context, c Config) (*Provider, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if !c.On() {
		return &Provider{}, nil
	}
	if c.ExportTimeout <= 0 {
		c.ExportTimeout = DefaultExportTimeout
	}
	exp, err := otlptracegrpc.New(ctx,
		otlptracegrpc.WithEndpoint(c.Endpoint),
		otlptracegrpc.WithInsecure(), // a collector on the node or beside the daemon
		otlptracegrpc.WithTimeout(c.ExportTimeout),
	)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter to %s: %w", c.Endpoint, err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", ServiceName),
		attribute.String("service.version", c.Version),
	))
	if err != nil {
		res = resource.Default()
	}
	abortCtx, abort := context.WithCancel(context.WithoutCancel(ctx))
	otel.SetErrorHandler(failureLog(c, abortCtx))
	sdk := sdktrace.NewTracerProvider(
		// Spans wait in a bounded queue and leave in batches from a goroutine of their own;
		// a full queue drops them (the SDK's default, kept on purpose: a registration never
		// waits for the collector).
		sdktrace.WithBatcher(abortable{exp, abortCtx}, sdktrace.WithExportTimeout(c.ExportTimeout)),
		sdktrace.WithSampler(Sampler(c.SamplingRatePerMillion)),
		sdktrace.WithResource(res),
		sdktrace.WithRawSpanLimits(spanLimits()),
	)
	return &Provider{sdk: sdk, abort: abort}, nil
}

// MaxAttributeBytes bounds each string attribute of a span, in bytes: a plugin's name,
// endpoint or error text, a handler's trap, as the daemon received them (most are bounded
// before, some only here); the SDK keeps a longer one cut to this length. With the SDK's
// queue of 2,048 spans, the spans waiting for the collector hold a bounded amount whatever
// plugins and handlers send; the SDK's own default is no limit.
const MaxAttributeBytes = 1024

// spanLimits are the SDK's defaults (128 attributes and events a span), with string
// attributes cut at MaxAttributeBytes.
func spanLimits() sdktrace.SpanLimits {
	l := sdktrace.NewSpanLimits()
	l.AttributeValueLengthLimit = MaxAttributeBytes
	return l
}

// failureLog is the OpenTelemetry SDK's error handler (a process-wide one: the daemon has one
// provider): a failed export is logged as a warning naming the endpoint, at most once per
// failureLogInterval, and not at all once shutdown abandoned the exports (aborted).
func failureLog(c Config, aborted context.Context) otel.ErrorHandlerFunc {
	log := c.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var mu sync.Mutex
	var last time.Time
	return func(err error) {
		if aborted.Err() != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if now := time.Now(); now.Sub(last) >= failureLogInterval {
			last = now
			log.Warn("tracing: spans not exported to the collector (tracing.endpoint); registrations go on, their spans are dropped", "endpoint", c.Endpoint, "error", err)
		}
	}
}

// abortable is an exporter whose exports end when abort is done: the SDK's shutdown waits for
// the export in progress, which a collector that hangs would hold up to its timeout.
type abortable struct {
	sdktrace.SpanExporter
	abort context.Context
}

func (a abortable) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if err := a.abort.Err(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(a.abort, cancel)()
	return a.SpanExporter.ExportSpans(ctx, spans)
}

// Sampler is the kubelet's: a span follows its parent's decision; a new trace is sampled at
// rate per million.
func Sampler(ratePerMillion int32) sdktrace.Sampler {
	return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(float64(ratePerMillion) / 1e6))
}

// Tracer is the daemon's tracer: nil when off, which every stage takes as off (it starts no
// root span, and so no span at all: see Start).
func (p *Provider) Tracer() trace.Tracer {
	if p == nil || p.sdk == nil {
		return nil
	}
	return p.sdk.Tracer(TracerName)
}

// Shutdown exports the spans still queued, for ShutdownGrace at most (or until ctx is done),
// then abandons the rest and stops the exporter. It returns with every goroutine of the
// provider gone.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil || p.sdk == nil {
		return nil
	}
	grace := time.AfterFunc(ShutdownGrace, p.abort)
	stop := context.AfterFunc(ctx, p.abort)
	defer func() {
		grace.Stop()
		stop()
		p.abort()
	}()
	// Not ctx: the SDK's Shutdown returns when its context is done without waiting for its
	// goroutine; once aborted, that goroutine ends at once.
	return p.sdk.Shutdown(context.WithoutCancel(ctx))
}

// StartRoot starts the root span of a new trace, name, with t; with t nil (off) it returns
// ctx and a span that does nothing, at no cost.
func StartRoot(ctx context.Context, t trace.Tracer, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if t == nil {
		return ctx, offSpan
	}
	return t.Start(ctx, name, append(opts, trace.WithNewRoot())...)
}

// offSpan is the span of a trace when tracing is off: it records nothing (an interface value
// made once, so that handing it out allocates nothing).
var offSpan trace.Span = noop.Span{}

// Start starts span name under the span of ctx, of kind, when that one records (its trace is
// sampled); otherwise it returns ctx and that span, which records nothing, so that a trace
// not sampled (or tracing off) costs a look-up and no allocation. Set attributes on the span
// returned only when it IsRecording.
func Start(ctx context.Context, t trace.Tracer, name string, kind trace.SpanKind) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if t == nil || !parent.IsRecording() {
		return ctx, parent
	}
	return t.Start(ctx, name, trace.WithSpanKind(kind))
}

// End ends span with the outcome of what it traced: on error, its status is Error with the
// message, and error.type is errType (a low-cardinality class, as the metrics' result label)
// unless that is "" (error.type said already, or to be said by whoever knows it).
func End(span trace.Span, err error, errType string) {
	if err != nil && span.IsRecording() {
		span.SetStatus(codes.Error, err.Error())
		if errType != "" {
			span.SetAttributes(attribute.String(ErrorType, errType))
		}
	}
	span.End()
}

// Inject writes the W3C trace context of ctx (traceparent, and tracestate when there is one)
// with set, as gRPC request metadata: a plugin that traces continues the trace. Nothing is
// written when ctx carries no valid span (tracing off). A trace not sampled is propagated too,
// with its flag saying so, as W3C Trace Context asks: the plugin then does not sample it
// either. The header is written as propagation.TraceContext writes it, in one allocation.
func Inject(ctx context.Context, set func(key, value string)) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return
	}
	tid, sid := sc.TraceID(), sc.SpanID()
	var b [55]byte // 00-<32 hex>-<16 hex>-<2 hex>
	copy(b[:], "00-")
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{byte(sc.TraceFlags() & trace.FlagsSampled)})
	set(traceparent, string(b[:]))
	if ts := sc.TraceState(); ts.Len() > 0 {
		set(tracestate, ts.String())
	}
}

// The W3C Trace Context headers (propagation.TraceContext's).
const (
	traceparent = "traceparent"
	tracestate  = "tracestate"
)
