package registrar

import (
	"bytes"
	"compress/gzip"
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/wasmhost/wasmhost/internal/registration"
)

func TestEncodeTimeout(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                          "1n",
		500 * time.Nanosecond:      "500n",
		5 * time.Second:            "5000000u",
		time.Second + 1:            "1000001u",
		200 * time.Second:          "200000m",
		200000 * time.Second:       "200000S",
		time.Duration(1 << 62):     "76861434M",
		-3 * time.Millisecond:      "1n",
		99999999 * time.Nanosecond: "99999999n",
	} {
		if got := encodeTimeout(d); got != want {
			t.Errorf("encodeTimeout(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestDecodeGRPCMessage(t *testing.T) {
	for in, want := range map[string]string{
		"plain":          "plain",
		"a%20b%25c":      "a b%c",
		"bad%zzescape%2": "bad%zzescape%2",
		"caf%C3%A9":      "café",
	} {
		if got := decodeGRPCMessage(in); got != want {
			t.Errorf("decodeGRPCMessage(%q) = %q, want %q", in, got, want)
		}
	}
}

// scriptConn is a net.Conn that reads a fixed server script and discards what is written.
type scriptConn struct{ r *bytes.Reader }

func (c scriptConn) Read(b []byte) (int, error)     { return c.r.Read(b) }
func (scriptConn) Write(b []byte) (int, error)      { return len(b), nil }
func (scriptConn) Close() error                     { return nil }
func (scriptConn) LocalAddr() net.Addr              { return &net.UnixAddr{Net: "unix"} }
func (scriptConn) RemoteAddr() net.Addr             { return &net.UnixAddr{Net: "unix"} }
func (scriptConn) SetDeadline(time.Time) error      { return nil }
func (scriptConn) SetReadDeadline(time.Time) error  { return nil }
func (scriptConn) SetWriteDeadline(time.Time) error { return nil }

// serverScript writes what a gRPC server sends for one unary call on stream id: its
// SETTINGS and a PING (once), response headers, the message, and trailers with code.
func serverScript(t testing.TB, id uint32, msg []byte, code codes.Code, text string) []byte {
	var out bytes.Buffer
	fr := http2.NewFramer(&out, nil)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	headers := func(end bool, fields ...string) {
		hb.Reset()
		for i := 0; i < len(fields); i += 2 {
			enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true, EndStream: end}); err != nil {
			t.Fatal(err)
		}
	}
	if id == 1 {
		fr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 16384})
		fr.WritePing(false, [8]byte{1})
		fr.WriteWindowUpdate(0, 1000)
	}
	if code != codes.OK {
		headers(true, ":status", "200", "content-type", "application/grpc", "grpc-status", strconv.Itoa(int(code)), "grpc-message", text)
		return out.Bytes()
	}
	headers(false, ":status", "200", "content-type", "application/grpc")
	frame := append([]byte{0, 0, 0, 0, byte(len(msg))}, msg...)
	fr.WriteData(id, false, frame)
	headers(true, "grpc-status", "0")
	return out.Bytes()
}

func TestWireConnScript(t *testing.T) {
	info := []byte{0x0a, 0x01, 'T', 0x12, 0x01, 'N'}
	script := append(serverScript(t, 1, info, codes.OK, ""), serverScript(t, 3, nil, codes.Unknown, "failed%20registration")...)
	w := newWireConn(scriptConn{bytes.NewReader(script)})
	defer w.close()
	got, err := w.call(context.Background(), "/x/GetInfo", nil)
	if err != nil || !bytes.Equal(got, info) {
		t.Fatalf("first call = %x, %v; want %x", got, err, info)
	}
	_, err = w.call(context.Background(), "/x/Notify", encodeStatus(false, "why"))
	if st, _ := status.FromError(err); st.Code() != codes.Unknown || st.Message() != "failed registration" {
		t.Fatalf("second call error = %v, want Unknown \"failed registration\"", err)
	}
	if w.broken != nil {
		t.Fatalf("a server status broke the connection: %v", w.broken)
	}
	_, err = w.call(context.Background(), "/x/Notify", nil)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("third call error = %v, want Unavailable (EOF)", err)
	}
}

// FuzzWireResponse feeds arbitrary bytes as the server's side of a connection: the client
// must never panic, answer only with gRPC status errors, and never return a message over
// the limit.
func FuzzWireResponse(f *testing.F) {
	f.Add(serverScript(f, 1, []byte{0x0a, 0x01, 'T'}, codes.OK, ""))
	f.Add(serverScript(f, 1, nil, codes.Unimplemented, "unknown%20service"))
	f.Add([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
	f.Add(gzipScript(f))
	f.Fuzz(func(t *testing.T, script []byte) {
		w := newWireConn(scriptConn{bytes.NewReader(script)})
		defer w.close()
		for range 2 {
			got, err := w.call(context.Background(), "/x/GetInfo", nil)
			if err != nil {
				if _, ok := status.FromError(err); !ok {
					t.Fatalf("error %v is not a gRPC status", err)
				}
				return
			}
			if len(got) > registration.MaxInfoMessageSize {
				t.Fatalf("accepted a %d-byte message", len(got))
			}
		}
	})
}

// gzipScript is a server's answer compressed with gzip, its headers split over a HEADERS and
// a CONTINUATION frame, after SETTINGS with a small window and a WINDOW_UPDATE: the paths the
// non-Go stacks take.
func gzipScript(t testing.TB) []byte {
	var out, hb bytes.Buffer
	fr := http2.NewFramer(&out, nil)
	enc := hpack.NewEncoder(&hb)
	fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 5}, http2.Setting{ID: http2.SettingMaxFrameSize, Val: 16384})
	fr.WriteWindowUpdate(1, 100)
	for _, f := range [][2]string{{":status", "200"}, {"content-type", "application/grpc"}, {"grpc-encoding", "gzip"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	block := hb.Bytes()
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:3]})
	fr.WriteContinuation(1, true, block[3:])
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write([]byte{0x0a, 0x01, 'T', 0x12, 0x01, 'N'})
	zw.Close()
	msg := append([]byte{1, 0, 0, 0, byte(z.Len())}, z.Bytes()...)
	fr.WriteData(1, false, msg)
	hb.Reset()
	enc.WriteField(hpack.HeaderField{Name: "grpc-status", Value: "0"})
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true, EndStream: true})
	return out.Bytes()
}

func TestWireConnScriptGzip(t *testing.T) {
	w := newWireConn(scriptConn{bytes.NewReader(gzipScript(t))})
	defer w.close()
	got, err := w.call(context.Background(), "/x/GetInfo", nil)
	if want := []byte{0x0a, 0x01, 'T', 0x12, 0x01, 'N'}; err != nil || !bytes.Equal(got, want) {
		t.Fatalf("call = %x, %v; want %x", got, err, want)
	}
}

// A plugin's status message is kept to maxFieldText bytes, whatever it sends within the
// header list limit: it becomes the socket's last error, a log line and an Event.
func TestWireConnCutsStatusMessage(t *testing.T) {
	long := strings.Repeat("m", 15_000) // in one HEADERS frame, under its 16 KiB
	w := newWireConn(scriptConn{bytes.NewReader(serverScript(t, 1, nil, codes.Internal, long))})
	defer w.close()
	_, err := w.call(context.Background(), "/x/GetInfo", nil)
	st, _ := status.FromError(err)
	if st.Code() != codes.Internal {
		t.Fatalf("error = %v, want the plugin's Internal status", err)
	}
	if msg := st.Message(); len(msg) > maxFieldText || !strings.HasPrefix(msg, "mmmm") || !strings.Contains(msg, "more bytes") {
		t.Errorf("status message of %d bytes kept as %d bytes (%.60q…), want at most %d, its start and how much was cut",
			len(long), len(msg), msg, maxFieldText)
	}
}
