package registrar

import (
	"bufio"
	"bytes"
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
)

// A registration is two small unary calls on one connection that is closed right after. A
// grpc-go ClientConn costs about 0.45 ms of CPU for that (a resolver, a balancer, two callback
// serializers, a reader and a writer goroutine, channelz trace strings formatted whether or
// not anyone reads them), which alone would use a 2-core node for a quarter of a second
// when a thousand plugins appear at once. wireConn speaks the part of gRPC-over-HTTP/2 that
// two sequential unary calls need, with golang.org/x/net/http2's framer and HPACK, on the
// caller's goroutine: no goroutine of its own, a handful of syscalls per call.
//
// What it does: the client preface and SETTINGS (push off, 1 MiB windows so that a message
// of MaxInfoMessageSize never waits for flow control, a header list limit); one stream per
// call (HEADERS, then DATA with END_STREAM); it reads until the stream's trailers, answering
// SETTINGS and PING, honouring GOAWAY and RST_STREAM, and refusing a response over
// MaxInfoMessageSize, a compressed one, or one with more than one message. Errors are gRPC
// status errors with the codes grpc-go would give (Unavailable for a connection lost,
// DeadlineExceeded, Canceled, the server's grpc-status).

const (
	clientWindow   = 1 << 20
	maxFrameSize   = 16 << 10 // the HTTP/2 default, which we do not raise
	ioBufferSize   = 4 << 10
	goAwayDeadline = 100 * time.Millisecond
)

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
	nextID uint32
	broken error // set when the connection can no longer be used
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
	w := &wireConn{c: c, bufs: bufs, nextID: 1}
	w.fr = http2.NewFramer(bufs.w, bufs.r)
	w.fr.SetMaxReadFrameSize(maxFrameSize)
	w.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	w.fr.ReadMetaHeaders.SetMaxStringLength(registration.MaxInfoMessageSize)
	w.fr.MaxHeaderListSize = registration.MaxInfoMessageSize
	w.henc = hpack.NewEncoder(&w.hbuf)
	w.henc.SetMaxDynamicTableSizeLimit(0) // whatever table size the plugin allows, literals fit

	// Buffered; sent with the first call.
	bufs.w.WriteString(http2.ClientPreface)
	w.fr.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: clientWindow},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: registration.MaxInfoMessageSize},
	)
	w.fr.WriteWindowUpdate(0, clientWindow-65535)
	return w
}

// close says goodbye (a GOAWAY, as grpc-go does, within a short write deadline) and closes
// the connection.
func (w *wireConn) close() {
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
		if err != nil {
			if ctx.Err() != nil {
				err = status.FromContextError(ctx.Err()).Err()
			}
			if w.broken == nil && !isServerStatus(err) {
				w.broken = err // the stream's state is unknown
			}
			return
		}
		w.c.SetDeadline(time.Time{})
	}()

	id := w.nextID
	w.nextID += 2
	if err := w.writeRequest(id, method, msg, deadline, hasDeadline); err != nil {
		return nil, w.ioError(err)
	}
	return w.readResponse(id)
}

func (w *wireConn) writeRequest(id uint32, method string, msg []byte, deadline time.Time, hasDeadline bool) error {
	w.hbuf.Reset()
	w.header(":method", "POST")
	w.header(":scheme", "http")
	w.header(":path", method)
	w.header(":authority", "localhost")
	w.header("content-type", "application/grpc")
	w.header("user-agent", "wasmhost")
	w.header("te", "trailers")
	if hasDeadline {
		w.header("grpc-timeout", encodeTimeout(time.Until(deadline)))
	}
	if err := w.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: w.hbuf.Bytes(), EndHeaders: true}); err != nil {
		return err
	}
	if len(msg)+5 > maxFrameSize {
		return fmt.Errorf("request of %d bytes is too large", len(msg))
	}
	var prefix [5]byte
	binary.BigEndian.PutUint32(prefix[1:], uint32(len(msg)))
	data := append(prefix[:], msg...)
	if err := w.fr.WriteData(id, true, data); err != nil {
		return err
	}
	return w.bufs.w.Flush()
}

func (w *wireConn) header(name, value string) {
	w.henc.WriteField(hpack.HeaderField{Name: name, Value: value})
}

// readResponse reads frames until stream id ends, and returns its one message.
func (w *wireConn) readResponse(id uint32) ([]byte, error) {
	var (
		gotHeaders bool
		body       []byte
	)
	for {
		f, err := w.fr.ReadFrame()
		if err != nil {
			return nil, w.ioError(err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := w.flushAfter(w.fr.WriteSettingsAck()); err != nil {
					return nil, w.ioError(err)
				}
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				if err := w.flushAfter(w.fr.WritePing(true, f.Data)); err != nil {
					return nil, w.ioError(err)
				}
			}
		case *http2.GoAwayFrame:
			if f.LastStreamID < id {
				return nil, status.Errorf(codes.Unavailable, "the plugin is going away (GOAWAY %v)", f.ErrCode)
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				return nil, streamResetError(f.ErrCode)
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID != id {
				continue
			}
			if f.Truncated {
				return nil, status.Errorf(codes.ResourceExhausted, "response headers exceed %d bytes", registration.MaxInfoMessageSize)
			}
			if !gotHeaders {
				gotHeaders = true
				if err := checkResponseHeaders(f); err != nil {
					return nil, err
				}
			}
			if f.StreamEnded() {
				return finish(f, body)
			}
		case *http2.DataFrame:
			if f.StreamID != id {
				continue
			}
			if !gotHeaders {
				return nil, status.Error(codes.Internal, "DATA before response headers")
			}
			if len(body)+len(f.Data()) > registration.MaxInfoMessageSize+5 {
				return nil, status.Errorf(codes.ResourceExhausted, "response larger than %d bytes", registration.MaxInfoMessageSize)
			}
			body = append(body, f.Data()...)
			if f.StreamEnded() {
				return nil, status.Error(codes.Internal, "the plugin ended the stream without trailers")
			}
		}
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
	if errors.As(err, &ce) {
		return status.Errorf(codes.Internal, "HTTP/2 protocol error: %v", err)
	}
	return status.Errorf(codes.Unavailable, "connection error: %v", err)
}

// checkResponseHeaders accepts a response that is HTTP 200 with a gRPC content type.
func checkResponseHeaders(f *http2.MetaHeadersFrame) error {
	st := f.PseudoValue("status")
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
		return status.Errorf(code, "unexpected HTTP status %q", st)
	}
	if ct := headerValue(f, "content-type"); !strings.HasPrefix(ct, "application/grpc") {
		return status.Errorf(codes.Internal, "unexpected content-type %q", ct)
	}
	return nil
}

// finish reads the trailers and returns the message of a successful call.
func finish(trailers *http2.MetaHeadersFrame, body []byte) ([]byte, error) {
	raw := headerValue(trailers, "grpc-status")
	code, err := strconv.ParseUint(raw, 10, 32)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "malformed grpc-status %q", raw)
	}
	if code != uint64(codes.OK) {
		return nil, serverStatus{status.New(codes.Code(code), decodeGRPCMessage(headerValue(trailers, "grpc-message")))}
	}
	if len(body) < 5 {
		return nil, status.Errorf(codes.Internal, "response has no message (%d bytes)", len(body))
	}
	if body[0] != 0 {
		return nil, status.Error(codes.Internal, "compressed response, but no compression was offered")
	}
	if n := binary.BigEndian.Uint32(body[1:5]); int(n) != len(body)-5 {
		return nil, status.Errorf(codes.Internal, "response message of %d bytes announced, %d received", n, len(body)-5)
	}
	return body[5:], nil
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
	return status.Errorf(codes.Internal, "stream reset by the plugin: %v", code)
}

func headerValue(f *http2.MetaHeadersFrame, name string) string {
	for _, h := range f.RegularFields() {
		if h.Name == name {
			return h.Value
		}
	}
	return ""
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
