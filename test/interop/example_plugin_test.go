package interop

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"unsafe"

	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/pluginwatcher"
)

// examplePlugin is the kubelet's own example plugin
// (k8s.io/kubernetes/pkg/kubelet/pluginmanager/pluginwatcher, example_plugin.go), which the
// kubelet's plugin-watcher tests register. It announces whatever it is given, listens on one
// socket that is also its endpoint, and hands every NotifyRegistrationStatus to an unbuffered
// channel: the RPC does not return until something receives from that channel, whatever the
// caller's deadline. Left undrained it is a ready-made hung plugin.
type examplePlugin struct {
	Name, Type string
	Versions   []string
	Socket     string

	plugin interface {
		Serve(ctx context.Context, services ...string) error
		Stop(ctx context.Context) error
	}
	statuses chan registerapi.RegistrationStatus // the plugin's internal channel

	mu                   sync.Mutex
	received             []notifyCall // drained statuses
	draining             bool
	stopOnce             sync.Once
	stopDrain, drainDone chan struct{}
}

// startExample serves the example plugin at <d.Sockets>/<name>.sock, announcing typ and
// versions, with its v1beta1 example service. Nothing drains its notifications until the test
// calls Drain. It is stopped when the test ends, and any notification still blocked then is
// released.
func startExample(t *testing.T, d dirs, name, typ string, versions ...string) *examplePlugin {
	t.Helper()
	sock := filepath.Join(d.Sockets, name+".sock")
	p := pluginwatcher.NewTestExamplePlugin(name, typ, sock, versions...)

	// The channel is unexported; its only readers are the kubelet's tests in the same package.
	// Reach it by reflection, and fail clearly if upstream renames it.
	f := reflect.ValueOf(p).Elem().FieldByName("registrationStatus")
	if !f.IsValid() || f.Type() != reflect.TypeFor[chan registerapi.RegistrationStatus]() {
		t.Fatalf("the example plugin has no field registrationStatus of type chan RegistrationStatus any more: update startExample")
	}
	ch := reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Interface().(chan registerapi.RegistrationStatus)

	e := &examplePlugin{
		Name: name, Type: typ, Versions: versions, Socket: sock,
		plugin:    p,
		statuses:  ch,
		stopDrain: make(chan struct{}),
		drainDone: make(chan struct{}),
	}
	ctx := klog.NewContext(t.Context(), testLogger(t, 0))
	if err := p.Serve(ctx, "v1beta1"); err != nil {
		t.Fatalf("serve example plugin at %s: %v", sock, err)
	}
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Errorf("stop example plugin %s: %v", name, err)
		}
		e.release()
	})
	return e
}

// Drain starts receiving from the plugin's channel, as the kubelet's tests do, so that its
// NotifyRegistrationStatus returns. What is received is kept for Received. Idempotent.
func (e *examplePlugin) Drain() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.draining {
		return
	}
	e.draining = true
	// The channel carries RegistrationStatus by value, a protobuf message that must not be
	// copied (go vet's copylocks); reflection receives it without a copy in Go code.
	cases := []reflect.SelectCase{
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(e.statuses)},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(e.stopDrain)},
	}
	go func() {
		defer close(e.drainDone)
		for {
			i, v, _ := reflect.Select(cases)
			if i == 1 {
				return
			}
			e.record(v)
		}
	}()
}

// record keeps a drained status, a RegistrationStatus as a reflect.Value: only its fields.
func (e *examplePlugin) record(v reflect.Value) {
	c := notifyCall{
		Registered: v.FieldByName("PluginRegistered").Bool(),
		Error:      v.FieldByName("Error").String(),
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.received = append(e.received, c)
}

// Received returns the statuses drained so far.
func (e *examplePlugin) Received() []notifyCall {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]notifyCall(nil), e.received...)
}

// waitReceived waits until n statuses were drained and returns them all.
func (e *examplePlugin) waitReceived(t *testing.T, n int) []notifyCall {
	t.Helper()
	var got []notifyCall
	waitFor(t, fmt.Sprintf("%d status(es) drained from example plugin %s", n, e.Name), func() string {
		got = e.Received()
		if len(got) >= n {
			return ""
		}
		return fmt.Sprintf("%d so far", len(got))
	})
	return got
}

// Stop stops the plugin's gRPC server (not gracefully: a graceful stop would wait for a hung
// notification forever) and removes its socket. Idempotent.
func (e *examplePlugin) Stop() error {
	var err error
	e.stopOnce.Do(func() { err = e.plugin.Stop(context.Background()) })
	return err
}

// release ends the drain goroutine, then hands every notification still blocked on the channel
// its value, so that no RPC handler goroutine of the stopped server is left behind. Called
// after Stop: no new RPC can arrive then, and a handler blocked in its send is received at once.
func (e *examplePlugin) release() {
	e.mu.Lock()
	draining := e.draining
	e.mu.Unlock()
	if draining {
		close(e.stopDrain)
		<-e.drainDone
	}
	for {
		v, ok := reflect.ValueOf(e.statuses).TryRecv()
		if !ok {
			return
		}
		e.record(v)
	}
}
