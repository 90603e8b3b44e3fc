package main

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	dpapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	regapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/guestbuild"
	"github.com/wasmhost/wasmhost/internal/reconciler"
)

const (
	dpOptionsMethod = "/v1beta1.DevicePlugin/GetDevicePluginOptions"
	dpGetInfo       = "/pluginregistration.Registration/GetInfo"
	dpNotify        = "/pluginregistration.Registration/NotifyRegistrationStatus"
)

// fakeDevicePlugin is a device plugin registering through plugins_registry, as the kubelet's
// stub does in that mode: one socket serving GetInfo (type DevicePlugin, no endpoint) and the
// device plugin API. Its GetDevicePluginOptions answers whatever answer returns, encoded or
// not; every other device plugin method answers Unimplemented, and is recorded.
type fakeDevicePlugin struct {
	socket string
	info   []byte
	srv    *grpc.Server

	mu      sync.Mutex
	answer  func() ([]byte, error)
	methods []string // every method called, in order
	notes   []*regapi.RegistrationStatus
}

// startDevicePlugin serves a fake device plugin named name with versions at socket, its
// GetDevicePluginOptions answered by answer, until the test ends (or stop).
func startDevicePlugin(t *testing.T, socket, name string, versions []string, answer func() ([]byte, error)) *fakeDevicePlugin {
	t.Helper()
	info, err := proto.Marshal(&regapi.PluginInfo{Type: regapi.DevicePlugin, Name: name, SupportedVersions: versions})
	if err != nil {
		t.Fatal(err)
	}
	p := &fakeDevicePlugin{socket: socket, info: info, answer: answer}
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	p.srv = grpc.NewServer(grpc.ForceServerCodecV2(rawBytesCodec{}), grpc.UnknownServiceHandler(p.handle))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = p.srv.Serve(ln)
	}()
	t.Cleanup(func() {
		p.stop()
		<-done
	})
	return p
}

// stop stops serving and removes the socket, as a device plugin that exits cleanly does.
func (p *fakeDevicePlugin) stop() {
	p.srv.Stop()
	_ = os.Remove(p.socket)
}

func (p *fakeDevicePlugin) handle(_ any, stream grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(stream)
	var req []byte
	if err := stream.RecvMsg(&req); err != nil {
		return err
	}
	p.mu.Lock()
	p.methods = append(p.methods, method)
	answer := p.answer
	p.mu.Unlock()
	var resp []byte
	switch method {
	case dpGetInfo:
		resp = p.info
	case dpNotify:
		st := &regapi.RegistrationStatus{}
		if err := proto.Unmarshal(req, st); err != nil {
			return err
		}
		p.mu.Lock()
		p.notes = append(p.notes, st)
		p.mu.Unlock()
	case dpOptionsMethod:
		var err error
		if resp, err = answer(); err != nil {
			return err
		}
	default:
		return status.Errorf(codes.Unimplemented, "fake device plugin: %s", method)
	}
	return stream.SendMsg(&resp)
}

func (p *fakeDevicePlugin) setAnswer(answer func() ([]byte, error)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.answer = answer
}

// called returns the methods of the device plugin API called so far (not the registration's).
func (p *fakeDevicePlugin) called() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, m := range p.methods {
		if strings.HasPrefix(m, "/v1beta1.DevicePlugin/") {
			out = append(out, m)
		}
	}
	return out
}

// lastNote returns the last NotifyRegistrationStatus the plugin got, if any.
func (p *fakeDevicePlugin) lastNote() (*regapi.RegistrationStatus, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.notes) == 0 {
		return nil, false
	}
	return p.notes[len(p.notes)-1], true
}

// rawBytesCodec sends and receives messages as the bytes they are.
type rawBytesCodec struct{}

func (rawBytesCodec) Name() string { return "proto" }

func (rawBytesCodec) Marshal(v any) (mem.BufferSlice, error) {
	b := *v.(*[]byte)
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (rawBytesCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

// options answers GetDevicePluginOptions with o, encoded by the kubelet's own API types.
func options(t *testing.T, o *dpapi.DevicePluginOptions) func() ([]byte, error) {
	b, err := proto.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	return func() ([]byte, error) { return b, nil }
}

// TestE2EDevicePlugins runs the daemon with the shipped deviceplugin handler, granted
// plugin_call as examples/config/wasmhost.yaml does, and fake device plugins on real sockets:
// what it accepts, publishes and refuses, the newer socket of a resource winning, and plugins
// whose GetDevicePluginOptions fails or answers what cannot be used.
func TestE2EDevicePlugins(t *testing.T) {
	t.Parallel()
	wasm := guestbuild.ShippedBytes(t, "deviceplugin")
	dirs := newE2EDirs(t, "/tmp")
	if err := os.WriteFile(filepath.Join(dirs.Handler, "deviceplugin.wasm"), wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := e2eConfig(dirs)
	cfg.Handlers.Types = map[string]config.TypeConfig{"DevicePlugin": {Capabilities: []string{"plugin_call"}}}
	rd := startDaemon(t, cfg, testLog(t), nil)
	sock := func(name string) string { return filepath.Join(dirs.Socket, name) }
	v1beta1 := []string{"v1beta1"}

	// A device plugin registers, and what its options say is published.
	a := startDevicePlugin(t, sock("gpu-a.sock"), "example.com/gpu", v1beta1, options(t, &dpapi.DevicePluginOptions{PreStartRequired: true}))
	rd.waitState(a.socket, reconciler.StateRegistered)
	wantPublished(t, rd, a.socket, map[string]string{"resource": "example.com/gpu", "endpoint": a.socket,
		"pre_start_required": "true", "get_preferred_allocation_available": "false"})
	waitFor(t, "the device plugin to be told it is registered", func() bool {
		n, ok := a.lastNote()
		return ok && n.PluginRegistered
	})
	if got := a.called(); !slices.Equal(got, []string{dpOptionsMethod}) {
		t.Errorf("device plugin API calls %v, want GetDevicePluginOptions alone (never ListAndWatch)", got)
	}

	// Refused, each with a reason that names the rule, and told so; none is called.
	for _, tc := range []struct {
		socket, name string
		versions     []string
		reason       string
	}{
		{"old-api.sock", "example.com/gpu", []string{"v1alpha1"}, `its versions ["v1alpha1"] do not include v1beta1`},
		{"k8s.sock", "kubernetes.io/foo", v1beta1, "its name is not an extended resource name: it is in the kubernetes.io domain"},
		{"nodomain.sock", "foo", v1beta1, "its name is not an extended resource name: it has no domain (no '/')"},
		{"chars.sock", "example.com/g@pu", v1beta1, `its name is not an extended resource name: it has a resource part "g@pu" that has a character other than`},
	} {
		p := startDevicePlugin(t, sock(tc.socket), tc.name, tc.versions, options(t, &dpapi.DevicePluginOptions{}))
		st := rd.waitState(p.socket, reconciler.StateRejected)
		if !strings.Contains(st.LastError, tc.reason) {
			t.Errorf("%s: last error %q, want it to contain %q", tc.name, st.LastError, tc.reason)
		}
		waitFor(t, "the refused plugin to be told why", func() bool {
			n, ok := p.lastNote()
			return ok && !n.PluginRegistered && strings.Contains(n.Error, tc.reason)
		})
		if got := p.called(); len(got) != 0 {
			t.Errorf("%s: refused, yet called %v", tc.name, got)
		}
	}

	// A newer socket for the same resource wins; the older one is a standby, and takes over
	// when the newer one goes.
	b := startDevicePlugin(t, sock("gpu-b.sock"), "example.com/gpu", v1beta1, options(t, &dpapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}))
	rd.waitState(b.socket, reconciler.StateRegistered)
	rd.waitState(a.socket, reconciler.StateStandby)
	wantPublished(t, rd, b.socket, map[string]string{"resource": "example.com/gpu", "endpoint": b.socket,
		"pre_start_required": "false", "get_preferred_allocation_available": "true"})
	b.stop()
	rd.waitGone(b.socket)
	rd.waitState(a.socket, reconciler.StateRegistered)
	wantPublished(t, rd, a.socket, map[string]string{"resource": "example.com/gpu", "endpoint": a.socket,
		"pre_start_required": "true", "get_preferred_allocation_available": "false"})
	if got := a.called(); !slices.Equal(got, []string{dpOptionsMethod, dpOptionsMethod}) {
		t.Errorf("device plugin API calls after taking over %v, want GetDevicePluginOptions twice", got)
	}

	// GetDevicePluginOptions failing: the registration fails, with the plugin's error, and is
	// retried; once it answers, the plugin registers.
	c := startDevicePlugin(t, sock("fpga.sock"), "example.com/fpga", v1beta1, func() ([]byte, error) {
		return nil, status.Error(codes.Unavailable, "devices not probed yet")
	})
	st := rd.waitState(c.socket, reconciler.StateFailing)
	for _, want := range []string{`device plugin "example.com/fpga" at socket ` + c.socket + ": GetDevicePluginOptions at endpoint " + c.socket + " failed", "devices not probed yet"} {
		if !strings.Contains(st.LastError, want) {
			t.Errorf("options failing: last error %q, want it to contain %q", st.LastError, want)
		}
	}
	c.setAnswer(options(t, &dpapi.DevicePluginOptions{}))
	rd.waitState(c.socket, reconciler.StateRegistered)

	// Hostile answers: too large for the daemon, too large for the handler, malformed. Each
	// fails that plugin's registration with a reason; the daemon and the others go on.
	for _, tc := range []struct {
		socket, name string
		answer       []byte
		reason       string
	}{
		{"huge.sock", "example.com/huge", make([]byte, 2<<20), "guest: too large: response of 2097152 bytes over the limit of 1048576 (handlers.limits.pluginCallResponseSize)"},
		{"long.sock", "example.com/long", slices.Repeat([]byte{0x18, 0x01}, 4096), "answered 8192 bytes; this handler reads answers of up to 4096"},
		{"bad.sock", "example.com/bad", []byte{0x08, 0x01, 0x0b}, "answered a malformed DevicePluginOptions: malformed protobuf message: field 1: unsupported wire type 3"},
		{"text.sock", "example.com/text", []byte{0x0a, 0x03, 'y', 'e', 's'}, "answered a malformed DevicePluginOptions: malformed protobuf message: field 1: unexpected wire type 2"},
	} {
		p := startDevicePlugin(t, sock(tc.socket), tc.name, v1beta1, func() ([]byte, error) { return tc.answer, nil })
		st := rd.waitState(p.socket, reconciler.StateFailing)
		if !strings.Contains(st.LastError, "GetDevicePluginOptions at endpoint "+p.socket) || !strings.Contains(st.LastError, tc.reason) {
			t.Errorf("%s: last error %q, want one naming the call and %q", tc.name, st.LastError, tc.reason)
		}
	}
	for _, s := range []string{a.socket, c.socket} {
		if st, _ := rd.d.State().StatusOf(s); st.State != reconciler.StateRegistered {
			t.Errorf("%s is %s after the hostile plugins, want registered", s, st.State)
		}
	}
}

// wantPublished checks what the handler published about the plugin at socket.
func wantPublished(t *testing.T, rd *runningDaemon, socket string, want map[string]string) {
	t.Helper()
	p, ok := rd.d.State().Actual().Get(socket)
	if !ok {
		t.Fatalf("%s is not registered", socket)
	}
	for k, v := range want {
		if p.Published[k] != v {
			t.Errorf("%s published %s=%q, want %q (all: %v)", socket, k, p.Published[k], v, p.Published)
		}
	}
	if len(p.Published) != len(want) {
		t.Errorf("%s published %v, want %v", socket, p.Published, want)
	}
}
