package interop

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/plugin/v1beta1"
	draplugin "k8s.io/kubernetes/pkg/kubelet/cm/dra/plugin"
	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"
	"k8s.io/kubernetes/pkg/volume"
	"k8s.io/kubernetes/pkg/volume/csi"
)

// The kubelet of these tests is the kubelet's own plugin manager
// (k8s.io/kubernetes/pkg/kubelet/pluginmanager), run as a library on a temp directory that
// plays its plugins_registry, with the kubelet's own registration handlers for the three
// types:
//
//   - CSIPlugin: pkg/volume/csi's RegistrationHandler (csi.PluginHandler), the CSI volume
//     plugin initialised with a volume host that has a fake clientset holding the node: its
//     Validate and Register run unchanged (version checks, the driver store, the CSI
//     NodeGetInfo call to the driver, the node's annotation and its CSINode object).
//   - DRAPlugin: pkg/kubelet/cm/dra/plugin's DRAPluginManager with a fake clientset (it keeps
//     the gRPC connection to the driver and would wipe the node's ResourceSlices when a driver
//     stays gone).
//   - DevicePlugin: pkg/kubelet/cm/devicemanager/plugin/v1beta1's server, the handler
//     ManagerImpl.GetWatcherHandler returns, unchanged; its client handler (ManagerImpl, which
//     needs the node's topology, checkpoints and pods) is transcribed: PluginConnected calls
//     GetDevicePluginOptions as ManagerImpl does, and the ListAndWatch updates are recorded.
//
// Each handler is wrapped by kubeletHandler, which records every Validate, Register and
// DeRegister call with the time it was made: the tests' observation point.

// kubeletNode is the node name the kubelet's handlers run for.
const kubeletNode = "interop-node"

// kubeletCall is one call the plugin manager made into one of its handlers.
type kubeletCall struct {
	Type     string // the plugin type the handler serves
	Op       string // "validate", "register" or "deregister"
	Name     string
	Endpoint string
	Versions []string
	Err      error // what Validate or Register returned
	At       time.Time
}

func (c kubeletCall) String() string {
	return fmt.Sprintf("%s %s(%q, %q, %q) = %v at %s", c.Type, c.Op, c.Name, c.Endpoint, c.Versions, c.Err,
		c.At.Format("15:04:05.000"))
}

// kubeletHandler records the calls into a real handler, then makes them.
type kubeletHandler struct {
	typ  string
	real cache.PluginHandler
	k    *kubelet
}

func (h *kubeletHandler) ValidatePlugin(ctx context.Context, name, endpoint string, versions []string) error {
	at := time.Now()
	err := h.real.ValidatePlugin(ctx, name, endpoint, versions)
	h.k.record(kubeletCall{Type: h.typ, Op: "validate", Name: name, Endpoint: endpoint, Versions: versions, Err: err, At: at})
	return err
}

func (h *kubeletHandler) RegisterPlugin(ctx context.Context, name, endpoint string, versions []string, timeout *time.Duration) error {
	at := time.Now()
	err := h.real.RegisterPlugin(ctx, name, endpoint, versions, timeout)
	h.k.record(kubeletCall{Type: h.typ, Op: "register", Name: name, Endpoint: endpoint, Versions: versions, Err: err, At: at})
	return err
}

func (h *kubeletHandler) DeRegisterPlugin(ctx context.Context, name, endpoint string) {
	at := time.Now()
	h.real.DeRegisterPlugin(ctx, name, endpoint)
	h.k.record(kubeletCall{Type: h.typ, Op: "deregister", Name: name, Endpoint: endpoint, At: at})
}

// kubelet is a running plugin manager with the three handlers.
type kubelet struct {
	Dir     string         // its plugins_registry
	Devices *deviceClients // what the device manager's client handler saw

	mu    sync.Mutex
	calls []kubeletCall
}

func (k *kubelet) record(c kubeletCall) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.calls = append(k.calls, c)
}

// Calls returns the handler calls so far that match.
func (k *kubelet) Calls(match func(kubeletCall) bool) []kubeletCall {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []kubeletCall
	for _, c := range k.calls {
		if match(c) {
			out = append(out, c)
		}
	}
	return out
}

// named matches the calls of one operation for one plugin name.
func named(op, name string) func(kubeletCall) bool {
	return func(c kubeletCall) bool { return c.Op == op && c.Name == name }
}

// waitCall waits until the kubelet has made n calls that match, and returns them.
func (k *kubelet) waitCall(t *testing.T, what string, n int, match func(kubeletCall) bool) []kubeletCall {
	t.Helper()
	var got []kubeletCall
	waitFor(t, what, func() string {
		got = k.Calls(match)
		if len(got) >= n {
			return ""
		}
		return fmt.Sprintf("%d of %d; all calls so far: %v", len(got), n, k.Calls(func(kubeletCall) bool { return true }))
	})
	return got
}

// startKubelet runs the plugin manager on dir (created if missing) with the three handlers,
// until the test ends.
func startKubelet(t *testing.T, dir string) *kubelet {
	t.Helper()
	quietGlobalKlog()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	k := &kubelet{Dir: dir, Devices: &deviceClients{}}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), testLogger(t, 0)))

	// The DRA handler: its background work (wiping ResourceSlices of drivers gone for longer
	// than the delay) runs against the fake clientset and stops with Stop.
	client := kubeletClient(t)
	dra := draplugin.NewDRAPluginManager(ctx, client, func(ctx context.Context) (*v1.Node, error) {
		return client.CoreV1().Nodes().Get(ctx, kubeletNode, metav1.GetOptions{})
	}, nil, time.Hour)

	// The device manager's handler is its registration server itself (ManagerImpl's
	// GetWatcherHandler returns it, and the container manager hands that to the plugin
	// manager). Its kubelet.sock is never started: plugins register through plugins_registry.
	devDir := filepath.Join(filepath.Dir(dir), "device-plugins")
	if err := os.MkdirAll(devDir, 0o755); err != nil {
		t.Fatal(err)
	}
	dpServer, err := v1beta1.NewServer(klog.FromContext(ctx), filepath.Join(devDir, pluginapi.KubeletSocket), k.Devices, k.Devices)
	if err != nil {
		t.Fatal(err)
	}
	// The CSI handler is a package variable of pkg/volume/csi, initialised once per process.
	csiHandler := initCSI(t)

	pm := pluginmanager.NewPluginManager(dir, &record.FakeRecorder{})
	pm.AddHandler(registerapi.CSIPlugin, &kubeletHandler{typ: registerapi.CSIPlugin, real: csiHandler, k: k})
	pm.AddHandler(registerapi.DRAPlugin, &kubeletHandler{typ: registerapi.DRAPlugin, real: dra, k: k})
	pm.AddHandler(registerapi.DevicePlugin, &kubeletHandler{typ: registerapi.DevicePlugin, real: dpServer, k: k})

	stop := make(chan struct{})
	done := make(chan struct{})
	ready := config.NewSourcesReady(func(sets.Set[string]) bool { return true })
	go func() {
		defer close(done)
		pm.Run(ctx, ready, stop)
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
		cancel()
		dra.Stop()
		if t.Failed() {
			t.Logf("kubelet handler calls:\n%s\nthe kubelet's global log (the last %d bytes of the process's):\n%s",
				k.callsText(), globalKlogBytes, globalKlogText())
		}
	})
	return k
}

func (k *kubelet) callsText() string {
	var b strings.Builder
	for _, c := range k.Calls(func(kubeletCall) bool { return true }) {
		b.WriteString(c.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// kubeletClients is the fake clientset of the process's kubelet handlers: one, because the
// CSI handler is initialised once per process.
var kubeletClients struct {
	once   sync.Once
	client *fake.Clientset
}

// kubeletClient returns the fake clientset holding the node.
func kubeletClient(t *testing.T) *fake.Clientset {
	kubeletClients.once.Do(func() {
		kubeletClients.client = fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: kubeletNode, UID: "interop-node-uid"}})
	})
	return kubeletClients.client
}

// csiInit initialises pkg/volume/csi once per process: its handler, driver store and node info
// manager are package variables.
var csiInit struct {
	once sync.Once
	err  error
}

// initCSI initialises the CSI volume plugin with csiHost and returns its registration handler.
func initCSI(t *testing.T) cache.PluginHandler {
	t.Helper()
	csiInit.once.Do(func() {
		plugins := csi.ProbeVolumePlugins()
		if len(plugins) != 1 {
			csiInit.err = fmt.Errorf("csi.ProbeVolumePlugins returned %d plugins, want 1", len(plugins))
			return
		}
		csiInit.err = plugins[0].Init(csiHost{client: kubeletClient(t)})
	})
	if csiInit.err != nil {
		t.Fatalf("initialise the kubelet's CSI volume plugin: %v", csiInit.err)
	}
	return csi.PluginHandler
}

// csiHost is the volume host the CSI plugin is initialised with: the node's name and the fake
// clientset. It is not a KubeletVolumeHost, so the CSI plugin skips what only a kubelet with an
// API server does at start (initialising the CSINode's migration annotation, waiting for the
// API server). Any other VolumeHost method is the nil embedded interface's: a call panics,
// naming the method, so a new dependency of the registration handler shows at once.
type csiHost struct {
	volume.VolumeHost
	client kubernetes.Interface
}

func (h csiHost) GetKubeClient() kubernetes.Interface { return h.client }
func (h csiHost) GetNodeName() types.NodeName         { return kubeletNode }

// csiNodeDrivers returns the drivers the kubelet's CSI handler installed in the CSINode
// object (its nodeinfomanager writes them there on Register and removes them on DeRegister).
func csiNodeDrivers(t *testing.T) []string {
	t.Helper()
	cn, err := kubeletClient(t).StorageV1().CSINodes().Get(t.Context(), kubeletNode, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	var names []string
	for _, d := range cn.Spec.Drivers {
		names = append(names, d.Name)
	}
	slices.Sort(names)
	return names
}

// deviceClients is the device manager's client handler as the tests transcribe it (see the
// top of this file), recording what it sees. It also serves as the registration handler's
// directory cleanup, which runs only when the kubelet.sock server starts (never here).
type deviceClients struct {
	mu           sync.Mutex
	connected    map[string]*pluginapi.DevicePluginOptions // socket → options, while connected
	devices      map[string]int                            // resource → devices in the last update
	disconnected []string                                  // sockets, in order
}

func (d *deviceClients) CleanupPluginDirectory(klog.Logger, string) error { return nil }

// PluginConnected does what ManagerImpl.PluginConnected does with the plugin: it asks for its
// options, and fails the registration if that call fails.
func (d *deviceClients) PluginConnected(ctx context.Context, resource string, p v1beta1.DevicePlugin) error {
	opts, err := p.API().GetDevicePluginOptions(ctx, &pluginapi.Empty{})
	if err != nil {
		return fmt.Errorf("failed to get device plugin options: %v", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.connected == nil {
		d.connected = make(map[string]*pluginapi.DevicePluginOptions)
	}
	if _, ok := d.connected[p.SocketPath()]; ok {
		return fmt.Errorf("device plugin already connected: %s", p.SocketPath())
	}
	d.connected[p.SocketPath()] = opts
	return nil
}

func (d *deviceClients) PluginDisconnected(_ klog.Logger, _ string, socket string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.connected, socket)
	d.disconnected = append(d.disconnected, socket)
}

func (d *deviceClients) PluginListAndWatchReceiver(_ klog.Logger, resource string, resp *pluginapi.ListAndWatchResponse) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.devices == nil {
		d.devices = make(map[string]int)
	}
	d.devices[resource] = len(resp.Devices)
}

// Connected reports whether the device manager holds a connection to the plugin at socket.
func (d *deviceClients) Connected(socket string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.connected[socket]
	return ok
}

// DeviceCount is the number of devices of resource in the last ListAndWatch update.
func (d *deviceClients) DeviceCount(resource string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.devices[resource]
}

// globalKlog holds what the kubelet's code logs through the global klog (the CSI handler does,
// not through its context) in this process, so that it does not flood the test output: the
// last globalKlogBytes of it.
var globalKlog struct {
	once sync.Once
	mu   sync.Mutex
	buf  []byte
}

const globalKlogBytes = 64 << 10

func quietGlobalKlog() {
	globalKlog.once.Do(func() {
		klog.SetLogger(funcr.New(func(prefix, args string) {
			globalKlog.mu.Lock()
			defer globalKlog.mu.Unlock()
			globalKlog.buf = append(globalKlog.buf, prefix+" "+args+"\n"...)
			if over := len(globalKlog.buf) - globalKlogBytes; over > 0 {
				globalKlog.buf = globalKlog.buf[over:]
			}
		}, funcr.Options{Verbosity: 4}))
	})
}

// globalKlogText returns what the global klog holds.
func globalKlogText() string {
	globalKlog.mu.Lock()
	defer globalKlog.mu.Unlock()
	return string(globalKlog.buf)
}
