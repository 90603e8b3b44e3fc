// Package registrationtest provides fakes for tests of wasmhost's packages: an in-process
// plugin that serves the kubelet's plugin-registration API on a real unix socket and behaves
// like the real plugins do (including the badly behaved ones), and a Handler that records
// its calls.
//
// This package is part of the daemon's tests, not a stable API.
package registrationtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	regapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Info is what a fake plugin answers to GetInfo. It is sent exactly as given, even when it is
// not valid (invalid UTF-8, control characters, oversized fields), so that the receiving side
// can be tested with answers the generated protobuf code would refuse to send.
type Info struct {
	Type     string
	Name     string
	Endpoint string
	Versions []string
}

// NotifyBehaviour is how a fake plugin answers NotifyRegistrationStatus. Each mimics a real
// plugin.
type NotifyBehaviour int

const (
	// NotifyOK answers every notification.
	NotifyOK NotifyBehaviour = iota
	// NotifyFailFalse returns an error to Notify(false) and answers Notify(true), like the
	// DRA kubelet-plugin helper ("failed registration process: ...").
	NotifyFailFalse
	// NotifyFail returns an error to every notification.
	NotifyFail
	// NotifyHang never answers: the call returns only when the caller gives up (or the plugin
	// is closed), like the kubelet's example plugin.
	NotifyHang
	// NotifyExitOnFalse dies inside Notify(false): it closes its listener and connections
	// without answering and leaves its socket file behind, like the CSI
	// node-driver-registrar. The caller sees Unavailable. Notify(true) is answered.
	NotifyExitOnFalse
)

// Options configures a fake plugin. The zero value answers everything at once.
type Options struct {
	// Notify is how NotifyRegistrationStatus is answered. Defaults to NotifyOK.
	Notify NotifyBehaviour
	// GetInfoHang makes GetInfo never answer (until the caller gives up). Defaults to false.
	GetInfoHang bool
	// RawInfo, when not nil, is sent as the GetInfo answer instead of the encoded Info: any
	// bytes, for malformed messages. Defaults to nil.
	RawInfo []byte
	// ListenDelay binds the socket at once (the file appears) but calls listen() only after
	// this delay: connects in between are refused, as with a real plugin starting up.
	// Defaults to 0 (listen at once).
	ListenDelay time.Duration
	// Calls answers other methods on the same socket, as a driver that serves its own API
	// beside registration does (a CSI driver's NodeGetInfo): by full method name
	// ("/csi.v1.Node/NodeGetInfo"), the encoded reply, whatever the request. Other methods
	// are Unimplemented. Defaults to nil: none.
	Calls map[string][]byte
}

// Notification is one NotifyRegistrationStatus call a fake plugin received.
type Notification struct {
	Registered bool
	Error      string
	At         time.Time // when the plugin received it
}

// Plugin is a running fake plugin. Its methods are safe for concurrent use.
type Plugin struct {
	path string
	info []byte // the GetInfo answer, encoded
	opts Options

	srv     *grpc.Server
	stopped chan struct{} // closed by Close/Kill: hanging calls return
	served  sync.WaitGroup

	mu        sync.Mutex
	ln        *trackingListener // nil until listening
	pendingFD int               // bound, not yet listening; -1 when none
	timer     *time.Timer       // pending delayed listen
	closed    bool
	exited    bool
	getInfos  int
	notes     []Notification
	next      int                 // first notification not yet returned by WaitNotification
	noteAdded chan struct{}       // closed and replaced when a notification is recorded
	parents   map[string][]string // the traceparent of each call received, by method ("" when none)
}

// Serve starts a fake plugin serving the registration API at socketPath (which must not
// exist) and stops it when the test ends, removing the socket file. It fails the test if
// the socket cannot be created.
func Serve(t testing.TB, socketPath string, info Info, opts Options) *Plugin {
	t.Helper()
	p, err := Start(socketPath, info, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// Start is Serve without a test: the caller must call Close. For benchmarks and helpers that
// start many plugins.
func Start(socketPath string, info Info, opts Options) (*Plugin, error) {
	p := &Plugin{
		path:      socketPath,
		info:      encodeInfo(info),
		opts:      opts,
		stopped:   make(chan struct{}),
		pendingFD: -1,
		noteAdded: make(chan struct{}),
	}
	if opts.RawInfo != nil {
		p.info = opts.RawInfo
	}
	p.srv = grpc.NewServer(grpc.ForceServerCodecV2(fakeCodec{}), grpc.WaitForHandlers(true), grpc.UnknownServiceHandler(p.call))
	p.srv.RegisterService(&serviceDesc, p)

	if opts.ListenDelay <= 0 {
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: socketPath, Net: "unix"})
		if err != nil {
			return nil, fmt.Errorf("registrationtest: listen on %s: %w", socketPath, err)
		}
		ln.SetUnlinkOnClose(false) // Close and Kill decide
		p.serve(ln)
		return p, nil
	}
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("registrationtest: socket for %s: %w", socketPath, err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: socketPath}); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("registrationtest: bind %s: %w", socketPath, err)
	}
	p.pendingFD = fd
	p.timer = time.AfterFunc(opts.ListenDelay, p.listenLate)
	return p, nil
}

// listenLate calls listen() on the socket bound by Start.
func (p *Plugin) listenLate() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.pendingFD < 0 {
		return
	}
	fd := p.pendingFD
	p.pendingFD = -1
	f := os.NewFile(uintptr(fd), p.path)
	defer f.Close() // FileListener made its own copy
	if err := syscall.Listen(fd, syscall.SOMAXCONN); err != nil {
		return // connects stay refused; the test sees it
	}
	ln, err := net.FileListener(f)
	if err != nil {
		return
	}
	p.serveLocked(ln)
}

func (p *Plugin) serve(ln net.Listener) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.serveLocked(ln)
}

func (p *Plugin) serveLocked(ln net.Listener) {
	p.ln = &trackingListener{Listener: ln, conns: make(map[net.Conn]struct{})}
	p.served.Add(1)
	go func() {
		defer p.served.Done()
		_ = p.srv.Serve(p.ln) // returns when the listener is closed
	}()
}

// call answers a method of Options.Calls.
func (p *Plugin) call(_ any, stream grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(stream)
	p.recordParent(stream.Context(), method)
	reply, ok := p.opts.Calls[method]
	if !ok {
		return status.Errorf(codes.Unimplemented, "unknown method %s", method)
	}
	var req rawReply
	if err := stream.RecvMsg(&req); err != nil {
		return err
	}
	return stream.SendMsg(rawReply(reply))
}

// recordParent records the W3C traceparent of a call of method the plugin received, as a
// plugin that traces would read it from the request's metadata.
func (p *Plugin) recordParent(ctx context.Context, method string) {
	v := ""
	if tp := metadata.ValueFromIncomingContext(ctx, "traceparent"); len(tp) > 0 {
		v = tp[0]
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.parents == nil {
		p.parents = map[string][]string{}
	}
	p.parents[method] = append(p.parents[method], v)
}

// TraceParents returns the traceparent metadata of each call of method (a full gRPC method
// name) the plugin received, in order: "" for a call that carried none.
func (p *Plugin) TraceParents(method string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.parents[method])
}

// Path returns the plugin's socket path.
func (p *Plugin) Path() string { return p.path }

// Close stops the plugin as a clean exit does: it stops serving, waits for its calls to
// return, and removes its socket file. It may be called more than once.
func (p *Plugin) Close() {
	if p.stop() {
		os.Remove(p.path)
	}
}

// Kill stops the plugin as SIGKILL does: it stops serving and leaves its socket file behind.
// It may be called more than once.
func (p *Plugin) Kill() { p.stop() }

// stop stops everything and reports whether this call did it.
func (p *Plugin) stop() bool {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return false
	}
	p.closed = true
	close(p.stopped)
	if p.timer != nil {
		p.timer.Stop()
	}
	if p.pendingFD >= 0 {
		syscall.Close(p.pendingFD)
		p.pendingFD = -1
	}
	p.mu.Unlock()
	p.srv.Stop() // closes the listener and connections, waits for handlers
	p.served.Wait()
	return true
}

// Exited reports whether the plugin died inside Notify(false) (NotifyExitOnFalse).
func (p *Plugin) Exited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited
}

// GetInfoCalls returns how many GetInfo calls the plugin received.
func (p *Plugin) GetInfoCalls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.getInfos
}

// Notifications returns every notification received so far, oldest first.
func (p *Plugin) Notifications() []Notification {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Notification(nil), p.notes...)
}

// WaitNotification returns the oldest notification not yet returned by WaitNotification,
// waiting for it at most timeout. It fails the test when none comes.
func (p *Plugin) WaitNotification(t testing.TB, timeout time.Duration) Notification {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		p.mu.Lock()
		if p.next < len(p.notes) {
			n := p.notes[p.next]
			p.next++
			p.mu.Unlock()
			return n
		}
		added := p.noteAdded
		p.mu.Unlock()
		select {
		case <-added:
		case <-timer.C:
			t.Fatalf("plugin at %s: no notification within %v", p.path, timeout)
			return Notification{}
		}
	}
}

func (p *Plugin) record(n Notification) {
	p.mu.Lock()
	p.notes = append(p.notes, n)
	close(p.noteAdded)
	p.noteAdded = make(chan struct{})
	p.mu.Unlock()
}

func (p *Plugin) getInfo(ctx context.Context) (any, error) {
	p.recordParent(ctx, regapi.Registration_GetInfo_FullMethodName)
	p.mu.Lock()
	p.getInfos++
	p.mu.Unlock()
	if p.opts.GetInfoHang {
		return nil, p.hang(ctx)
	}
	return rawReply(p.info), nil
}

func (p *Plugin) notify(ctx context.Context, st *regapi.RegistrationStatus) (any, error) {
	p.recordParent(ctx, regapi.Registration_NotifyRegistrationStatus_FullMethodName)
	n := Notification{Registered: st.GetPluginRegistered(), Error: st.GetError(), At: time.Now()}
	p.record(n)
	switch p.opts.Notify {
	case NotifyFailFalse:
		if !n.Registered {
			return nil, status.Errorf(codes.Unknown, "failed registration process: %s", n.Error)
		}
	case NotifyFail:
		return nil, status.Errorf(codes.Unknown, "fake plugin refuses the notification")
	case NotifyHang:
		return nil, p.hang(ctx)
	case NotifyExitOnFalse:
		if !n.Registered {
			p.mu.Lock()
			p.exited = true
			ln := p.ln
			p.mu.Unlock()
			ln.closeAll() // the process is gone: no answer, socket file left behind
			return nil, p.hang(ctx)
		}
	}
	return &regapi.RegistrationStatusResponse{}, nil
}

// hang waits until the caller gives up or the plugin stops.
func (p *Plugin) hang(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	case <-p.stopped:
		return status.Error(codes.Unavailable, "fake plugin stopped")
	}
}

// SocketDir returns a new short directory for sockets (unix socket paths are limited to 108
// bytes), removed when the test ends.
func SocketDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// serviceDesc serves pluginregistration.Registration with handlers that can answer what the
// generated code could not send (see Info).
var serviceDesc = grpc.ServiceDesc{
	ServiceName: "pluginregistration.Registration",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{
			MethodName: "GetInfo",
			Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				if err := dec(new(regapi.InfoRequest)); err != nil {
					return nil, err
				}
				return srv.(*Plugin).getInfo(ctx)
			},
		},
		{
			MethodName: "NotifyRegistrationStatus",
			Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				st := new(regapi.RegistrationStatus)
				if err := dec(st); err != nil {
					return nil, err
				}
				return srv.(*Plugin).notify(ctx, st)
			},
		},
	},
	Metadata: "api.proto",
}

// rawReply is a message already encoded.
type rawReply []byte

// fakeCodec is the proto codec, plus rawReply sent as is.
type fakeCodec struct{}

var _ encoding.CodecV2 = fakeCodec{}

func (fakeCodec) Name() string { return "proto" }

func (fakeCodec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case rawReply:
		return mem.BufferSlice{mem.SliceBuffer(m)}, nil
	case proto.Message:
		b, err := proto.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	return nil, fmt.Errorf("fake codec: cannot marshal %T", v)
}

func (fakeCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if raw, ok := v.(*rawReply); ok {
		*raw = data.Materialize()
		return nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("fake codec: cannot unmarshal into %T", v)
	}
	return proto.Unmarshal(data.Materialize(), m)
}

// encodeInfo encodes a PluginInfo message without checking the strings.
func encodeInfo(in Info) []byte {
	var b []byte
	appendString := func(num protowire.Number, s string) {
		if s == "" {
			return
		}
		b = protowire.AppendTag(b, num, protowire.BytesType)
		b = protowire.AppendString(b, s)
	}
	appendString(1, in.Type)
	appendString(2, in.Name)
	appendString(3, in.Endpoint)
	for _, v := range in.Versions {
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendString(b, v)
	}
	return b
}

// trackingListener remembers the connections it accepted, so that the plugin can drop them
// all at once, as a process that exits does.
type trackingListener struct {
	net.Listener
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	killed bool
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.killed {
		c.Close()
		return nil, net.ErrClosed
	}
	l.conns[c] = struct{}{}
	return c, nil
}

func (l *trackingListener) closeAll() {
	l.mu.Lock()
	l.killed = true
	conns := l.conns
	l.conns = nil
	l.mu.Unlock()
	l.Listener.Close()
	for c := range conns {
		c.Close()
	}
}
