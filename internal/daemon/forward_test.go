package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/logtest"
	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/registration/forward/forwardtest"
	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
	"github.com/wasmhost/wasmhost/internal/state"
)

// forwardConfig is a test daemon's config with CSIPlugin forwarded to a kubelet directory
// of its own, which it returns.
func forwardConfig(t testing.TB) (config.Config, string) {
	t.Helper()
	cfg, base := testDaemonConfig(t)
	kdir := filepath.Join(base, "k")
	if err := os.Mkdir(kdir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg.Forward = config.ForwardConfig{KubeletDir: kdir, Types: []string{"CSIPlugin"}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg, kdir
}

// startWithHandlers runs a daemon of cfg with native handlers until the test ends; stop ends
// it sooner (and is idempotent).
func startWithHandlers(t testing.TB, cfg config.Config, hs map[string]registration.Handler) (d *Daemon, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs := &logtest.Logs{}
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range logs.Matching(slog.LevelDebug, "") {
				t.Log(l)
			}
		}
	})
	d, err := New(ctx, cfg, logs.Logger(), "test")
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	for typ, h := range hs {
		d.SetHandler(typ, h)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var runErr error
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			runErr = <-done
		}
	}
	t.Cleanup(func() {
		stop()
		if runErr != nil {
			t.Errorf("Run: %v", runErr)
		}
	})
	return d, stop
}

// TestForwardThroughTheDaemon: with forward.kubeletDir and forward.types set, a plugin of a
// forwarded type that its handler admits reaches the kubelet and is registered once the
// kubelet accepted it, both verdicts shown; one its handler refuses never reaches it; one of
// another type is not forwarded; and the kubelet deregisters a plugin whose server is killed
// (its socket file left), one whose socket is removed, and one whose type loses its handler.
func TestForwardThroughTheDaemon(t *testing.T) {
	cfg, kdir := forwardConfig(t)
	kubelet := forwardtest.Start(t, kdir)
	csi := registrationtest.NewRecordingHandler()
	csi.SetHook(func(_ context.Context, c registrationtest.Call) error {
		if c.Info.Name == "refused.example.com" && c.Method == registrationtest.MethodValidate {
			return fmt.Errorf("%w: not on this node", registration.ErrRejected)
		}
		return nil
	})
	d, _ := startWithHandlers(t, cfg, map[string]registration.Handler{
		"CSIPlugin":        csi,
		"example.wasmhost": registrationtest.NewRecordingHandler(),
	})
	serve := func(name, typ string) *registrationtest.Plugin {
		return registrationtest.Serve(t, filepath.Join(cfg.SocketDir, name+".sock"),
			registrationtest.Info{Type: typ, Name: name, Versions: []string{"1.0.0"}}, registrationtest.Options{})
	}

	a := serve("a.example.com", "CSIPlugin")
	if n := a.WaitNotification(t, time.Minute); !n.Registered {
		t.Fatalf("a: told %+v", n)
	}
	reg, _ := kubelet.Wait(t, 0, forwardtest.Registered, "a.example.com", time.Minute)
	if reg.Info.Endpoint != a.Path() {
		t.Errorf("the kubelet was given endpoint %q, want the plugin's socket %s", reg.Info.Endpoint, a.Path())
	}
	waitUntil(t, "a shown registered with both", func() bool {
		v := plugin(d, a.Path())
		return v.State == state.StateRegistered && v.Kubelet.State == state.KubeletRegistered && v.Kubelet.Socket == reg.Socket
	})

	refused := serve("refused.example.com", "CSIPlugin")
	if n := refused.WaitNotification(t, time.Minute); n.Registered {
		t.Fatalf("refused: told %+v", n)
	}
	other := serve("other", "example.wasmhost")
	if n := other.WaitNotification(t, time.Minute); !n.Registered {
		t.Fatalf("other: told %+v", n)
	}
	if v := plugin(d, other.Path()); v.Kubelet != (state.Kubelet{}) {
		t.Errorf("a plugin of a type not forwarded shows %+v", v.Kubelet)
	}
	for _, e := range kubelet.Events() {
		if e.Info != nil && e.Info.Name != "a.example.com" { // b and c come later
			t.Errorf("the kubelet saw %s %s", e.Kind, e.Info.Name)
		}
	}

	a.Kill() // its socket file stays: liveness finds its server gone
	kubelet.Wait(t, 0, forwardtest.Deregistered, "a.example.com", time.Minute)

	c := serve("c.example.com", "CSIPlugin")
	if n := c.WaitNotification(t, time.Minute); !n.Registered {
		t.Fatalf("c: told %+v", n)
	}
	c.Close() // its socket file goes
	kubelet.Wait(t, 0, forwardtest.Deregistered, "c.example.com", time.Minute)

	b := serve("b.example.com", "CSIPlugin")
	if n := b.WaitNotification(t, time.Minute); !n.Registered {
		t.Fatalf("b: told %+v", n)
	}
	d.registry.Remove("CSIPlugin")
	kubelet.Wait(t, 0, forwardtest.Deregistered, "b.example.com", time.Minute)
	waitUntil(t, "b waiting for a handler, not at the kubelet", func() bool {
		v := plugin(d, b.Path())
		return v.State == state.StateWaitingForHandler && v.Kubelet == (state.Kubelet{})
	})
	if ents, _ := os.ReadDir(kdir); len(ents) != 0 {
		t.Errorf("the kubelet's directory still holds %v", ents)
	}
}

// TestForwardRestart: a restart of the daemon costs a forwarded plugin one deregistration and
// one registration in the kubelet, not more; the socket the earlier run left is removed and a
// socket wasmhost did not make stays.
func TestForwardRestart(t *testing.T) {
	cfg, kdir := forwardConfig(t)
	kubelet := forwardtest.Start(t, kdir)
	hs := map[string]registration.Handler{"CSIPlugin": registrationtest.NewRecordingHandler()}
	d1, stop := startWithHandlers(t, cfg, hs)
	p := registrationtest.Serve(t, filepath.Join(cfg.SocketDir, "a.sock"),
		registrationtest.Info{Type: "CSIPlugin", Name: "a.example.com", Versions: []string{"1.0.0"}}, registrationtest.Options{})
	first, _ := kubelet.Wait(t, 0, forwardtest.Registered, "a.example.com", time.Minute)
	// The plugin may be told before the daemon has its answer: wait for the state.
	waitUntil(t, "registered with both", func() bool {
		v := plugin(d1, p.Path())
		return v.State == state.StateRegistered && v.Kubelet.State == state.KubeletRegistered
	})
	l, err := net.Listen("unix", filepath.Join(kdir, "other-reg.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	stop()
	if _, err := os.Lstat(first.Socket); err != nil {
		t.Fatalf("the daemon's stop took the plugin from the kubelet: %v", err)
	}
	if n := kubelet.Count(forwardtest.Deregistered, "a.example.com"); n != 0 {
		t.Fatalf("the kubelet deregistered the plugin %d times while the daemon was down", n)
	}

	d, _ := startWithHandlers(t, cfg, hs)
	_, i := kubelet.Wait(t, 0, forwardtest.Deregistered, "a.example.com", time.Minute)
	kubelet.Wait(t, i, forwardtest.Registered, "a.example.com", time.Minute)
	waitUntil(t, "registered with both again", func() bool {
		v := plugin(d, p.Path())
		return v.State == state.StateRegistered && v.Kubelet.State == state.KubeletRegistered
	})
	if dr, r := kubelet.Count(forwardtest.Deregistered, "a.example.com"), kubelet.Count(forwardtest.Registered, "a.example.com"); dr != 1 || r != 2 {
		t.Errorf("the kubelet deregistered the plugin %d times and registered it %d times; want 1 and 2 (one of each for the restart)", dr, r)
	}
	if _, err := os.Lstat(filepath.Join(kdir, "other-reg.sock")); errors.Is(err, os.ErrNotExist) {
		t.Error("the daemon removed a socket it did not make")
	}
}
