package interop

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"google.golang.org/grpc"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// draPlugin is a running DRA driver built on the real kubelet-plugin helper
// (k8s.io/dynamic-resource-allocation/kubeletplugin), with no API server: the helper needs a
// clientset only to publish ResourceSlices, which these tests never do, so a fake one serves.
type draPlugin struct {
	Driver    string
	RegSocket string // <socket dir>/<driver>-reg.sock: what the daemon discovers
	DRASocket string // <data dir>/dra.sock: the endpoint GetInfo announces

	// With rolling updates (startDRAInstance), <driver>-<uid>-reg.sock and dra-<uid>.sock.

	helper *kubeletplugin.Helper
	calls  *registrationCalls
}

// startDRA starts the helper with its registrar directory in d.Sockets and its plugin data
// directory in d.Data. The plugin is stopped when the test ends, if the test did not stop it.
func startDRA(t *testing.T, d dirs, driver string, opts ...kubeletplugin.Option) *draPlugin {
	t.Helper()
	return startDRAInstance(t, d, driver, "", opts...)
}

// startDRAInstance is startDRA with rolling updates enabled when uid is not empty: the instance
// then has its own sockets, named by the helper after uid, beside the other instances'.
func startDRAInstance(t *testing.T, d dirs, driver string, uid types.UID, opts ...kubeletplugin.Option) *draPlugin {
	t.Helper()
	regFile, draFile := driver+"-reg.sock", "dra.sock"
	if uid != "" {
		opts = append(opts, kubeletplugin.RollingUpdate(uid))
		regFile = kubeletplugin.RollingUpdateRegistrarSocketFile(d.Sockets, driver, uid)
		draFile = "dra-" + string(uid) + ".sock"
	}
	calls := newRegistrationCalls()
	ctx := klog.NewContext(t.Context(), testLogger(t, 3))
	all := append([]kubeletplugin.Option{
		kubeletplugin.DriverName(driver),
		kubeletplugin.NodeName("interop-node"),
		kubeletplugin.KubeClient(fake.NewClientset()),
		kubeletplugin.RegistrarDirectoryPath(d.Sockets),
		kubeletplugin.PluginDataDirectoryPath(d.Data),
		// The helper keeps the last status in a field it reads without a lock (its own TODO
		// says so), so the tests observe the calls through an interceptor instead.
		kubeletplugin.GRPCInterceptor(calls.intercept),
	}, opts...)
	drv := &nullDriver{}
	h, err := kubeletplugin.Start(ctx, drv, all...)
	if err != nil {
		t.Fatalf("start DRA helper for %s: %v", driver, err)
	}
	p := &draPlugin{
		Driver:    driver,
		RegSocket: filepath.Join(d.Sockets, regFile),
		DRASocket: filepath.Join(d.Data, draFile),
		helper:    h,
		calls:     calls,
	}
	t.Cleanup(func() {
		p.Stop()
		for _, err := range drv.errors() {
			t.Errorf("DRA helper %s reported a background error: %v", driver, err)
		}
	})
	return p
}

// Stop stops the helper: both gRPC servers stop and their sockets are removed. Idempotent.
func (p *draPlugin) Stop() { p.helper.Stop() }

// registrationCalls records the registration RPCs a plugin served, as the plugin saw them.
type registrationCalls struct {
	mu      sync.Mutex
	getInfo int
	notify  []notifyCall
}

// notifyCall is one NotifyRegistrationStatus the plugin served, and what it answered.
type notifyCall struct {
	Registered bool
	Error      string // the status's error message
	Err        error  // what the plugin's handler returned
}

func newRegistrationCalls() *registrationCalls { return &registrationCalls{} }

func (c *registrationCalls) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	switch info.FullMethod {
	case registerapi.Registration_GetInfo_FullMethodName:
		c.mu.Lock()
		c.getInfo++
		c.mu.Unlock()
	case registerapi.Registration_NotifyRegistrationStatus_FullMethodName:
		st := req.(*registerapi.RegistrationStatus)
		c.mu.Lock()
		c.notify = append(c.notify, notifyCall{Registered: st.PluginRegistered, Error: st.Error, Err: err})
		c.mu.Unlock()
	}
	return resp, err
}

// Notifies returns a copy of the NotifyRegistrationStatus calls served so far.
func (c *registrationCalls) Notifies() []notifyCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]notifyCall(nil), c.notify...)
}

// GetInfos returns the number of GetInfo calls served so far.
func (c *registrationCalls) GetInfos() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.getInfo
}

// waitNotified waits until the plugin has served n NotifyRegistrationStatus calls and returns
// them all.
func (c *registrationCalls) waitNotified(t *testing.T, n int) []notifyCall {
	t.Helper()
	var got []notifyCall
	waitFor(t, fmt.Sprintf("%d NotifyRegistrationStatus call(s) at the plugin", n), func() string {
		got = c.Notifies()
		if len(got) >= n {
			return ""
		}
		return fmt.Sprintf("%d so far: %+v", len(got), got)
	})
	return got
}

// waitRegistered waits until the last NotifyRegistrationStatus the plugin served said
// registered, and returns all the calls so far.
func (c *registrationCalls) waitRegistered(t *testing.T) []notifyCall {
	t.Helper()
	var got []notifyCall
	waitFor(t, "the plugin to be notified registered=true", func() string {
		got = c.Notifies()
		if n := len(got); n > 0 && got[n-1].Registered && got[n-1].Err == nil {
			return ""
		}
		return fmt.Sprintf("notifications so far: %+v", got)
	})
	return got
}

// nullDriver is a DRA driver with no devices: enough for the helper to serve registration.
type nullDriver struct {
	mu   sync.Mutex
	errs []error
}

func (*nullDriver) PrepareResourceClaims(context.Context, []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	return map[types.UID]kubeletplugin.PrepareResult{}, nil
}

func (*nullDriver) UnprepareResourceClaims(context.Context, []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	return map[types.UID]error{}, nil
}

// HandleError is called for errors in the helper's background work (a gRPC server that
// failed). None is expected; startDRA's cleanup fails the test if any arrived.
func (d *nullDriver) HandleError(_ context.Context, err error, msg string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.errs = append(d.errs, fmt.Errorf("%s: %w", msg, err))
}

func (d *nullDriver) errors() []error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]error(nil), d.errs...)
}

func (*nullDriver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}
