package registrar

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/safetext"
	"github.com/wasmhost/wasmhost/internal/tracing"
)

// ErrBadEndpoint: a plugin's endpoint is not a unix socket that plugin_call may dial.
var ErrBadEndpoint = errors.New("registrar: endpoint not callable")

// ErrEndpointUnreachable: plugin_call could not connect to the endpoint (no such socket,
// nobody listening); the dial's error is wrapped too (errors.Is(err, syscall.ECONNREFUSED),
// fs.ErrNotExist).
var ErrEndpointUnreachable = errors.New("registrar: endpoint unreachable")

// Bounds of plugin_call of what the plugin answers besides its message, which the caller
// bounds (maxResp).
const (
	// pluginCallMaxHeaderList caps the headers and trailers of an answer, as the registration
	// client's do (grpc-go's default is 16 MiB).
	pluginCallMaxHeaderList = 64 << 10
	// maxCallErrorText bounds the text of a failed call's error, the plugin's status message
	// included: it is what error_read gives the guest, what a session records and what is
	// logged.
	maxCallErrorText = 1024
)

// PluginCaller makes the unary gRPC calls a handler asks for through the plugin_call host
// function (the CSI handler asks its driver for NodeGetInfo, as the kubelet does). It only
// dials unix sockets, given as an absolute path or a unix:// URL: a handler reaches the plugin
// it handles and nothing on the network. Registration is on the hot path and uses the small
// client in client.go; this is not, so it uses grpc-go, which handles whatever the plugin's
// own server does.
type PluginCaller struct {
	// Tracer, if set, traces each call as a client span under the handler call's, and sends
	// its trace context (W3C traceparent) in the request's metadata, so that a plugin that
	// traces joins the trace. Defaults to nil: nothing is traced or sent.
	Tracer trace.Tracer
}

// Call invokes method on the plugin serving at endpoint with the encoded request req, and
// returns the encoded response, which may be at most maxResp bytes. ctx bounds the call.
func (pc PluginCaller) Call(ctx context.Context, endpoint, method string, req []byte, maxResp int) (_ []byte, err error) {
	path, err := UnixPath(endpoint)
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(method, "/") || strings.Count(method, "/") != 2 {
		return nil, fmt.Errorf("registrar: plugin_call: method %q is not a full gRPC method name (/package.Service/Method)", method)
	}
	ctx, span := tracing.Start(ctx, pc.Tracer, strings.TrimPrefix(method, "/"), trace.SpanKindClient)
	if span.IsRecording() {
		span.SetAttributes(rpcAttributes(method, path)...)
		defer func() {
			span.SetAttributes(attribute.Int(tracing.RPCStatusCode, int(status.Code(err))))
			tracing.End(span, err, pluginCallErrorType(err))
		}()
	}
	tracing.Inject(ctx, func(k, v string) { ctx = metadata.AppendToOutgoingContext(ctx, k, v) })
	// Connect first, here: a missing socket or nobody listening fails the call at once with
	// the reason (no such file, connection refused), where grpc-go would keep retrying until
	// the call's deadline and report only that it ran out.
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("%w: plugin_call %s: %w", ErrEndpointUnreachable, method, err)
	}
	var once sync.Once
	cc, err := grpc.NewClient("passthrough:///plugin",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var c net.Conn
			once.Do(func() { c, conn = conn, nil })
			if c != nil {
				return c, nil
			}
			return d.DialContext(ctx, "unix", path) // a reconnect
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxResp), grpc.ForceCodecV2(rawCodec{})),
		grpc.WithMaxHeaderListSize(pluginCallMaxHeaderList),
	)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("registrar: plugin_call %s on %s: %w", method, endpoint, err)
	}
	defer func() {
		cc.Close()
		once.Do(func() { conn.Close() }) // never handed to grpc-go
	}()
	var out rawMessage
	if err := cc.Invoke(ctx, method, &rawMessage{b: req}, &out); err != nil {
		return nil, pluginCallError(method, endpoint, maxResp, err)
	}
	return out.b, nil
}

// pluginCallError is the error of a call that failed: its gRPC status, with the message cut to
// maxCallErrorText bytes; an answer over maxResp also matches registration.ErrResponseTooLarge.
func pluginCallError(method, endpoint string, maxResp int, err error) error {
	st := status.Convert(err)
	msg := safetext.Cut(st.Message(), maxCallErrorText)
	bounded := status.New(st.Code(), msg).Err()
	// grpc-go refuses a message over MaxCallRecvMsgSize with this status, before it reads it:
	// "grpc: received message larger than max (2000 vs. 1000)", or "… after decompression …".
	if st.Code() == codes.ResourceExhausted && strings.HasPrefix(msg, "grpc: received message") && strings.Contains(msg, "larger than max") {
		tl := &tooLarge{limit: maxResp, err: bounded}
		if i := strings.LastIndex(msg, "("); i >= 0 {
			fmt.Sscanf(msg[i:], "(%d vs.", &tl.size)
		}
		return fmt.Errorf("registrar: plugin_call %s on %s: %w", method, endpoint, tl)
	}
	return fmt.Errorf("registrar: plugin_call %s on %s: %w", method, endpoint, bounded)
}

// tooLarge is the error of an answer over the caller's limit: it matches
// registration.ErrResponseTooLarge, and its ResponseSize is the answer's size in bytes (0 when
// grpc-go did not say).
type tooLarge struct {
	size, limit int
	err         error // grpc-go's status
}

func (e *tooLarge) Error() string {
	if e.size > 0 {
		return fmt.Sprintf("response of %d bytes over the limit of %d: %v", e.size, e.limit, e.err)
	}
	return fmt.Sprintf("response over the limit of %d bytes: %v", e.limit, e.err)
}

func (e *tooLarge) Unwrap() []error   { return []error{registration.ErrResponseTooLarge, e.err} }
func (e *tooLarge) ResponseSize() int { return e.size }

// UnixPath returns the socket path of an endpoint: an absolute path, or unix:// (or unix:)
// followed by one (unix:///csi/csi.sock, a common spelling of CSI drivers).
func UnixPath(endpoint string) (string, error) {
	p := endpoint
	if rest, ok := strings.CutPrefix(p, "unix://"); ok {
		p = rest
	} else if rest, ok := strings.CutPrefix(p, "unix:"); ok {
		p = rest
	}
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%w: %q is not a unix socket path (want /path or unix:///path)", ErrBadEndpoint, endpoint)
	}
	return filepath.Clean(p), nil
}

// rawCodec passes messages through as bytes: the handler encoded the request and decodes the
// response. It is named "proto" so that the content type is application/grpc+proto, which is
// what the plugin's server expects.
type rawCodec struct{}

var _ encoding.CodecV2 = rawCodec{}

// rawMessage is a message already encoded.
type rawMessage struct{ b []byte }

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(*rawMessage)
	if !ok {
		return nil, fmt.Errorf("rawCodec: cannot marshal %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(m.b)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*rawMessage)
	if !ok {
		return fmt.Errorf("rawCodec: cannot unmarshal into %T", v)
	}
	m.b = data.Materialize()
	return nil
}

// pluginCallErrorType is the class of a failed plugin_call, for error.type: why it did not
// reach the plugin, or the gRPC status the plugin answered with.
func pluginCallErrorType(err error) string {
	switch {
	case errors.Is(err, ErrEndpointUnreachable):
		return "unreachable"
	case errors.Is(err, registration.ErrResponseTooLarge):
		return "too_large"
	}
	return status.Code(err).String()
}
