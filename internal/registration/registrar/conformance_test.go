package registrar

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/wasmhost/wasmhost/internal/registration"
)

// h2Plugin is a gRPC server written on the HTTP/2 framer, so that a test can make it behave
// as the non-Go stacks do (small windows, compressed answers, large metadata) or break the
// protocol, and check what the client sent: every DATA frame must fit the windows and the
// frame size it advertised, or it resets the stream with FLOW_CONTROL_ERROR as grpcio does.
type h2Plugin struct {
	// window is the SETTINGS_INITIAL_WINDOW_SIZE it advertises (0: the default, 65535); it
	// gives the window back (WINDOW_UPDATE) only once it has read a DATA frame.
	window uint32
	// answer returns the response to a request: the message, its encoding ("" for none, or
	// the grpc-encoding it is compressed with), and extra header and trailer fields. A nil
	// answer echoes the request.
	answer func(req []byte) (msg []byte, encoding string, headers, trailers []hpack.HeaderField)
	// raw, if set, is written instead of the response (for protocol errors).
	raw func(fr *http2.Framer, stream uint32)

	mu         sync.Mutex
	requests   [][]byte          // the request messages received
	reqHeaders map[string]string // the last request's header fields
	violations []string          // what the client did wrong
}

// serve starts the plugin on a unix socket and returns a connected wireConn.
func (p *h2Plugin) serve(t *testing.T) *wireConn {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ln, err := net.Listen("unix", filepath.Join(dir, "p.sock"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		p.conn(c)
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	c, err := net.Dial("unix", filepath.Join(dir, "p.sock"))
	if err != nil {
		t.Fatal(err)
	}
	w := newWireConn(c)
	t.Cleanup(w.close)
	return w
}

func (p *h2Plugin) violation(format string, args ...any) {
	p.mu.Lock()
	p.violations = append(p.violations, fmt.Sprintf(format, args...))
	p.mu.Unlock()
}

func (p *h2Plugin) conn(c net.Conn) {
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil {
		return
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	var settings []http2.Setting
	window := int64(65535)
	if p.window != 0 {
		settings = append(settings, http2.Setting{ID: http2.SettingInitialWindowSize, Val: p.window})
		window = int64(p.window)
	}
	fr.WriteSettings(settings...)
	var (
		hb         bytes.Buffer
		enc        = hpack.NewEncoder(&hb)
		connWindow = int64(65535)
		streams    = map[uint32]int64{} // send windows the client has, per stream
		bodies     = map[uint32][]byte{}
	)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			streams[f.StreamID] = window
			h := map[string]string{}
			for _, hf := range f.Fields {
				h[hf.Name] = hf.Value
			}
			p.mu.Lock()
			p.reqHeaders = h
			p.mu.Unlock()
		case *http2.DataFrame:
			n := int64(len(f.Data()))
			if n > streams[f.StreamID] || n > connWindow {
				p.violation("stream %d: a DATA frame of %d bytes, window %d (connection %d)", f.StreamID, n, streams[f.StreamID], connWindow)
				fr.WriteRSTStream(f.StreamID, http2.ErrCodeFlowControl)
				continue
			}
			streams[f.StreamID] -= n
			connWindow -= n
			bodies[f.StreamID] = append(bodies[f.StreamID], f.Data()...)
			if n > 0 {
				fr.WriteWindowUpdate(0, uint32(n))
				connWindow += n
				if !f.StreamEnded() {
					fr.WriteWindowUpdate(f.StreamID, uint32(n))
					streams[f.StreamID] += n
				}
			}
			if f.StreamEnded() {
				p.respond(fr, enc, &hb, f.StreamID, bodies[f.StreamID])
			}
		}
	}
}

func (p *h2Plugin) respond(fr *http2.Framer, enc *hpack.Encoder, hb *bytes.Buffer, id uint32, body []byte) {
	if len(body) < 5 || int(binary.BigEndian.Uint32(body[1:5])) != len(body)-5 {
		p.violation("stream %d: malformed request of %d bytes", id, len(body))
		fr.WriteRSTStream(id, http2.ErrCodeProtocol)
		return
	}
	req := body[5:]
	p.mu.Lock()
	p.requests = append(p.requests, req)
	p.mu.Unlock()
	if p.raw != nil {
		p.raw(fr, id)
		return
	}
	msg, encoding, headers, trailers := req, "", []hpack.HeaderField(nil), []hpack.HeaderField(nil)
	if p.answer != nil {
		msg, encoding, headers, trailers = p.answer(req)
	}
	block := func(end bool, fields ...hpack.HeaderField) {
		hb.Reset()
		for _, f := range fields {
			enc.WriteField(f)
		}
		b := hb.Bytes()
		first := true
		for first || len(b) > 0 {
			n := min(len(b), 16384)
			if first {
				fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b[:n], EndHeaders: n == len(b), EndStream: end})
			} else {
				fr.WriteContinuation(id, n == len(b), b[:n])
			}
			first, b = false, b[n:]
		}
	}
	h := []hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "content-type", Value: "application/grpc"}}
	if encoding != "" {
		h = append(h, hpack.HeaderField{Name: "grpc-encoding", Value: encoding})
	}
	block(false, append(h, headers...)...)
	frame := make([]byte, 5, 5+len(msg))
	if encoding != "" {
		frame[0] = 1
	}
	binary.BigEndian.PutUint32(frame[1:], uint32(len(msg)))
	frame = append(frame, msg...)
	for len(frame) > 0 {
		n := min(len(frame), 16384)
		fr.WriteData(id, false, frame[:n])
		frame = frame[n:]
	}
	block(true, append([]hpack.HeaderField{{Name: "grpc-status", Value: "0"}}, trailers...)...)
}

func (p *h2Plugin) check(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, v := range p.violations {
		t.Errorf("the client broke HTTP/2: %s", v)
	}
}

func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// The client sends only what the plugin's windows allow, and the rest as they open: grpcio,
// grpc-js and grpc++ reset a stream that overruns them.
func TestWireConnHonoursFlowControl(t *testing.T) {
	for _, tc := range []struct {
		name   string
		window uint32
		size   int
	}{
		{"tiny window", 7, 3000},
		{"default window, message over a frame and over the window", 0, 100 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &h2Plugin{window: tc.window, answer: func([]byte) ([]byte, string, []hpack.HeaderField, []hpack.HeaderField) {
				return []byte("ok"), "", nil, nil
			}}
			w := p.serve(t)
			// The first call goes before the plugin's SETTINGS are read, under HTTP/2's defaults.
			if _, err := w.call(callCtx(t), "/x/GetInfo", nil); err != nil {
				t.Fatalf("GetInfo: %v", err)
			}
			msg := bytes.Repeat([]byte("reason "), tc.size/7)
			if _, err := w.call(callCtx(t), "/x/Notify", msg); err != nil {
				t.Fatalf("a %d-byte request with window %d: %v", len(msg), tc.window, err)
			}
			p.check(t)
			p.mu.Lock()
			defer p.mu.Unlock()
			if got := p.requests[len(p.requests)-1]; !bytes.Equal(got, msg) {
				t.Errorf("the plugin received %d bytes, want the %d sent", len(got), len(msg))
			}
		})
	}
}

func gzipped(t testing.TB, b []byte) []byte {
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	zw.Write(b)
	zw.Close()
	return out.Bytes()
}

// A gzip answer is decoded, whatever was offered; what was offered is gzip.
func TestWireConnGzipAnswer(t *testing.T) {
	info := []byte{0x0a, 0x09, 'C', 'S', 'I', 'P', 'l', 'u', 'g', 'i', 'n'}
	p := &h2Plugin{answer: func([]byte) ([]byte, string, []hpack.HeaderField, []hpack.HeaderField) {
		return gzipped(t, info), "gzip", nil, nil
	}}
	w := p.serve(t)
	got, err := w.call(callCtx(t), "/x/GetInfo", nil)
	if err != nil || !bytes.Equal(got, info) {
		t.Fatalf("a gzip answer: %x, %v; want %x", got, err, info)
	}
	p.mu.Lock()
	accept := p.reqHeaders["grpc-accept-encoding"]
	p.mu.Unlock()
	if accept != "gzip" {
		t.Errorf("grpc-accept-encoding = %q, want gzip", accept)
	}
}

func TestWireConnRefusedAnswers(t *testing.T) {
	bomb := bytes.Repeat([]byte{0}, registration.MaxInfoMessageSize+1)
	big := strings.Repeat("v", 70_000)
	for _, tc := range []struct {
		name   string
		plugin *h2Plugin
		code   codes.Code
		kind   error
		says   string
	}{
		{
			name: "decompressed over the limit",
			plugin: &h2Plugin{answer: func([]byte) ([]byte, string, []hpack.HeaderField, []hpack.HeaderField) {
				return gzipped(t, bomb), "gzip", nil, nil
			}},
			code: codes.ResourceExhausted, says: "once decompressed",
		},
		{
			name: "compressed with an encoding not offered",
			plugin: &h2Plugin{answer: func(req []byte) ([]byte, string, []hpack.HeaderField, []hpack.HeaderField) {
				return req, "snappy", nil, nil
			}},
			code: codes.Internal, kind: registration.ErrProtocol, says: `"snappy", which was not offered`,
		},
		{
			name: "a trailer value over 64 KiB",
			plugin: &h2Plugin{answer: func(req []byte) ([]byte, string, []hpack.HeaderField, []hpack.HeaderField) {
				return req, "", nil, []hpack.HeaderField{{Name: "x-big", Value: big}}
			}},
			code: codes.ResourceExhausted, kind: ErrMetadataTooLarge, says: "headers or trailers are too large",
		},
		{
			name: "headers over 64 KiB in all",
			plugin: &h2Plugin{answer: func(req []byte) ([]byte, string, []hpack.HeaderField, []hpack.HeaderField) {
				var h []hpack.HeaderField
				for i := range 20 {
					h = append(h, hpack.HeaderField{Name: fmt.Sprint("x-", i), Value: big[:4000]})
				}
				return req, "", h, nil
			}},
			code: codes.ResourceExhausted, kind: ErrMetadataTooLarge, says: "SETTINGS_MAX_HEADER_LIST_SIZE",
		},
		{
			name: "stream reset with PROTOCOL_ERROR",
			plugin: &h2Plugin{raw: func(fr *http2.Framer, id uint32) {
				fr.WriteRSTStream(id, http2.ErrCodeProtocol)
			}},
			code: codes.Internal, kind: registration.ErrProtocol, says: "PROTOCOL_ERROR",
		},
		{
			name: "GOAWAY with FLOW_CONTROL_ERROR",
			plugin: &h2Plugin{raw: func(fr *http2.Framer, id uint32) {
				fr.WriteGoAway(id, http2.ErrCodeFlowControl, []byte("window exceeded"))
			}},
			code: codes.Internal, kind: registration.ErrProtocol, says: `FLOW_CONTROL_ERROR ("window exceeded")`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := tc.plugin.serve(t)
			_, err := w.call(callCtx(t), "/x/GetInfo", nil)
			if status.Code(err) != tc.code || (tc.kind != nil && !errors.Is(err, tc.kind)) || !strings.Contains(fmt.Sprint(err), tc.says) {
				t.Fatalf("got %v; want code %v, matching %v, saying %q", err, tc.code, tc.kind, tc.says)
			}
		})
	}
}

// Large metadata under the limit is fine.
func TestWireConnLargeMetadataWithinLimit(t *testing.T) {
	p := &h2Plugin{answer: func(req []byte) ([]byte, string, []hpack.HeaderField, []hpack.HeaderField) {
		return req, "", []hpack.HeaderField{{Name: "x-big", Value: strings.Repeat("h", 30_000)}},
			[]hpack.HeaderField{{Name: "x-big", Value: strings.Repeat("t", 30_000)}}
	}}
	w := p.serve(t)
	for range 2 {
		if got, err := w.call(callCtx(t), "/x/Echo", []byte("hi")); err != nil || string(got) != "hi" {
			t.Fatalf("30 kB header and trailer: %q, %v", got, err)
		}
	}
}

// A plugin that breaks the protocol in GetInfo is not "unreachable".
func TestGetInfoProtocolErrorIsNotUnreachable(t *testing.T) {
	p := &h2Plugin{raw: func(fr *http2.Framer, id uint32) { fr.WriteRSTStream(id, http2.ErrCodeFlowControl) }}
	w := p.serve(t)
	r := &Registrar{cfg: Config{GetInfoTimeout: 5 * time.Second}}
	_, err := r.getInfo(context.Background(), w, "/tmp/p.sock")
	if !errors.Is(err, registration.ErrProtocol) || errors.Is(err, registration.ErrUnreachable) {
		t.Fatalf("got %v; want ErrProtocol, not ErrUnreachable", err)
	}
	if !strings.Contains(err.Error(), "FLOW_CONTROL_ERROR") {
		t.Errorf("%v does not say what the plugin sent", err)
	}
}
