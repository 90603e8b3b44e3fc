package interop

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/plugin/v1beta1"
)

// The kubelet tests kill plugins with SIGKILL, so each plugin runs in a process of its own: this
// test binary again, with pluginRoleEnv naming what it runs and pluginSpecEnv its settings
// (JSON of pluginSpec). TestMain hands such a process to runPluginRole instead of the tests.
// The plugin process reports what it is told on stdout, one JSON pluginEvent a line.
const (
	pluginRoleEnv = "WASMHOST_INTEROP_PLUGIN"
	pluginSpecEnv = "WASMHOST_INTEROP_PLUGIN_SPEC"
)

// The roles.
const (
	// roleCSI: the CSI registrar stand-in of csi_plugin_test.go (node-driver-registrar is not
	// on the module proxy) with its CSI driver; on Notify(false) the process exits, as
	// node-driver-registrar does.
	roleCSI = "csi"
	// roleDRA: the DRA kubelet-plugin helper (k8s.io/dynamic-resource-allocation/kubeletplugin)
	// with a fake clientset.
	roleDRA = "dra"
	// roleDevice: the kubelet's own device-plugin stub
	// (pkg/kubelet/cm/devicemanager/plugin/v1beta1, NewDevicePluginStub) in its
	// plugins_registry mode: one socket serves GetInfo (type DevicePlugin, no endpoint) and the
	// device plugin API.
	roleDevice = "deviceplugin"
)

// pluginSpec is what a plugin process runs.
type pluginSpec struct {
	Role string
	Name string // the driver or resource name
	// RegDir is the directory its registration socket is made in: the kubelet's, or wasmhost's.
	RegDir string
	// DataDir holds what is not the registration socket: the CSI driver's csi.sock, the DRA
	// helper's dra.sock.
	DataDir string
	// Versions, for roleCSI, replace the ["1.0.0"] node-driver-registrar announces.
	Versions []string
	// Devices, for roleDevice, is how many devices ListAndWatch reports (default 2).
	Devices int
}

// pluginEvent is one line of a plugin process's report.
type pluginEvent struct {
	Ev         string // "ready", "getinfo" or "notify"
	Socket     string `json:",omitempty"` // ready: the registration socket
	Endpoint   string `json:",omitempty"` // ready: the endpoint GetInfo announces ("" for the stub)
	Registered bool   `json:",omitempty"`
	Error      string `json:",omitempty"`
	At         int64  // unix nanoseconds
}

func (e pluginEvent) Time() time.Time { return time.Unix(0, e.At) }

// pluginProc is a plugin running in a process of its own.
type pluginProc struct {
	Spec     pluginSpec
	Socket   string // its registration socket
	Endpoint string // what its GetInfo announces

	cmd    *exec.Cmd
	exited chan struct{}
	ready  chan struct{}

	mu     sync.Mutex
	events []pluginEvent
	stderr strings.Builder
}

// startPluginProc starts the plugin and waits until its registration socket is served. The
// process is killed when the test ends, if it still runs.
func startPluginProc(t *testing.T, spec pluginSpec) *pluginProc {
	t.Helper()
	p := launchPluginProc(t, spec)
	p.waitReady(t)
	return p
}

// launchPluginProc starts the plugin; waitReady waits until it serves. Several plugins start
// faster launched together: a process of this test binary takes seconds to initialise its
// packages under -race on a loaded machine.
func launchPluginProc(t *testing.T, spec pluginSpec) *pluginProc {
	t.Helper()
	js, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &pluginProc{Spec: spec, exited: make(chan struct{}), ready: make(chan struct{})}
	p.cmd = exec.Command(exe, "-test.run=^$")
	p.cmd.Env = append(os.Environ(), pluginRoleEnv+"="+spec.Role, pluginSpecEnv+"="+string(js))
	p.cmd.Stderr = &lockedWriter{mu: &p.mu, b: &p.stderr}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	dieWithParent(p.cmd)
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start plugin %s: %v", spec.Name, err)
	}
	go func() {
		p.read(out)
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			p.mu.Lock()
			t.Logf("plugin %s (%s) events %+v, stderr:\n%s", spec.Name, spec.Role, p.events, p.stderr.String())
			p.mu.Unlock()
		}
	})
	return p
}

func (p *pluginProc) waitReady(t *testing.T) {
	t.Helper()
	select {
	case <-p.ready:
	case <-p.exited:
		t.Fatalf("plugin %s (%s) exited before it served: %s", p.Spec.Name, p.Spec.Role, p.Stderr())
	case <-time.After(waitTimeout):
		t.Fatalf("plugin %s (%s) not ready within %v: %s", p.Spec.Name, p.Spec.Role, waitTimeout, p.Stderr())
	}
}

func (p *pluginProc) read(out interface{ Read([]byte) (int, error) }) {
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var e pluginEvent
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		p.mu.Lock()
		p.events = append(p.events, e)
		if e.Ev == "ready" {
			p.Socket, p.Endpoint = e.Socket, e.Endpoint
			close(p.ready)
		}
		p.mu.Unlock()
	}
}

// Stderr returns what the process wrote to its stderr so far.
func (p *pluginProc) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// Notifies returns the NotifyRegistrationStatus calls the plugin received so far.
func (p *pluginProc) Notifies() []pluginEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []pluginEvent
	for _, e := range p.events {
		if e.Ev == "notify" {
			out = append(out, e)
		}
	}
	return out
}

// waitNotified waits until the plugin has received n notifications and returns them.
func (p *pluginProc) waitNotified(t *testing.T, n int) []pluginEvent {
	t.Helper()
	var got []pluginEvent
	waitFor(t, fmt.Sprintf("%d notification(s) at plugin %s", n, p.Spec.Name), func() string {
		got = p.Notifies()
		if len(got) >= n {
			return ""
		}
		return fmt.Sprintf("%d so far: %+v", len(got), got)
	})
	return got
}

// Kill sends SIGKILL and waits for the process to exit; it returns when the signal was sent.
// The socket files stay, as they do for any killed process. Idempotent.
func (p *pluginProc) Kill() time.Time {
	at := time.Now()
	select {
	case <-p.exited:
		return at
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
	return at
}

// Exited is closed when the process has exited.
func (p *pluginProc) Exited() <-chan struct{} { return p.exited }

// runPluginRole is the main of a plugin process. It returns the exit code.
func runPluginRole(role string) int {
	var spec pluginSpec
	if err := json.Unmarshal([]byte(os.Getenv(pluginSpecEnv)), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", pluginSpecEnv, err)
		return 2
	}
	rep := &reporter{}
	var err error
	switch role {
	case roleCSI:
		err = runCSIRole(spec, rep)
	case roleDRA:
		err = runDRARole(spec, rep)
	case roleDevice:
		err = runDeviceRole(spec, rep)
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "plugin %s (%s): %v\n", spec.Name, role, err)
		return 1
	}
	select {} // until killed
}

// reporter writes events to stdout, one JSON line each.
type reporter struct{ mu sync.Mutex }

func (r *reporter) report(e pluginEvent) {
	if e.At == 0 {
		e.At = time.Now().UnixNano()
	}
	b, _ := json.Marshal(e)
	r.mu.Lock()
	defer r.mu.Unlock()
	_, _ = os.Stdout.Write(append(b, '\n'))
}

// intercept reports the registration calls as they arrive, before the plugin handles them.
func (r *reporter) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	switch info.FullMethod {
	case registerapi.Registration_GetInfo_FullMethodName:
		r.report(pluginEvent{Ev: "getinfo"})
	case registerapi.Registration_NotifyRegistrationStatus_FullMethodName:
		st := req.(*registerapi.RegistrationStatus)
		r.report(pluginEvent{Ev: "notify", Registered: st.PluginRegistered, Error: st.Error})
	}
	return handler(ctx, req)
}

// runCSIRole serves the CSI driver on <DataDir>/csi.sock and the registrar on
// <RegDir>/<name>-reg.sock (mode 0700), as startCSI does; on Notify(false) the process exits
// inside the call, leaving its sockets, as node-driver-registrar does.
func runCSIRole(spec pluginSpec, rep *reporter) error {
	endpoint := filepath.Join(spec.DataDir, "csi.sock")
	drvLis, err := net.Listen("unix", endpoint)
	if err != nil {
		return err
	}
	drv := grpc.NewServer()
	d := &csiDriver{name: spec.Name, nodeID: kubeletNode}
	csi.RegisterIdentityServer(drv, d)
	csi.RegisterNodeServer(drv, d)
	go func() { _ = drv.Serve(drvLis) }()

	sock := filepath.Join(spec.RegDir, spec.Name+"-reg.sock")
	_ = os.Remove(sock)
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	if err := os.Chmod(sock, 0o700); err != nil {
		return err
	}
	versions := spec.Versions
	if len(versions) == 0 {
		versions = csiVersions
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(rep.intercept))
	registerapi.RegisterRegistrationServer(srv, &csiProcRegistrar{name: spec.Name, endpoint: endpoint, versions: versions})
	go func() { _ = srv.Serve(lis) }()
	rep.report(pluginEvent{Ev: "ready", Socket: sock, Endpoint: endpoint})
	return nil
}

// csiProcRegistrar is node-driver-registrar's registration server, in a process of its own.
type csiProcRegistrar struct {
	registerapi.UnsafeRegistrationServer
	name, endpoint string
	versions       []string
}

func (r *csiProcRegistrar) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: r.name, Endpoint: r.endpoint, SupportedVersions: r.versions}, nil
}

func (r *csiProcRegistrar) NotifyRegistrationStatus(_ context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if !st.PluginRegistered {
		fmt.Fprintf(os.Stderr, "registration failed: %s; exiting\n", st.Error)
		os.Exit(1)
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// runDRARole starts the DRA helper with its registrar directory RegDir and data directory
// DataDir: sockets <RegDir>/<name>-reg.sock and <DataDir>/dra.sock.
func runDRARole(spec pluginSpec, rep *reporter) error {
	ctx := klog.NewContext(context.Background(), klog.Background())
	// The helper needs a clientset only to publish ResourceSlices, which this plugin never
	// does: one for an API server that does not exist. (fake.NewClientset parses the whole
	// API schema when it is made, seconds of a plugin's start in a race build.)
	client, err := kubernetes.NewForConfig(&rest.Config{Host: "http://127.0.0.1:1"})
	if err != nil {
		return err
	}
	_, err = kubeletplugin.Start(ctx, &nullDriver{},
		kubeletplugin.DriverName(spec.Name),
		kubeletplugin.NodeName(kubeletNode),
		kubeletplugin.KubeClient(client),
		kubeletplugin.RegistrarDirectoryPath(spec.RegDir),
		kubeletplugin.PluginDataDirectoryPath(spec.DataDir),
		kubeletplugin.GRPCInterceptor(rep.intercept))
	if err != nil {
		return err
	}
	rep.report(pluginEvent{Ev: "ready", Socket: filepath.Join(spec.RegDir, spec.Name+"-reg.sock"),
		Endpoint: filepath.Join(spec.DataDir, "dra.sock")})
	return nil
}

// deviceSocket is the socket file of a device plugin stub: resource names have a slash.
func deviceSocket(dir, resource string) string {
	return filepath.Join(dir, "dp-"+strings.NewReplacer("/", "_", ".", "_").Replace(resource)+".sock")
}

// runDeviceRole starts the kubelet's device-plugin stub on <RegDir>/dp-<resource>.sock, with
// Devices healthy devices. Its notifications go to an unexported channel (its own tests read
// it); this sets that channel by reflection and reports what arrives.
func runDeviceRole(spec pluginSpec, rep *reporter) error {
	n := spec.Devices
	if n == 0 {
		n = 2
	}
	var devs []*pluginapi.Device
	for i := range n {
		devs = append(devs, &pluginapi.Device{ID: fmt.Sprintf("dev-%d", i), Health: pluginapi.Healthy})
	}
	sock := deviceSocket(spec.RegDir, spec.Name)
	logger := klog.Background()
	stub := v1beta1.NewDevicePluginStub(logger, devs, sock, spec.Name, false, false)

	f := reflect.ValueOf(stub).Elem().FieldByName("registrationStatus")
	if !f.IsValid() || f.Type() != reflect.TypeFor[chan registerapi.RegistrationStatus]() {
		return fmt.Errorf("the device plugin stub has no field registrationStatus of type chan RegistrationStatus any more: update runDeviceRole")
	}
	ch := make(chan registerapi.RegistrationStatus)
	reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Set(reflect.ValueOf(ch))
	go func() {
		// RegistrationStatus is a protobuf message that must not be copied (go vet's
		// copylocks): received through reflection, only its fields are read.
		cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)}}
		for {
			_, v, _ := reflect.Select(cases)
			rep.report(pluginEvent{Ev: "notify", Registered: v.FieldByName("PluginRegistered").Bool(),
				Error: v.FieldByName("Error").String()})
		}
	}()
	if err := stub.Start(klog.NewContext(context.Background(), logger)); err != nil {
		return err
	}
	rep.report(pluginEvent{Ev: "ready", Socket: sock})
	return nil
}
