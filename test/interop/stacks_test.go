package interop

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Plugins served by gRPC stacks other than grpc-go: Python grpcio (Debian's python3-grpcio,
// stacks/plugin.py) and Node.js @grpc/grpc-js (npm ci in this directory, stacks/plugin.js).
// Each serves the registration API with hand-encoded protobuf and reports on stdout what it is
// told. They differ from grpc-go where the daemon's registration client once failed: grpcio
// compresses answers of a couple of hundred bytes whatever the client offered, both accept a
// server window far below 64 KiB (and reset a stream that overruns it), and both send
// metadata larger than the client's SETTINGS_MAX_HEADER_LIST_SIZE.

// A stack finds what it needs on this machine: the command line that runs its plugin script,
// or why it cannot. In CI (CI=true; .ci/run installs both) a missing stack fails the test;
// elsewhere it is skipped with the reason.
type stack struct {
	name string
	find func() ([]string, error)
}

var stacks = []stack{
	{"python-grpcio", findPython},
	{"node-grpc-js", findNode},
}

// findPython returns a python3 that imports grpc: the one on PATH, else Debian's (a pyenv or
// virtualenv python3 on PATH does not see Debian's dist-packages).
func findPython() ([]string, error) {
	var tried []string
	for _, py := range []string{"python3", "/usr/bin/python3"} {
		p, err := exec.LookPath(py)
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", py, err))
			continue
		}
		if out, err := exec.Command(p, "-c", "import grpc").CombinedOutput(); err != nil {
			tried = append(tried, fmt.Sprintf("%s: import grpc: %v: %s", p, err, strings.TrimSpace(lastLine(string(out)))))
			continue
		}
		script, err := filepath.Abs(filepath.Join("stacks", "plugin.py"))
		if err != nil {
			return nil, err
		}
		return []string{p, script}, nil
	}
	return nil, fmt.Errorf("no python3 with grpcio (apt-get install python3-grpcio): %s", strings.Join(tried, "; "))
}

// findNode returns node and the plugin script, if npm ci has installed @grpc/grpc-js here.
func findNode() ([]string, error) {
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, fmt.Errorf("no node (apt-get install nodejs npm): %v", err)
	}
	if _, err := os.Stat(filepath.Join("node_modules", "@grpc", "grpc-js", "package.json")); err != nil {
		return nil, fmt.Errorf("@grpc/grpc-js is not installed (run npm ci in test/interop): %v", err)
	}
	script, err := filepath.Abs(filepath.Join("stacks", "plugin.js"))
	if err != nil {
		return nil, err
	}
	return []string{node, script}, nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// use returns the stack's command line, or skips the test (fails it in CI) if the stack is
// not installed.
func (s stack) use(t *testing.T) []string {
	t.Helper()
	argv, err := s.find()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is required in CI (.ci/run installs it): %v", s.name, err)
		}
		t.Skipf("%s not available on this machine: %v", s.name, err)
	}
	return argv
}

// stackPlugin is a plugin process of another gRPC stack.
type stackPlugin struct {
	Socket string
	cmd    *exec.Cmd
	exited chan struct{}

	mu     sync.Mutex
	events []stackEvent
	stderr strings.Builder
}

// stackEvent is a line the plugin script printed: "ready", "getinfo", or "notify" with what
// it was told.
type stackEvent struct {
	Event      string `json:"event"`
	GRPC       string `json:"grpc"`
	Registered bool   `json:"registered"`
	Error      string `json:"error"`
}

// startStackPlugin runs the plugin script with argv on socket <d.Sockets>/<name>.sock, type
// exampleType, and the extra flags; it returns once the plugin serves. The plugin is stopped
// and its socket removed when the test ends.
func startStackPlugin(t *testing.T, argv []string, d dirs, name string, flags ...string) *stackPlugin {
	t.Helper()
	p := &stackPlugin{Socket: filepath.Join(d.Sockets, name+".sock"), exited: make(chan struct{})}
	args := append(argv[1:len(argv):len(argv)], "--socket", p.Socket, "--type", exampleType, "--name", name)
	p.cmd = exec.Command(argv[0], append(args, flags...)...)
	p.cmd.Stderr = &lockedWriter{mu: &p.mu, b: &p.stderr}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	dieWithParent(p.cmd)
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", argv, err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var ev stackEvent
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				p.mu.Lock()
				p.events = append(p.events, ev)
				p.mu.Unlock()
			}
		}
		p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			p.cmd.Process.Kill()
			<-p.exited
		}
		os.Remove(p.Socket)
		if t.Failed() {
			p.mu.Lock()
			t.Logf("plugin %s: events %+v, stderr:\n%s", name, p.events, p.stderr.String())
			p.mu.Unlock()
		}
	})
	ready := p.waitEvent(t, "ready", func(ev stackEvent) bool { return ev.Event == "ready" })
	t.Logf("plugin %s serves with gRPC %s", name, ready.GRPC)
	return p
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(b)
}

// waitEvent waits until the plugin has printed an event that matches.
func (p *stackPlugin) waitEvent(t *testing.T, what string, match func(stackEvent) bool) stackEvent {
	t.Helper()
	var got stackEvent
	waitFor(t, what, func() string {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, ev := range p.events {
			if match(ev) {
				got = ev
				return ""
			}
		}
		select {
		case <-p.exited:
			t.Fatalf("the plugin exited (%v) before %s; stderr:\n%s", p.cmd.ProcessState, what, p.stderr.String())
		default:
		}
		return fmt.Sprintf("events so far: %+v", p.events)
	})
	return got
}

func (p *stackPlugin) notified() []stackEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []stackEvent
	for _, ev := range p.events {
		if ev.Event == "notify" {
			out = append(out, ev)
		}
	}
	return out
}

// longVersions is a version list long enough that GetInfo's answer is about 230 bytes, which
// grpcio compresses, and that a refusal naming it does not fit a 5-byte window.
func longVersions(first string) string {
	vs := []string{first}
	for i := range 10 {
		vs = append(vs, fmt.Sprintf("v1.ExampleService%d", i))
	}
	return strings.Join(vs, ",")
}

// TestOtherGRPCStacksWithDaemon registers plugins served by grpcio and grpc-js with the daemon
// (handlers-wasm/example), under each stack's default settings, a 5-byte flow-control window
// (the least grpcio advertises), gzip compression on, and large metadata; metadata over the
// daemon's limit gets the named error, in a warning, instead of a bare COMPRESSION_ERROR.
func TestOtherGRPCStacksWithDaemon(t *testing.T) {
	for _, st := range stacks {
		t.Run(st.name, func(t *testing.T) {
			argv := st.use(t)
			d := newDirs(t)
			dm := startDaemon(t, d, daemonOptions{Handlers: []string{"example"}})

			registers := func(t *testing.T, p *stackPlugin) {
				t.Helper()
				dm.waitRegistered(t, p.Socket)
				got := p.waitEvent(t, "Notify(true)", func(ev stackEvent) bool { return ev.Event == "notify" })
				if !got.Registered || got.Error != "" {
					t.Errorf("the plugin was told %+v, want registered", got)
				}
			}

			t.Run("default settings", func(t *testing.T) {
				registers(t, startStackPlugin(t, argv, d, "plain", "--versions", "v1"))
			})
			t.Run("tiny window", func(t *testing.T) {
				registers(t, startStackPlugin(t, argv, d, "window", "--versions", "v1", "--window", "5"))
			})
			t.Run("tiny window, refused", func(t *testing.T) {
				// The reason (over 200 bytes, naming every version) reaches the plugin through a
				// 5-byte window: before, the plugin reset the stream and never learnt why.
				versions := longVersions("v0")
				p := startStackPlugin(t, argv, d, "refused", "--versions", versions, "--window", "5")
				got := p.waitEvent(t, "Notify(false)", func(ev stackEvent) bool { return ev.Event == "notify" })
				if got.Registered || !strings.Contains(got.Error, "this handler needs v1") ||
					!strings.Contains(got.Error, strings.ReplaceAll(versions, ",", ", ")) {
					t.Errorf("the plugin was told %+v, want not registered, with the handler's whole reason", got)
				}
				if rs := dm.records(func(r logRecord) bool {
					return r.str("socket") == p.Socket && r.str("msg") == "NotifyRegistrationStatus(false) failed"
				}); len(rs) != 0 {
					t.Errorf("the daemon says the refusal did not reach the plugin: %v", rs)
				}
			})
			t.Run("gzip", func(t *testing.T) {
				registers(t, startStackPlugin(t, argv, d, "gzip", "--versions", longVersions("v1"), "--gzip"))
			})
			t.Run("large metadata", func(t *testing.T) {
				registers(t, startStackPlugin(t, argv, d, "meta", "--versions", "v1", "--header-bytes", "30000", "--trailer-bytes", "30000"))
			})
			t.Run("metadata over the limit", func(t *testing.T) {
				p := startStackPlugin(t, argv, d, "hugemeta", "--versions", "v1", "--trailer-bytes", "70000")
				// What the operator reads: a warning naming the socket and the cause.
				dm.waitLog(t, "the daemon to warn that "+p.Socket+" sends too much metadata", func(r logRecord) bool {
					return r.str("socket") == p.Socket && (r.str("level") == "WARN" || r.str("level") == "ERROR") &&
						strings.Contains(r.str("error"), "headers or trailers are too large")
				})
				if rs := dm.records(about(msgRegistered, p.Socket)); len(rs) != 0 {
					t.Errorf("registered anyway: %v", rs)
				}
				if len(p.notified()) != 0 {
					t.Errorf("the plugin was notified: %+v", p.notified())
				}
			})
		})
	}
}
