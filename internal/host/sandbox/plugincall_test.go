package sandbox

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/host/sandbox/sandboxtest"
	"github.com/wasmhost/wasmhost/internal/limits"
	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/registration/registrar"
)

// rawBytes passes a message through as bytes, for a plugin served in the test.
type rawBytes struct{}

var _ encoding.CodecV2 = rawBytes{}

func (rawBytes) Name() string { return "proto" }
func (rawBytes) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}
func (rawBytes) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

// servePlugin serves every method on a unix socket with an answer of size bytes, and returns
// the socket's path.
func servePlugin(t *testing.T, size int) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "p.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	answer := bytes.Repeat([]byte("a"), size)
	srv := grpc.NewServer(grpc.ForceServerCodecV2(rawBytes{}), grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		var in []byte
		if err := stream.RecvMsg(&in); err != nil {
			return err
		}
		return stream.SendMsg(&answer)
	}))
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return path
}

// A plugin that answers plugin_call with more than pluginCallResponseSize: the guest gets
// CodeTooLarge (not CodeFailed), and error_read names the key; one within it gets the answer.
func TestPluginCallResponseTooLarge(t *testing.T) {
	sb, _ := newTestSandbox(t, Config{
		PluginCaller: registrar.PluginCaller{},
		Grants:       map[string][]string{"pcsize.example": {abi.CapabilityPluginCall}},
		Limits:       limits.Handler{PluginCallResponseSize: 1000},
	})
	m := mustLoad(t, sb, "pcsize")
	for _, c := range []struct {
		size int
		want []string
	}{
		{2000, []string{": too large: response of 2000 bytes over the limit of 1000 (handlers.limits.pluginCallResponseSize)"}},
		{1000, []string{": ok"}},
	} {
		p := registration.PluginInfo{Type: "pcsize.example", Name: "p", Endpoint: servePlugin(t, c.size)}
		sandboxtest.ErrContains(t, m.ValidatePlugin(context.Background(), p), registration.ErrRejected, c.want...)
	}
}
