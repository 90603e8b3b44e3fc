package interop

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// csiPlugin is a CSI driver as a kubelet (or wasmhost) meets it: a registration socket served by
// a registrar sidecar, and the driver's own CSI endpoint.
//
// The registration side reproduces the CSI node-driver-registrar: it is not available through
// the module proxy, so its behaviour as REFERENCE.md records it is written here (socket
// <driver>-reg.sock, mode 0700; GetInfo CSIPlugin / driver name / endpoint / ["1.0.0"]; on
// Notify(false) it exits inside the RPC, so the caller sees Unavailable and the socket file
// stays behind until it is restarted). The CSI side is served with the CSI spec's own
// generated API (github.com/container-storage-interface/spec): Identity and NodeGetInfo.
type csiPlugin struct {
	Driver    string
	NodeID    string
	RegSocket string // <socket dir>/<driver>-reg.sock
	Endpoint  string // <data dir>/csi.sock, announced by GetInfo

	calls *registrationCalls
	csi   *csiDriver

	mu      sync.Mutex
	reg     *grpc.Server
	regDone chan struct{} // closed when the registrar's Serve has returned
	exited  chan struct{} // closed when the registrar exited on Notify(false)
	drv     *grpc.Server
	drvDone chan struct{}
}

// csiVersions is what node-driver-registrar announces.
var csiVersions = []string{"1.0.0"}

// startCSI starts the CSI driver, then its registrar. Both are stopped when the test ends.
func startCSI(t *testing.T, d dirs, driver string) *csiPlugin {
	t.Helper()
	p := &csiPlugin{
		Driver:    driver,
		NodeID:    "interop-node",
		RegSocket: filepath.Join(d.Sockets, driver+"-reg.sock"),
		Endpoint:  filepath.Join(d.Data, "csi.sock"),
		calls:     newRegistrationCalls(),
		csi:       &csiDriver{name: driver, nodeID: "interop-node"},
	}
	lis, err := net.Listen("unix", p.Endpoint)
	if err != nil {
		t.Fatalf("CSI driver %s: %v", driver, err)
	}
	p.drv = grpc.NewServer()
	csi.RegisterIdentityServer(p.drv, p.csi)
	csi.RegisterNodeServer(p.drv, p.csi)
	p.drvDone = make(chan struct{})
	go func() {
		defer close(p.drvDone)
		_ = p.drv.Serve(lis)
	}()
	t.Cleanup(func() {
		p.StopRegistrar()
		p.drv.Stop()
		<-p.drvDone
	})
	if err := p.StartRegistrar(); err != nil {
		t.Fatal(err)
	}
	return p
}

// StartRegistrar (re)starts the registrar: like node-driver-registrar at start, it unlinks a
// socket left at its path, listens (mode 0700), and serves. The previous registrar must have
// stopped or exited.
func (p *csiPlugin) StartRegistrar() error {
	if err := os.Remove(p.RegSocket); err != nil && !os.IsNotExist(err) {
		return err
	}
	lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: p.RegSocket, Net: "unix"})
	if err != nil {
		return err
	}
	// An exiting process does not unlink its socket: neither does this one when it closes.
	lis.SetUnlinkOnClose(false)
	if err := os.Chmod(p.RegSocket, 0o700); err != nil {
		_ = lis.Close()
		return err
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(p.calls.intercept))
	exited := make(chan struct{})
	registerapi.RegisterRegistrationServer(srv, &csiRegistrar{p: p, srv: srv, exited: exited})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	p.mu.Lock()
	p.reg, p.regDone, p.exited = srv, done, exited
	p.mu.Unlock()
	return nil
}

// StopRegistrar stops the registrar as a clean shutdown does: it unlinks its socket.
// Idempotent; also after the registrar exited.
func (p *csiPlugin) StopRegistrar() {
	p.mu.Lock()
	srv, done := p.reg, p.regDone
	p.mu.Unlock()
	if srv == nil {
		return
	}
	srv.Stop()
	<-done
	_ = os.Remove(p.RegSocket)
}

// Exited returns a channel closed when the current registrar has exited on Notify(false).
func (p *csiPlugin) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited
}

// csiRegistrar is the registration server of one registrar run.
type csiRegistrar struct {
	registerapi.UnsafeRegistrationServer
	p      *csiPlugin
	srv    *grpc.Server
	once   sync.Once
	exited chan struct{}
}

func (r *csiRegistrar) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              r.p.Driver,
		Endpoint:          r.p.Endpoint,
		SupportedVersions: csiVersions,
	}, nil
}

// NotifyRegistrationStatus on false "exits the process" inside the call: every connection is
// dropped before an answer is sent, and the socket file stays.
func (r *csiRegistrar) NotifyRegistrationStatus(_ context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if !st.PluginRegistered {
		r.once.Do(func() {
			r.srv.Stop() // does not wait for this handler to return
			close(r.exited)
		})
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// csiDriver serves the CSI calls the registering side may make: Identity, and Node's
// NodeGetInfo and NodeGetCapabilities.
type csiDriver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedNodeServer
	name, nodeID string

	mu           sync.Mutex
	nodeGetInfo  int
	traceparents []string
}

func (c *csiDriver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: c.name, VendorVersion: "0.0.1"}, nil
}

func (c *csiDriver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{}, nil
}

func (c *csiDriver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}

func (c *csiDriver) NodeGetInfo(ctx context.Context, _ *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	c.mu.Lock()
	c.nodeGetInfo++
	// The W3C trace context a driver that traces would continue (trace_test.go).
	c.traceparents = append(c.traceparents, metadata.ValueFromIncomingContext(ctx, "traceparent")...)
	c.mu.Unlock()
	return &csi.NodeGetInfoResponse{
		NodeId:             c.nodeID,
		MaxVolumesPerNode:  16,
		AccessibleTopology: &csi.Topology{Segments: map[string]string{"zone": "z1", "region": "r1"}},
	}, nil
}

func (c *csiDriver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{}, nil
}

// NodeGetInfos returns how many NodeGetInfo calls the driver served.
// TraceParents returns the traceparent of each NodeGetInfo call that carried one.
func (c *csiDriver) TraceParents() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.traceparents)
}

func (c *csiDriver) NodeGetInfos() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodeGetInfo
}
