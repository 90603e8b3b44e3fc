package registrar

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/safetext"
	"github.com/wasmhost/wasmhost/internal/tracing"
)

// A registration is two small unary calls on one connection that is closed right after. A
// grpc-go ClientConn costs about 0.4 ms of CPU for that (a resolver, a balancer, two callback
// serializers, a reader and a writer goroutine, channelz trace strings formatted whether or
// not anyone reads them), which alone would use a 2-core node for a fifth of a second
// when a thousand plugins appear at once. wireConn speaks the part of gRPC-over-HTTP/2 that
// two sequential unary calls need, with golang.org/x/net/http2's framer and HPACK, on the
// caller's goroutine: no goroutine of its own, a handful of syscalls per call.
// BenchmarkClient keeps the comparison checked: 87-97 µs of CPU per registration against
// 375-428 µs with grpc-go, 3.9-4.9 times less (bursts of 200, the plugins in another process;
// the figures and the command are in docs/benchmarks.md).
//
// What it does: the client preface and SETTINGS (push off, 1 MiB windows so that a message
// of MaxInfoMessageSize never waits for flow control, a header list limit); one stream per
// call (HEADERS, then DATA with END_STREAM, cut to the plugin's SETTINGS_MAX_FRAME_SIZE and
// sent only as far as its connection and stream flow-control windows allow, the rest when
// its WINDOW_UPDATEs come); it reads until the stream's trailers, answering SETTINGS and
// PING, honouring GOAWAY and RST_STREAM, and refusing a response over MaxInfoMessageSize
// (before and after decompression), headers or trailers over maxHeaderList, or one with more
// than one message. It offers gzip (grpc-accept-encoding) and decodes a gzip answer with the
// standard library; grpcio and grpc++ compress small answers whether or not it was offered.
//
// Errors are gRPC status errors with the codes grpc-go would give (Unavailable for a
// connection lost, DeadlineExceeded, Canceled, the server's grpc-status). One that is the
// plugin's breach of HTTP/2 or gRPC also matches registration.ErrProtocol, and headers or
// trailers over the limit match ErrMetadataTooLarge (errors.Is).

const (
	clientWindow   = 1 << 20
	maxFrameSize   = 16 << 10 // what we read: the HTTP/2 default, which we do not raise
	ioBufferSize   = 4 << 10
	goAwayDeadline = 100 * time.Millisecond
	// maxHeaderList caps the headers, and the trailers, of a response: the sum of the fields'
	// sizes as HTTP/2 counts them (name, value, 32), advertised as SETTINGS_MAX_HEADER_LIST_SIZE.
	maxHeaderList = registration.MaxInfoMessageSize
	// maxFieldText bounds what is kept of each response field the client reads (:status,
	// content-type, grpc-encoding, grpc-status, grpc-message): a status message is a
	// sentence, yet a plugin may send 64 KiB of one, which would become the socket's last
	// error, a log line and an Event. Past it the text is cut (safetext.Cut), on every retry.
	maxFieldText = 1024

	// HTTP/2's defaults (RFC 9113 §6.5.2), in force until the plugin's SETTINGS say otherwise.
	defaultWindow       = 65535
	defaultMaxFrameSize = 16 << 10
	maxWindow           = 1<<31 - 1
)

// ErrMetadataTooLarge: the plugin's response headers or trailers were over maxHeaderList bytes
// (64 KiB), or one field alone was. The call's error is a ResourceExhausted status that also
// matches this.
var ErrMetadataTooLarge = errors.New("registrar: response headers or trailers too large")

var bufPool = sync.Pool{New: func() any { return new(wireBuffers) }}

type wireBuffers struct {
	r *bufio.Reader
	w *bufio.Writer
}

// wireConn is one HTTP/2 connection carrying sequential unary gRPC calls. It is not safe for
// concurrent use.
type wireConn struct {
	c      net.Conn
	bufs   *wireBuffers
	fr     *http2.Framer
	henc   *hpack.Encoder
	hbuf   bytes.Buffer
	hdec   *hpack.Decoder
	nextID uint32
	broken error  // set when the connection can no longer be used
	socket string // the plugin's registration socket, for the spans of its calls

	// What the plugin allows us to send (RFC 9113 §6.9): its SETTINGS_MAX_FRAME_SIZE and
	// SETTINGS_INITIAL_WINDOW_SIZE, and the connection's send window.
	peerMaxFrame   uint32
	peerInitWindow int64
	connWindow     int64

	// The call in progress.
	stream       uint32
	streamWindow int64  // its send window
	pending      []byte // request bytes not sent yet, waiting for a window
	block        headerBlock
	resp         response
}

// headerBlock is a header block being decoded (a HEADERS frame and its CONTINUATIONs).
type headerBlock struct {
	stream    uint32
	endStream bool
	size      int // the fields' sizes so far, as HTTP/2 counts them
	fields    blockFields
}

// blockFields are the fields of a response's headers or trailers that the client reads.
type blockFields struct {
	status, contentType, grpcEncoding, grpcStatus, grpcMessage string
}

// response is what has been received of the call in progress.
type response struct {
	gotHeaders bool
	encoding   string // grpc-encoding of the response headers
	body       []byte
}

func newWireConn(c net.Conn) *wireConn {
	bufs := bufPool.Get().(*wireBuffers)
	if bufs.r == nil {
		bufs.r = bufio.NewReaderSize(c, ioBufferSize)
		bufs.w = bufio.NewWriterSize(c, ioBufferSize)
	} else {
		bufs.r.Reset(c)
		bufs.w.Reset(c)
	}
	w := &wireConn{c: c, bufs: bufs, nextID: 1,
		peerMaxFrame: defaultMaxFrameSize, peerInitWindow: defaultWindow, connWindow: defaultWindow}
	w.fr = http2.NewFramer(bufs.w, bufs.r)
	w.fr.SetMaxReadFrameSize(maxFrameSize)
	// Header blocks are decoded here, not by the framer (ReadMetaHeaders), so that fields over
	// the limit are told apart from a broken HPACK encoding.
	w.hdec = hpack.NewDecoder(4096, w.field)
	w.hdec.SetMaxStringLength(maxHeaderList)
	w.henc = hpack.NewEncoder(&w.hbuf)
	w.henc.SetMaxDynamicTableSizeLimit(0) // whatever table size the plugin allows, literals fit

	// Buffered; sent with the first call.
	bufs.w.WriteString(http2.ClientPreface)
	w.fr.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: clientWindow},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: maxHeaderList},
	)
	w.fr.WriteWindowUpdate(0, clientWindow-defaultWindow)
	return w
}

// close says goodbye (a GOAWAY, as grpc-go does, within a short write deadline) and closes
// the connection.
// detach hands over the connection, open and idle, to a caller that keeps it (the liveness
// monitor): no GOAWAY, no close. It returns nil when the connection is broken (then closed).
// close is a no-op afterwards.
func (w *wireConn) detach() net.Conn {
	if w.bufs == nil {
		return nil
	}
	if w.broken != nil {
		w.close()
		return nil
	}
	c := w.c
	_ = c.SetDeadline(time.Time{})
	w.bufs.r.Reset(nil)
	w.bufs.w.Reset(nil)
	bufPool.Put(w.bufs)
	w.bufs = nil
	return c
}

func (w *wireConn) close() {
	if w.bufs == nil {
		return // detached, or closed already
	}
	if w.broken == nil {
		w.c.SetWriteDeadline(time.Now().Add(goAwayDeadline))
		w.fr.WriteGoAway(0, http2.ErrCodeNo, nil)
		w.bufs.w.Flush()
	}
	w.c.Close()
	w.bufs.r.Reset(nil)
	w.bufs.w.Reset(nil)
	bufPool.Put(w.bufs)
	w.bufs = nil
}

// call makes one unary call of method with the encoded request msg and returns the encoded
// response. The context's deadline is sent as grpc-timeout and enforced on the connection;
// its cancellation interrupts the call.
func (w *wireConn) call(ctx context.Context, method string, msg []byte) (resp []byte, err error) {
	if w.broken != nil {
		return nil, status.Errorf(codes.Unavailable, "connection unusable after an earlier error: %v", w.broken)
	}
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	deadline, hasDeadline := ctx.Deadline()
	if hasDeadline {
		w.c.SetDeadline(deadline)
	}
	interrupted := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		w.c.SetDeadline(time.Unix(1, 0)) // unblocks a read or write in progress
		close(interrupted)
	})
	defer func() {
		if !stop() {
			<-interrupted // the callback ran or runs: wait for it, so that it cannot outlive us
		}
		w.pending = nil
		if err != nil {
			if ctx.Err() != nil {
				err = status.FromContextError(ctx.Err()).Err()
			} else if hasDeadline && !time.Now().Before(deadline) && !isServerStatus(err) {
				// The deadline passed, and the plugin gave up on the stream (RST_STREAM
				// CANCEL, as grpc-go's server does on grpc-timeout) before the context's
				// timer said so.
				err = status.Error(codes.DeadlineExceeded, "context deadline exceeded")
			}
			if w.broken == nil && !isServerStatus(err) {
				w.broken = err // the stream's state is unknown
			}
			return
		}
		w.c.SetDeadline(time.Time{})
	}()

	w.stream = w.nextID
	w.nextID += 2
	w.streamWindow = w.peerInitWindow
	w.resp = response{}
	if err := w.writeRequest(ctx, method, msg, deadline, hasDeadline); err != nil {
		return nil, w.ioError(err)
	}
	return w.readResponse()
}

func (w *wireConn) writeRequest(ctx context.Context, method string, msg []byte, deadline time.Time, hasDeadline bool) error {
	w.hbuf.Reset()
	w.header(":method", "POST")
	w.header(":scheme", "http")
	w.header(":path", method)
	w.header(":authority", "localhost")
	w.header("content-type", "application/grpc")
	w.header("user-agent", "wasmhost")
	w.header("te", "trailers")
	w.header("grpc-accept-encoding", "gzip")
	if hasDeadline {
		w.header("grpc-timeout", encodeTimeout(time.Until(deadline)))
	}
	// A plugin that traces joins the registration's trace (W3C traceparent, when there is one).
	tracing.Inject(ctx, w.header)
	if err := w.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: w.stream, BlockFragment: w.hbuf.Bytes(), EndHeaders: true}); err != nil {
		return err
	}
	data := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(data[1:], uint32(len(msg)))
	w.pending = append(data, msg...)
	return w.sendPending()
}

// sendPending sends as much of the pending request as the plugin's windows allow, in frames
// of at most its SETTINGS_MAX_FRAME_SIZE, the last with END_STREAM, and flushes.
func (w *wireConn) sendPending() error {
	for len(w.pending) > 0 {
		n := min(int64(len(w.pending)), int64(w.peerMaxFrame), w.connWindow, w.streamWindow)
		if n <= 0 {
			break // the rest when a WINDOW_UPDATE (or SETTINGS) opens the window
		}
		end := n == int64(len(w.pending))
		if err := w.fr.WriteData(w.stream, end, w.pending[:n]); err != nil {
			return err
		}
		w.pending = w.pending[n:]
		w.connWindow -= n
		w.streamWindow -= n
	}
	return w.bufs.w.Flush()
}

func (w *wireConn) header(name, value string) {
	w.henc.WriteField(hpack.HeaderField{Name: name, Value: value})
}

// readResponse reads frames until the call's stream ends, sending the rest of the request
// as the plugin opens its windows, and returns the response's one message.
func (w *wireConn) readResponse() ([]byte, error) {
	id := w.stream
	for {
		f, err := w.fr.ReadFrame()
		if err != nil {
			return nil, w.ioError(err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() {
				continue
			}
			if err := w.applySettings(f); err != nil {
				return nil, err
			}
			if err := w.flushAfter(w.fr.WriteSettingsAck()); err != nil {
				return nil, w.ioError(err)
			}
			if err := w.sendPending(); err != nil {
				return nil, w.ioError(err)
			}
		case *http2.WindowUpdateFrame:
			if err := w.windowUpdate(f); err != nil {
				return nil, err
			}
			if err := w.sendPending(); err != nil {
				return nil, w.ioError(err)
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				if err := w.flushAfter(w.fr.WritePing(true, f.Data)); err != nil {
					return nil, w.ioError(err)
				}
			}
		case *http2.GoAwayFrame:
			if f.ErrCode != http2.ErrCodeNo {
				return nil, protocolError("the plugin closed the connection: GOAWAY %v%s", f.ErrCode, debugData(f.DebugData()))
			}
			if f.LastStreamID < id {
				return nil, status.Errorf(codes.Unavailable, "the plugin is going away (GOAWAY %v)", f.ErrCode)
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				return nil, streamResetError(f.ErrCode)
			}
		case *http2.HeadersFrame:
			w.block = headerBlock{stream: f.StreamID, endStream: f.StreamEnded()}
			if done, err := w.headerFragment(f.HeaderBlockFragment(), f.HeadersEnded()); err != nil {
				return nil, err
			} else if done {
				return w.resp.body, nil
			}
		case *http2.ContinuationFrame:
			if done, err := w.headerFragment(f.HeaderBlockFragment(), f.HeadersEnded()); err != nil {
				return nil, err
			} else if done {
				return w.resp.body, nil
			}
		case *http2.DataFrame:
			if f.StreamID != id {
				continue
			}
			if !w.resp.gotHeaders {
				return nil, protocolError("DATA before response headers")
			}
			if len(w.resp.body)+len(f.Data()) > registration.MaxInfoMessageSize+5 {
				return nil, status.Errorf(codes.ResourceExhausted, "response larger than %d bytes", registration.MaxInfoMessageSize)
			}
			w.resp.body = append(w.resp.body, f.Data()...)
			if f.StreamEnded() {
				return nil, protocolError("the plugin ended the stream without trailers")
			}
		}
	}
}

// applySettings takes the plugin's SETTINGS that bound what we send.
func (w *wireConn) applySettings(f *http2.SettingsFrame) error {
	return f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return protocolError("invalid SETTINGS from the plugin: %v", err)
		}
		switch s.ID {
		case http2.SettingMaxFrameSize:
			w.peerMaxFrame = s.Val
		case http2.SettingInitialWindowSize:
			// A change applies to the open stream's window too, which may go negative.
			w.streamWindow += int64(s.Val) - w.peerInitWindow
			w.peerInitWindow = int64(s.Val)
			if w.streamWindow > maxWindow {
				return protocolError("SETTINGS_INITIAL_WINDOW_SIZE %d overflows the stream's window", s.Val)
			}
		}
		return nil
	})
}

// windowUpdate opens the connection's window or the call's stream's.
func (w *wireConn) windowUpdate(f *http2.WindowUpdateFrame) error {
	inc := int64(f.Increment)
	switch f.StreamID {
	case 0:
		w.connWindow += inc
		if w.connWindow > maxWindow {
			return protocolError("WINDOW_UPDATE overflows the connection's window")
		}
	case w.stream:
		w.streamWindow += inc
		if w.streamWindow > maxWindow {
			return protocolError("WINDOW_UPDATE overflows the stream's window")
		}
	}
	return nil
}

// headerFragment decodes a fragment of the current header block. When the block ends the
// call's stream, done is true and the call's outcome is returned (as w.resp.body and err).
func (w *wireConn) headerFragment(frag []byte, last bool) (done bool, err error) {
	if _, err := w.hdec.Write(frag); err != nil {
		if errors.Is(err, hpack.ErrStringLength) {
			return true, metadataTooLarge("one field is over %d bytes", maxHeaderList)
		}
		return true, protocolError("response headers: %v", err)
	}
	if w.block.size > maxHeaderList {
		return true, metadataTooLarge("over %d bytes (SETTINGS_MAX_HEADER_LIST_SIZE)", maxHeaderList)
	}
	if !last {
		return false, nil
	}
	if err := w.hdec.Close(); err != nil {
		return true, protocolError("response headers: %v", err)
	}
	b := &w.block
	if b.stream != w.stream {
		return false, nil // an earlier stream's, decoded to keep the HPACK state
	}
	if !w.resp.gotHeaders {
		w.resp.gotHeaders = true
		if err := checkResponseHeaders(&b.fields); err != nil {
			return true, err
		}
		w.resp.encoding = b.fields.grpcEncoding
	}
	if !b.endStream {
		return false, nil
	}
	body, err := finish(&b.fields, w.resp.encoding, w.resp.body)
	if err == nil && len(w.pending) > 0 {
		// The plugin answered before it had the whole request: stop sending, as grpc-go does.
		w.pending = nil
		if werr := w.flushAfter(w.fr.WriteRSTStream(w.stream, http2.ErrCodeNo)); werr != nil {
			w.broken = w.ioError(werr)
		}
	}
	w.resp.body = body
	return true, err
}

// field is the HPACK decoder's emit function: it counts every field against maxHeaderList
// and keeps those of the current block that the client reads.
func (w *wireConn) field(hf hpack.HeaderField) {
	b := &w.block
	b.size += int(hf.Size())
	if b.size > maxHeaderList {
		w.hdec.SetEmitEnabled(false)
		return
	}
	v := safetext.Cut(hf.Value, maxFieldText)
	switch hf.Name {
	case ":status":
		b.fields.status = v
	case "content-type":
		b.fields.contentType = v
	case "grpc-encoding":
		b.fields.grpcEncoding = v
	case "grpc-status":
		b.fields.grpcStatus = v
	case "grpc-message":
		b.fields.grpcMessage = v
	}
}

func (w *wireConn) flushAfter(err error) error {
	if err != nil {
		return err
	}
	return w.bufs.w.Flush()
}

// ioError turns a connection error into a gRPC status error.
func (w *wireConn) ioError(err error) error {
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "context deadline exceeded")
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return status.Errorf(codes.Unavailable, "connection closed by the plugin: %v", err)
	}
	var ce http2.ConnectionError
	var se http2.StreamError
	if errors.As(err, &ce) || errors.As(err, &se) || errors.Is(err, http2.ErrFrameTooLarge) {
		return protocolError("HTTP/2 protocol error: %v", err)
	}
	return status.Errorf(codes.Unavailable, "connection error: %v", err)
}

// callError is an error of the client's own (not a status the plugin sent): a gRPC status,
// and what kind of failure it is, for errors.Is.
type callError struct {
	st   *status.Status
	kind error
}

func (e *callError) Error() string              { return e.st.Err().Error() }
func (e *callError) GRPCStatus() *status.Status { return e.st }
func (e *callError) Unwrap() error              { return e.kind }

// protocolError is the error of a response that breaks HTTP/2 or gRPC.
func protocolError(format string, args ...any) error {
	return &callError{st: status.Newf(codes.Internal, format, args...), kind: registration.ErrProtocol}
}

// metadataTooLarge is the error of response headers or trailers over maxHeaderList.
func metadataTooLarge(format string, args ...any) error {
	return &callError{st: status.New(codes.ResourceExhausted, "the plugin's response headers or trailers are too large: "+fmt.Sprintf(format, args...)), kind: ErrMetadataTooLarge}
}

// debugData renders a GOAWAY's debug data for an error message: printable, and short.
func debugData(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if len(b) > 256 {
		b = b[:256]
	}
	return fmt.Sprintf(" (%q)", b)
}

// checkResponseHeaders accepts a response that is HTTP 200 with a gRPC content type.
func checkResponseHeaders(f *blockFields) error {
	st := f.status
	if st != "200" {
		code := codes.Unknown
		switch st {
		case "400":
			code = codes.Internal
		case "401":
			code = codes.Unauthenticated
		case "403":
			code = codes.PermissionDenied
		case "404":
			code = codes.Unimplemented
		case "429", "502", "503", "504":
			code = codes.Unavailable
		}
		return &callError{st: status.Newf(code, "unexpected HTTP status %q (not a gRPC server?)", st), kind: registration.ErrProtocol}
	}
	if ct := f.contentType; !strings.HasPrefix(ct, "application/grpc") {
		return protocolError("unexpected content-type %q", ct)
	}
	return nil
}

// finish reads the trailers and returns the message of a successful call, decompressed if it
// came compressed with encoding (the response headers' grpc-encoding).
func finish(trailers *blockFields, encoding string, body []byte) ([]byte, error) {
	raw := trailers.grpcStatus
	code, err := strconv.ParseUint(raw, 10, 32)
	if err != nil {
		return nil, protocolError("malformed grpc-status %q", raw)
	}
	if code != uint64(codes.OK) {
		return nil, serverStatus{status.New(codes.Code(code), decodeGRPCMessage(trailers.grpcMessage))}
	}
	if len(body) < 5 {
		return nil, protocolError("response has no message (%d bytes)", len(body))
	}
	if n := binary.BigEndian.Uint32(body[1:5]); int(n) != len(body)-5 {
		return nil, protocolError("response message of %d bytes announced, %d received", n, len(body)-5)
	}
	switch body[0] {
	case 0:
		return body[5:], nil
	case 1:
		return decompress(encoding, body[5:])
	}
	return nil, protocolError("response message has flags %#x", body[0])
}

// decompress undoes the response's compression: gzip, which we offer, whatever we offered (grpcio
// and grpc++ compress without being asked), up to MaxInfoMessageSize bytes.
func decompress(encoding string, b []byte) ([]byte, error) {
	switch encoding {
	case "gzip":
	case "", "identity":
		return nil, protocolError("compressed response message, but grpc-encoding is %q", encoding)
	default:
		return nil, protocolError("response compressed with %q, which was not offered (gzip was)", encoding)
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, protocolError("gzip response: %v", err)
	}
	out, err := io.ReadAll(io.LimitReader(zr, registration.MaxInfoMessageSize+1))
	if err != nil {
		return nil, protocolError("gzip response: %v", err)
	}
	if len(out) > registration.MaxInfoMessageSize {
		return nil, status.Errorf(codes.ResourceExhausted, "response larger than %d bytes once decompressed", registration.MaxInfoMessageSize)
	}
	return out, nil
}

// serverStatus is a status the plugin sent: the call failed, the connection is fine.
type serverStatus struct{ st *status.Status }

func (s serverStatus) Error() string              { return s.st.Err().Error() }
func (s serverStatus) GRPCStatus() *status.Status { return s.st }

func isServerStatus(err error) bool {
	var s serverStatus
	return errors.As(err, &s)
}

func streamResetError(code http2.ErrCode) error {
	switch code {
	case http2.ErrCodeCancel:
		return status.Error(codes.Canceled, "stream cancelled by the plugin")
	case http2.ErrCodeRefusedStream:
		return status.Error(codes.Unavailable, "stream refused by the plugin")
	}
	return protocolError("stream reset by the plugin: %v", code)
}

// encodeTimeout renders d in the grpc-timeout format (at most 8 digits and a unit).
func encodeTimeout(d time.Duration) string {
	if d <= 0 {
		return "1n"
	}
	for _, u := range []struct {
		unit string
		d    time.Duration
	}{{"n", time.Nanosecond}, {"u", time.Microsecond}, {"m", time.Millisecond}, {"S", time.Second}, {"M", time.Minute}, {"H", time.Hour}} {
		if v := (d + u.d - 1) / u.d; v < 1e8 {
			return strconv.FormatInt(int64(v), 10) + u.unit
		}
	}
	return "99999999H"
}

// decodeGRPCMessage undoes the percent-encoding of grpc-message; a malformed escape is kept
// as it is.
func decodeGRPCMessage(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
