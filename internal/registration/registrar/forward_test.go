package registrar_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/registration/forward"
	"github.com/wasmhost/wasmhost/internal/registration/forward/forwardtest"
	"github.com/wasmhost/wasmhost/internal/registration/registrar"
	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
	"github.com/wasmhost/wasmhost/internal/state"
	"github.com/wasmhost/wasmhost/internal/typeslots"
)

// fwdEnv is a registrar env whose plugin type is forwarded to a fake kubelet.
type fwdEnv struct {
	*env
	store      *state.Store
	kubeletDir string
	kubelet    *forwardtest.Kubelet
	fwd        *forward.Forwarder
}

func newFwdEnv(t *testing.T, timeout time.Duration, mod func(*registrar.Config)) *fwdEnv {
	t.Helper()
	root, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	f := &fwdEnv{store: state.New(), kubeletDir: filepath.Join(root, "k")}
	if err := os.Mkdir(f.kubeletDir, 0o755); err != nil {
		t.Fatal(err)
	}
	f.kubelet = forwardtest.Start(t, f.kubeletDir)
	f.fwd, err = forward.New(forward.Config{Dir: f.kubeletDir, Types: []string{testType}, RecordDir: filepath.Join(root, "r"),
		VerdictTimeout: timeout, Status: f.store})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.fwd.Close)
	f.env = newEnv(t, func(c *registrar.Config) {
		c.Actual = f.store.Actual()
		c.Forward = f.fwd
		if mod != nil {
			mod(c)
		}
	})
	f.actual = f.store.Actual()
	return f
}

// kubeletFiles returns the names in the kubelet's directory.
func (f *fwdEnv) kubeletFiles(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir(f.kubeletDir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestForwardAccepted: the plugin is told it is registered once its handler and then the
// kubelet accepted it, and both verdicts are recorded; the kubelet got the plugin's own answer.
func TestForwardAccepted(t *testing.T) {
	f := newFwdEnv(t, 0, nil)
	p := f.serve("demo", demoInfo("demo-1"), registrationtest.Options{})
	if err := f.register(p.Path()); err != nil {
		t.Fatalf("Register: %v", err)
	}
	reg, _ := f.kubelet.Wait(t, 0, forwardtest.Registered, "demo-1", wait)
	if n := p.WaitNotification(t, wait); !n.Registered {
		t.Fatalf("plugin told %+v, want registered", n)
	}
	if got := reg.Info; got.Type != testType || got.Endpoint != "/run/demo-1/api.sock" || strings.Join(got.SupportedVersions, ",") != "v1,v2" {
		t.Errorf("the kubelet got %+v, want the plugin's own answer", got)
	}
	if _, ok := f.actual.Get(p.Path()); !ok {
		t.Error("not in the actual state")
	}
	if k, _ := f.store.KubeletOf(p.Path()); k.State != state.KubeletRegistered || k.Socket != reg.Socket {
		t.Errorf("kubelet standing %+v, want registered at %s", k, reg.Socket)
	}
	if n := len(p.Notifications()); n != 1 {
		t.Errorf("%d notifications, want 1", n)
	}
}

// TestForwardKubeletRefuses: the plugin is told the kubelet's own text, the handler
// deregisters it, the socket goes, and the error is the kubelet's.
func TestForwardKubeletRefuses(t *testing.T) {
	f := newFwdEnv(t, 0, nil)
	f.kubelet.SetVerdict(forwardtest.Refuse, "RegisterPlugin error -- plugin demo-1 already registered")
	p := f.serve("demo", demoInfo("demo-1"), registrationtest.Options{})
	err := f.register(p.Path())
	if !errors.Is(err, registration.ErrKubeletRefused) || !strings.Contains(err.Error(), "already registered") {
		t.Fatalf("Register: %v, want the kubelet's refusal", err)
	}
	if n := p.WaitNotification(t, wait); n.Registered || n.Error != "kubelet: RegisterPlugin error -- plugin demo-1 already registered" {
		t.Errorf("plugin told %+v, want false with the kubelet's own text", n)
	}
	if calls := f.handler.CallsTo(registrationtest.MethodDeRegister); len(calls) != 1 {
		t.Errorf("%d DeRegisterPlugin calls, want 1 (rolled back)", len(calls))
	}
	if _, ok := f.actual.Get(p.Path()); ok {
		t.Error("still in the actual state")
	}
	if files := f.kubeletFiles(t); len(files) != 0 {
		t.Errorf("the kubelet's directory holds %v, want nothing", files)
	}
	if k, _ := f.store.KubeletOf(p.Path()); k.State != state.KubeletRefused || !strings.Contains(k.Error, "already registered") {
		t.Errorf("kubelet standing %+v, want refused with its text", k)
	}
}

// TestForwardKubeletSilent: a kubelet that never answers is a timeout: the plugin is told, with
// the timeout and the directory named, and the registration rolled back.
func TestForwardKubeletSilent(t *testing.T) {
	f := newFwdEnv(t, 100*time.Millisecond, nil)
	f.kubelet.SetVerdict(forwardtest.Silent, "")
	p := f.serve("demo", demoInfo("demo-1"), registrationtest.Options{})
	err := f.register(p.Path())
	if !errors.Is(err, registration.ErrKubeletTimeout) {
		t.Fatalf("Register: %v, want a timeout", err)
	}
	n := p.WaitNotification(t, wait)
	if n.Registered || !strings.HasPrefix(n.Error, "kubelet: ") || !strings.Contains(n.Error, "100ms") || !strings.Contains(n.Error, f.kubeletDir) {
		t.Errorf("plugin told %+v, want false naming the timeout and %s", n, f.kubeletDir)
	}
	if _, ok := f.actual.Get(p.Path()); ok {
		t.Error("still in the actual state")
	}
	if k, _ := f.store.KubeletOf(p.Path()); k.State != state.KubeletTimeout {
		t.Errorf("kubelet standing %+v, want timeout", k)
	}
	if files := f.kubeletFiles(t); len(files) != 0 {
		t.Errorf("the kubelet's directory holds %v, want nothing", files)
	}
}

// TestForwardHandlerRefuses: a plugin its handler refuses never reaches the kubelet.
func TestForwardHandlerRefuses(t *testing.T) {
	f := newFwdEnv(t, 0, nil)
	f.handler.SetError(registrationtest.MethodValidate, errors.Join(registration.ErrRejected, errors.New("not on this node")))
	p := f.serve("demo", demoInfo("demo-1"), registrationtest.Options{})
	if err := f.register(p.Path()); !errors.Is(err, registration.ErrRejected) {
		t.Fatalf("Register: %v, want rejected", err)
	}
	if files := f.kubeletFiles(t); len(files) != 0 {
		t.Errorf("the kubelet's directory holds %v, want nothing", files)
	}
	if ev := f.kubelet.Events(); len(ev) != 0 {
		t.Errorf("the kubelet saw %v", ev)
	}
	if k, ok := f.store.KubeletOf(p.Path()); ok {
		t.Errorf("kubelet standing %+v, want none", k)
	}
}

// TestForwardEmptyEndpoint: a plugin that gave no endpoint is dialled by the kubelet at its
// own registration socket, never at the socket wasmhost made.
func TestForwardEmptyEndpoint(t *testing.T) {
	f := newFwdEnv(t, 0, nil)
	info := demoInfo("demo-1")
	info.Endpoint = ""
	p := f.serve("demo", info, registrationtest.Options{})
	if err := f.register(p.Path()); err != nil {
		t.Fatal(err)
	}
	reg, _ := f.kubelet.Wait(t, 0, forwardtest.Registered, "demo-1", wait)
	if reg.Info.Endpoint != p.Path() {
		t.Errorf("the kubelet was given endpoint %q, want the plugin's registration socket %q", reg.Info.Endpoint, p.Path())
	}
}

// TestForwardDeregister: deregistering the plugin takes its socket away, and the kubelet
// deregisters it.
func TestForwardDeregister(t *testing.T) {
	f := newFwdEnv(t, 0, nil)
	p := f.serve("demo", demoInfo("demo-1"), registrationtest.Options{})
	if err := f.register(p.Path()); err != nil {
		t.Fatal(err)
	}
	reg, _ := f.kubelet.Wait(t, 0, forwardtest.Registered, "demo-1", wait)
	got, _ := f.actual.Get(p.Path())
	if err := f.reg.Deregister(context.Background(), got); err != nil {
		t.Fatal(err)
	}
	f.kubelet.Wait(t, 0, forwardtest.Deregistered, "demo-1", wait)
	if _, err := os.Lstat(reg.Socket); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the forward socket is still there: %v", err)
	}
	if k, ok := f.store.KubeletOf(p.Path()); ok {
		t.Errorf("kubelet standing %+v after deregistration, want none", k)
	}
}

// TestForwardWaitHoldsNoTypeSlot: with one slot for the type, a plugin waiting for the
// kubelet's verdict does not keep a second plugin of its type from its handler.
func TestForwardWaitHoldsNoTypeSlot(t *testing.T) {
	slots := typeslots.New(1, 0)
	f := newFwdEnv(t, time.Hour, func(c *registrar.Config) { c.TypeSlots = slots })
	f.kubelet.SetVerdict(forwardtest.Silent, "")
	a := f.serve("a", demoInfo("demo-a"), registrationtest.Options{})
	b := f.serve("b", demoInfo("demo-b"), registrationtest.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 2)
	regAt := func(path string) {
		errs <- f.reg.Register(ctx, state.Socket{Path: path, Seen: time.Now(), ID: state.Identity{Ino: 42}})
	}
	go regAt(a.Path())
	f.kubelet.Wait(t, 0, forwardtest.Asked, "demo-a", wait)
	go regAt(b.Path())
	f.kubelet.Wait(t, 0, forwardtest.Asked, "demo-b", wait)
	cancel()
	for range 2 {
		if err := <-errs; errors.Is(err, typeslots.ErrBusy) || err == nil {
			t.Errorf("Register: %v, want cut short by the context", err)
		}
	}
}
