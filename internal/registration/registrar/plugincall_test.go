package registrar

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/wasmhost/wasmhost/internal/registration"
)

// serveEcho serves every method on a unix socket: it answers with the request bytes reversed,
// or with a NotFound status for /test.Svc/Missing, a ResourceExhausted one for
// /test.Svc/Exhausted, and an Internal one with a 30,000-byte message for /test.Svc/Verbose;
// /test.Svc/BigTrailer answers with trailers of 100,000 bytes.
func serveEcho(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "csi.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(rawCodec{}), grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		method, _ := grpc.MethodFromServerStream(stream)
		switch method {
		case "/test.Svc/Missing":
			return status.Error(codes.NotFound, "no such thing")
		case "/test.Svc/Exhausted":
			return status.Error(codes.ResourceExhausted, "out of volumes")
		case "/test.Svc/Verbose":
			return status.Error(codes.Internal, strings.Repeat("v", 30_000))
		case "/test.Svc/BigTrailer":
			stream.SetTrailer(metadata.Pairs("x-big", strings.Repeat("t", 100_000)))
		}
		var in rawMessage
		if err := stream.RecvMsg(&in); err != nil {
			return err
		}
		out := bytes.Clone(in.b)
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
		return stream.SendMsg(&rawMessage{b: out})
	}))
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return path
}

func TestPluginCaller(t *testing.T) {
	path := serveEcho(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var c PluginCaller

	for _, ep := range []string{path, "unix://" + path, "unix:" + path} {
		got, err := c.Call(ctx, ep, "/test.Svc/Echo", []byte("abc"), 1024)
		if err != nil {
			t.Fatalf("Call(%q): %v", ep, err)
		}
		if string(got) != "cba" {
			t.Errorf("Call(%q) = %q, want %q", ep, got, "cba")
		}
	}

	_, err := c.Call(ctx, path, "/test.Svc/Missing", nil, 1024)
	if status.Code(errors.Unwrap(err)) != codes.NotFound {
		t.Errorf("a NotFound status: got %v", err)
	}

	_, err = c.Call(ctx, path, "/test.Svc/Echo", bytes.Repeat([]byte("x"), 2000), 1000)
	if !errors.Is(err, registration.ErrResponseTooLarge) || status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a response over maxResp: got %v, want ErrResponseTooLarge and ResourceExhausted", err)
	}
	var sized interface{ ResponseSize() int }
	if !errors.As(err, &sized) || sized.ResponseSize() < 2000 {
		t.Errorf("a response over maxResp: %v does not say its size", err)
	}
	if err != nil && !strings.Contains(err.Error(), "over the limit of 1000") {
		t.Errorf("a response over maxResp: %q does not name the limit", err)
	}

	// A plugin's own ResourceExhausted is its answer, not a response too large.
	_, err = c.Call(ctx, path, "/test.Svc/Exhausted", nil, 1024)
	if errors.Is(err, registration.ErrResponseTooLarge) || status.Code(errors.Unwrap(err)) != codes.ResourceExhausted {
		t.Errorf("the plugin's ResourceExhausted: got %v, want that status and not ErrResponseTooLarge", err)
	}

	// Trailers over pluginCallMaxHeaderList fail the call, which a status of gRPC's says.
	_, err = c.Call(ctx, path, "/test.Svc/BigTrailer", []byte("x"), 1024)
	if err == nil || len(err.Error()) > maxCallErrorText+200 {
		t.Errorf("trailers of 100,000 bytes: got %.300v, want a short error", err)
	}

	// A long status message is kept to maxCallErrorText bytes, its code as it was.
	_, err = c.Call(ctx, path, "/test.Svc/Verbose", nil, 1024)
	st, _ := status.FromError(errors.Unwrap(err))
	if st.Code() != codes.Internal || len(st.Message()) > maxCallErrorText || !strings.HasPrefix(st.Message(), "vvv") {
		t.Errorf("a 30,000-byte status message: got code %v, %d bytes; want Internal, its start, at most %d bytes",
			st.Code(), len(st.Message()), maxCallErrorText)
	}
	if err != nil && len(err.Error()) > maxCallErrorText+200 {
		t.Errorf("the error's text is %d bytes long", len(err.Error()))
	}
}

func TestPluginCallerRefuses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var c PluginCaller
	for _, ep := range []string{"csi.sock", "localhost:443", "dns:///example.com:443", "unix:relative.sock", ""} {
		if _, err := c.Call(ctx, ep, "/a.B/C", nil, 10); !errors.Is(err, ErrBadEndpoint) {
			t.Errorf("endpoint %q: got %v, want ErrBadEndpoint", ep, err)
		}
	}
	if _, err := c.Call(ctx, "/tmp/x.sock", "NodeGetInfo", nil, 10); err == nil {
		t.Error("a method that is not a full gRPC name was accepted")
	}
}

// A missing socket, or one nobody listens on, fails the call with the dial's error, not
// with the call's deadline (the context here has a minute).
func TestPluginCallerFailsFast(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close() // the file stays, as a killed plugin's does

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var c PluginCaller
	for _, tc := range []struct {
		endpoint string
		want     error
	}{
		{filepath.Join(dir, "missing.sock"), fs.ErrNotExist},
		{"unix://" + stale, syscall.ECONNREFUSED},
	} {
		_, err := c.Call(ctx, tc.endpoint, "/csi.v1.Node/NodeGetInfo", nil, 10)
		if !errors.Is(err, ErrEndpointUnreachable) || !errors.Is(err, tc.want) {
			t.Errorf("endpoint %s: got %v; want ErrEndpointUnreachable and %v", tc.endpoint, err, tc.want)
		}
		if ctx.Err() != nil {
			t.Fatalf("endpoint %s: the call waited out its deadline", tc.endpoint)
		}
	}
}
