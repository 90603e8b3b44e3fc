package daemon

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/registration/forward/forwardtest"
	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
	"github.com/wasmhost/wasmhost/internal/state"
	"github.com/wasmhost/wasmhost/internal/testwait"
)

// envPluginSocket makes the test binary a plugin (TestHelperPlugin) serving at that socket
// until it is killed: a process of its own, for SIGKILL.
const envPluginSocket = "WASMHOST_TEST_PLUGIN_SOCKET"

// TestHelperPlugin is not a test: it is the plugin process of BenchmarkForwardKillToDeregister.
func TestHelperPlugin(t *testing.T) {
	sock := os.Getenv(envPluginSocket)
	if sock == "" {
		t.Skip("a helper process, run by BenchmarkForwardKillToDeregister")
	}
	p, err := registrationtest.Start(sock, registrationtest.Info{Type: "CSIPlugin", Name: filepath.Base(sock), Versions: []string{"1.0.0"}}, registrationtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	select {} // until SIGKILL
}

// BenchmarkForwardKillToDeregister: forwarded plugins, processes of their own registered
// through the daemon and accepted by a fake kubelet, are killed with SIGKILL (their socket
// files stay); measured: the time from a kill to the fake kubelet's DeRegister, which it does
// the moment the daemon's socket for the plugin goes (a real kubelet adds its once-a-second
// reconciler: 0–1 s). Reported: the median and the slowest. "settled": killed 11 s after they
// registered; "young": at once, when liveness takes the first closed connection of a plugin
// registered less than 10 s ago for a server dropping an idle connection, dials again, and
// waits 100 ms before its next dial if that one lands in the dying process's backlog.
func BenchmarkForwardKillToDeregister(b *testing.B) {
	for _, settle := range []time.Duration{0, 11 * time.Second} {
		name := "young"
		if settle > 0 {
			name = "settled"
		}
		b.Run(name, func(b *testing.B) { benchKillToDeregister(b, settle) })
	}
}

func benchKillToDeregister(b *testing.B, settle time.Duration) {
	cfg, kdir := forwardConfig(b)
	kubelet := forwardtest.Start(b, kdir)
	d, _ := startWithHandlers(b, cfg, map[string]registration.Handler{"CSIPlugin": registrationtest.NewRecordingHandler()})
	var took []time.Duration
	i := 0
	for b.Loop() {
		b.StopTimer()
		name := fmt.Sprintf("p%d.example.com", i)
		i++
		sock := filepath.Join(cfg.SocketDir, name)
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperPlugin$")
		cmd.Env = append(os.Environ(), envPluginSocket+"="+sock)
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		kubelet.Wait(b, 0, forwardtest.Registered, name, time.Minute)
		testwait.Until(b, "registered with both", func() bool {
			v := plugin(d, sock)
			return v.State == state.StateRegistered && v.Kubelet.State == state.KubeletRegistered
		})
		time.Sleep(settle)
		from := len(kubelet.Events())
		b.StartTimer()
		start := time.Now()
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			b.Fatal(err)
		}
		ev, _ := kubelet.Wait(b, from, forwardtest.Deregistered, name, time.Minute)
		took = append(took, ev.At.Sub(start))
		b.StopTimer()
		_ = cmd.Wait()
		os.Remove(sock)
		b.StartTimer()
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "ms-p50")
	b.ReportMetric(float64(took[len(took)-1].Microseconds())/1000, "ms-max")
}

// BenchmarkForwardRegistration: from a plugin's socket created to the plugin told it is
// registered, through the daemon with a native handler: "off", not forwarded; "on", forwarded
// to a fake kubelet that answers the moment the daemon's socket appears. The difference is
// what forwarding adds besides the real kubelet's once-a-second look at its directory.
func BenchmarkForwardRegistration(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "off"
		if on {
			name = "on"
		}
		b.Run(name, func(b *testing.B) {
			cfg, kdir := forwardConfig(b)
			if !on {
				cfg.Forward.Types = []string{"NotThisOne"}
			}
			kubelet := forwardtest.Start(b, kdir)
			startWithHandlers(b, cfg, map[string]registration.Handler{"CSIPlugin": registrationtest.NewRecordingHandler()})
			i := 0
			defer func() {
				if n := len(kubelet.Events()); on != (n > 0) {
					b.Errorf("forwarding %v: the kubelet saw %d events", on, n)
				}
			}()
			for b.Loop() {
				sock := filepath.Join(cfg.SocketDir, fmt.Sprintf("p%d.sock", i))
				i++
				p, err := registrationtest.Start(sock, registrationtest.Info{Type: "CSIPlugin", Name: filepath.Base(sock), Versions: []string{"1.0.0"}}, registrationtest.Options{})
				if err != nil {
					b.Fatal(err)
				}
				if n := p.WaitNotification(b, time.Minute); !n.Registered {
					b.Fatalf("told %+v", n)
				}
				b.StopTimer()
				p.Close()
				b.StartTimer()
			}
		})
	}
}

// BenchmarkForwardRestart: the daemon stopped and started again with a forwarded plugin
// registered; measured from the start (daemon.New) to the fake kubelet registering the plugin
// again ("ms-to-registered"), and how long the kubelet had it deregistered
// ("ms-deregistered"): the restart costs one DeRegister and one registration.
func BenchmarkForwardRestart(b *testing.B) {
	cfg, kdir := forwardConfig(b)
	kubelet := forwardtest.Start(b, kdir)
	hs := map[string]registration.Handler{"CSIPlugin": registrationtest.NewRecordingHandler()}
	p := registrationtest.Serve(b, filepath.Join(cfg.SocketDir, "a.sock"), registrationtest.Info{Type: "CSIPlugin", Name: "a.example.com", Versions: []string{"1.0.0"}}, registrationtest.Options{})
	d, stop := startWithHandlers(b, cfg, hs)
	var toReg, gap []time.Duration
	for b.Loop() {
		testwait.Until(b, "registered with both", func() bool {
			v := plugin(d, p.Path())
			return v.State == state.StateRegistered && v.Kubelet.State == state.KubeletRegistered
		})
		stop()
		from := len(kubelet.Events())
		start := time.Now()
		d, stop = startWithHandlers(b, cfg, hs)
		dereg, i := kubelet.Wait(b, from, forwardtest.Deregistered, "a.example.com", time.Minute)
		reg, _ := kubelet.Wait(b, i, forwardtest.Registered, "a.example.com", time.Minute)
		toReg = append(toReg, reg.At.Sub(start))
		gap = append(gap, reg.At.Sub(dereg.At))
	}
	slices.Sort(toReg)
	slices.Sort(gap)
	b.ReportMetric(float64(toReg[len(toReg)/2].Microseconds())/1000, "ms-to-registered")
	b.ReportMetric(float64(gap[len(gap)/2].Microseconds())/1000, "ms-deregistered")
}

// BenchmarkForwardBurst: 256 forwarded plugins appear at once, after one registered first, with
// reconciler.maxConcurrent 16, before a fake kubelet that handles what it found once a second,
// as the real one does;
// measured: until every plugin is told it is registered. A registration waiting for the
// kubelet stops counting against maxConcurrent at once (typeslots.Waiting), so the burst
// waits for the kubelet's look side by side.
func BenchmarkForwardBurst(b *testing.B) {
	const n = 256
	for b.Loop() {
		b.StopTimer()
		cfg, kdir := forwardConfig(b)
		cfg.Reconciler.MaxConcurrent = 16
		forwardtest.StartPolling(b, kdir, time.Second)
		startWithHandlers(b, cfg, map[string]registration.Handler{"CSIPlugin": registrationtest.NewRecordingHandler()})
		// One plugin first: the reconciler learns how long a registration takes (the kubelet's
		// look), which is when an operation that does not say it waits is taken for stalled.
		warm := registrationtest.Serve(b, filepath.Join(cfg.SocketDir, "warm.sock"),
			registrationtest.Info{Type: "CSIPlugin", Name: "warm", Versions: []string{"1.0.0"}}, registrationtest.Options{})
		if m := warm.WaitNotification(b, time.Minute); !m.Registered {
			b.Fatalf("told %+v", m)
		}
		b.StartTimer()
		var ps []*registrationtest.Plugin
		for i := range n {
			p, err := registrationtest.Start(filepath.Join(cfg.SocketDir, fmt.Sprintf("p%03d.sock", i)),
				registrationtest.Info{Type: "CSIPlugin", Name: fmt.Sprintf("p%03d", i), Versions: []string{"1.0.0"}}, registrationtest.Options{})
			if err != nil {
				b.Fatal(err)
			}
			ps = append(ps, p)
		}
		for _, p := range ps {
			if m := p.WaitNotification(b, 5*time.Minute); !m.Registered {
				b.Fatalf("told %+v", m)
			}
		}
		b.StopTimer()
		for _, p := range ps {
			p.Close()
		}
		b.StartTimer()
	}
}
