package main

// Issue 18 end to end, as an operator saw it: handlers whose calls never end on their own,
// dropped into a daemon running as its own process, with a plugin of a good type registered.
// Before the host rewrote guest code with yields, the loop-free call tree froze the whole
// daemon (admin API, /healthz, logs) and SIGTERM was ignored; `wasmhost handler test` of it
// ignored SIGTERM too.

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
)

// endlessFixtures are the host's hostile fixtures whose validate never returns on its own, one
// per code shape (internal/host/shapes_test.go).
var endlessFixtures = []string{"loop", "calltree", "mutual", "indirect", "straight", "bulk", "hostcalls"}

// buildDaemon builds this command into dir and returns the binary's path.
func buildDaemon(tb testing.TB, dir string) string {
	tb.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		tb.Skip("no go command in PATH")
	}
	bin := filepath.Join(dir, "wasmhost")
	if out, err := exec.Command(gobin, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		tb.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// cpuTicks returns the CPU time (user and system, in clock ticks) of process pid, or -1.
func cpuTicks(pid int) int {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return -1
	}
	// The fields after the command name (in parentheses, which may hold spaces): utime and
	// stime are the 12th and 13th.
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return -1
	}
	u, _ := strconv.Atoi(fields[11])
	k, _ := strconv.Atoi(fields[12])
	return u + k
}

// copyFixture copies the host's fixture name.wasm into dir, mode 0644.
func copyFixture(t testing.TB, name, dir string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "internal", "host", "testdata", name+".wasm"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".wasm"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// startProcess starts cmd with its output kept, and returns a channel its exit lands on; the
// process is killed if the test ends first.
func startProcess(t *testing.T, cmd *exec.Cmd) (<-chan error, *lockedBuffer) {
	t.Helper()
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("%s output:\n%s", filepath.Base(cmd.Path), out.String())
		}
	})
	return exited, &out
}

func TestE2EEndlessHandlersDoNotStopTheDaemon(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	dirs := newE2EDirs(t, "/tmp")
	bin := buildDaemon(t, dirs.Base)
	copyFixture(t, "ok", dirs.Handler)
	for _, f := range endlessFixtures {
		copyFixture(t, f, dirs.Handler)
	}
	metricsSock := filepath.Join(dirs.Base, "m.sock")
	// Calls may run an hour and burn a minute of CPU: only SIGTERM ends them here.
	cfgFile := writeConfig(t, configHeader+"handlers:\n  callTimeout: 1h\n  limits:\n    callCPU: 1m\n")
	cmd := exec.Command(bin, "run", "--config", cfgFile, "--socket-dir", dirs.Socket, "--handler-dir", dirs.Handler,
		"--state-dir", dirs.State, "--metrics-listen", "unix:"+metricsSock)
	exited, _ := startProcess(t, cmd)
	admin := filepath.Join(dirs.State, "admin.sock")

	good := registrationtest.Serve(t, filepath.Join(dirs.Socket, "good.sock"), pluginInfo("ok.example", "good"), registrationtest.Options{})
	wantNotification(t, good, true, "")
	for _, f := range endlessFixtures {
		registrationtest.Serve(t, filepath.Join(dirs.Socket, f+".sock"), pluginInfo(f+".example", f), registrationtest.Options{})
	}

	// Every endless handler is running (its CPU counted at its yields), and meanwhile the
	// admin API answers, as does /healthz.
	healthz := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", metricsSock)
	}}, Timeout: time.Minute}
	// The metrics server starts beside the rest: wait until it listens before asking it.
	waitFor(t, "the metrics socket to accept", func() bool {
		c, err := net.Dial("unix", metricsSock)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	waitFor(t, "every endless handler to run", func() bool {
		out, err := handlerCmdRun(t, "handlers", "--admin-socket", admin, "-o", "json")
		if err != nil {
			return false
		}
		var hs []struct {
			File string
			CPU  string
		}
		if json.Unmarshal([]byte(out), &hs) != nil {
			return false
		}
		running := 0
		for _, h := range hs {
			for _, f := range endlessFixtures {
				if filepath.Base(h.File) == f+".wasm" && h.CPU != "0s" && h.CPU != "" {
					running++
				}
			}
		}
		resp, err := healthz.Get("http://wasmhost/healthz")
		if err != nil {
			t.Fatalf("/healthz while handlers loop: %v", err)
		}
		resp.Body.Close()
		return running == len(endlessFixtures)
	})
	out, err := handlerCmdRun(t, "plugins", "--admin-socket", admin)
	if err != nil || !strings.Contains(out, "good.sock") || !strings.Contains(out, "registered") {
		t.Errorf("wasmhost plugins while handlers loop: %v\n%s", err, out)
	}

	// SIGTERM ends it within its shutdown deadline, cleanly, whatever the handlers do.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("daemon exit after SIGTERM: %v", err)
		}
	case <-time.After(e2eWait):
		t.Fatalf("the daemon did not exit within %v of SIGTERM", e2eWait)
	}
}

func TestE2EHandlerTestHonoursSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the command")
	}
	dirs := newE2EDirs(t, "/tmp")
	bin := buildDaemon(t, dirs.Base)
	copyFixture(t, "calltree", dirs.Handler)
	// Neither its deadline nor its CPU budget ends the call: only SIGTERM does.
	cfgFile := writeConfig(t, configHeader+"handlers:\n  limits:\n    callCPU: 1h\n")
	cmd := exec.Command(bin, "handler", "test", filepath.Join(dirs.Handler, "calltree.wasm"), "--timeout", "1h", "--name", "p", "--config", cfgFile)
	exited, out := startProcess(t, cmd)
	// It is running the call once it has compiled the module; give it the time to get there.
	waitFor(t, "the call to start", func() bool {
		select {
		case err := <-exited:
			t.Fatalf("handler test exited before SIGTERM: %v\n%s", err, out.String())
		default:
		}
		return cpuTicks(cmd.Process.Pid) > 50
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || !strings.Contains(out.String(), "cancel") {
			t.Errorf("handler test after SIGTERM: %v, want a failed exit saying the call was canceled\n%s", err, out.String())
		}
	case <-time.After(e2eWait):
		t.Fatalf("handler test did not exit within %v of SIGTERM", e2eWait)
	}
}

// TestSandboxIsTheDaemons: `wasmhost handler test` builds its host from the same translation of
// the config as the daemon, limits included: a handler that passes one passes the other, and
// one refused by a limit of the config is refused by both, with the key named.
func TestSandboxIsTheDaemons(t *testing.T) {
	dirs := newE2EDirs(t, "/tmp")
	copyFixture(t, "depth", dirs.Handler)
	wasm := filepath.Join(dirs.Handler, "depth.wasm")
	tight := writeConfig(t, configHeader+"handlers:\n  limits:\n    maxCallStack: 8Ki\n")
	for _, c := range []struct {
		name, config, want string
	}{
		{"defaults", "", ""},
		{"maxCallStack 8Ki", tight, "handlers.limits.maxCallStack"},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"handler", "test", wasm, "--name", "p"}
			cfg := e2eConfig(newE2EDirs(t, "/tmp"))
			if c.config != "" {
				args = append(args, "--config", c.config)
				if _, err := config.Load(c.config, &cfg); err != nil {
					t.Fatal(err)
				}
			}
			out, err := handlerCmdRun(t, args...)
			if (err == nil) != (c.want == "") || !strings.Contains(out, c.want) {
				t.Errorf("handler test: %v, want failing %v with %q\n%s", err, c.want != "", c.want, out)
			}
			copyFixture(t, "depth", cfg.HandlerDir)
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			startDaemon(t, cfg, testLog(t), nil)
			p := registrationtest.Serve(t, filepath.Join(cfg.SocketDir, "p.sock"), pluginInfo("depth.example", "p"), registrationtest.Options{})
			n := p.WaitNotification(t, e2eWait)
			for !n.Registered && strings.Contains(n.Error, "no handler registered") { // before the handler loaded
				n = p.WaitNotification(t, e2eWait)
			}
			if n.Registered != (c.want == "") || !strings.Contains(n.Error, c.want) {
				t.Errorf("the daemon: %+v, want registered %v, error with %q", n, c.want == "", c.want)
			}
		})
	}
}

// TestHandlerCommandsEscapeTheManifest: handler test and handler inspect show a manifest name
// with a terminal escape sequence escaped, as the daemon's views do.
func TestHandlerCommandsEscapeTheManifest(t *testing.T) {
	dirs := newE2EDirs(t, "/tmp")
	copyFixture(t, "escname", dirs.Handler)
	wasm := filepath.Join(dirs.Handler, "escname.wasm")
	for _, args := range [][]string{
		{"handler", "inspect", wasm},
		{"handler", "test", wasm, "--name", "p"},
		{"handler", "inspect", wasm, "-o", "json"},
	} {
		out, err := handlerCmdRun(t, args...)
		if err != nil || strings.Contains(out, "\x1b") || !strings.Contains(out, `x1b[2J`) {
			t.Errorf("%s: %v, want the name escaped:\n%q", strings.Join(args[:2], " "), err, out)
		}
	}
}
