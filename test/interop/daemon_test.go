package interop

import (
	"bytes"
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

// The daemon's log messages the tests wait for: registered and deregistered (the registrar and
// the reconciler log them, the reconciler's at debug level) carry the plugin's socket under the
// key "socket"; the host logs msgHandlersLoaded once the handlers present at start are loaded.
const (
	msgRegistered     = "plugin registered"
	msgDeregistered   = "plugin deregistered"
	msgHandlersLoaded = "initial handlers loaded"
	// msgRolledBack starts the registrar's message for a plugin that did not take its
	// Notify(true): its registration is rolled back and retried.
	msgRolledBack = "plugin did not take its registration"
)

// stopTimeout bounds a graceful stop of the daemon before it is killed.
const stopTimeout = 20 * time.Second

// builds holds what TestMain and the build helpers share: the binaries are built once per test
// binary, into a directory TestMain removes.
var builds struct {
	dir string // set by TestMain

	mu       sync.Mutex
	daemon   string // path of the built daemon, "" until built
	daemonE  error  // why the daemon did not build
	handlers map[string]string
}

func TestMain(m *testing.M) {
	// A plugin process the kubelet tests started (kubelet_plugins_test.go): run the plugin.
	if role := os.Getenv(pluginRoleEnv); role != "" {
		os.Exit(runPluginRole(role))
	}
	dir, err := os.MkdirTemp("/tmp", "whbuild")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	builds.dir = dir
	code := m.Run()
	if err := os.RemoveAll(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

// repoRoot is the wasmhost repository: this package is test/interop in it.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "cmd", "wasmhost")); err != nil {
		t.Fatalf("%s does not look like the wasmhost repository: %v", root, err)
	}
	return root
}

// goTool is the go command: go test puts the toolchain's bin directory first on the PATH of the
// tests it runs.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "go"
}

// goBuild runs go build in the repository root: the daemon and its handlers are built by the
// main module, with its go.mod and go.sum, exactly as shipped (through this module's replace
// they would be built with this module's dependency versions instead).
func goBuild(t *testing.T, env []string, args ...string) error {
	cmd := exec.Command(goTool(), append([]string{"build"}, args...)...)
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go build %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// daemonBinary builds cmd/wasmhost once (with -race when the tests run with it), or skips the
// test if it does not build.
func daemonBinary(t *testing.T) string {
	t.Helper()
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if builds.daemon == "" && builds.daemonE == nil {
		bin := filepath.Join(builds.dir, "wasmhost")
		args := []string{"-o", bin}
		if raceEnabled {
			args = append(args, "-race")
		}
		start := time.Now()
		if err := goBuild(t, nil, append(args, "./cmd/wasmhost")...); err != nil {
			builds.daemonE = err
		} else {
			builds.daemon = bin
			t.Logf("built the daemon in %v (race %v)", time.Since(start).Round(time.Millisecond), raceEnabled)
		}
	}
	if builds.daemonE != nil {
		t.Skipf("daemon not built yet: %v", builds.daemonE)
	}
	return builds.daemon
}

// handlerWasm builds handlers-wasm/<name> once, as the Makefile does, or skips the test if
// that handler does not exist yet.
func handlerWasm(t *testing.T, name string) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(repoRoot(t), "handlers-wasm", name)); err != nil {
		t.Skipf("handler %s not written yet (handlers-wasm/%s: %v)", name, name, err)
	}
	return buildCHandler(t, name, "handlers-wasm/"+name+"/"+name+".c")
}

// testHandlerWasm builds testdata/handlers/<name>.c, a handler of these tests, once.
func testHandlerWasm(t *testing.T, name string) string {
	t.Helper()
	return buildCHandler(t, "testdata:"+name, "test/interop/testdata/handlers/"+name+".c")
}

// buildCHandler builds the C handler src (relative to the repository root) with the C SDK once
// per test binary, as the Makefile builds the shipped handlers; key names it in builds.
func buildCHandler(t *testing.T, key, src string) string {
	t.Helper()
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if p, ok := builds.handlers[key]; ok {
		return p
	}
	out := filepath.Join(builds.dir, strings.ReplaceAll(key, ":", "-")+".wasm")
	start := time.Now()
	// The shipped handlers are written in C (abi/c): built as the Makefile builds them.
	cmd := exec.Command("clang", "--target=wasm32-wasi", "-mexec-model=reactor", "-O2", "-s", "-I", "abi/c", "-o", out,
		src, "abi/c/wasmhost.c")
	cmd.Dir = repoRoot(t)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("handler %s: clang (Debian: clang lld wasi-libc libclang-rt-14-dev-wasm32): %v\n%s", src, err, b)
	}
	t.Logf("built handler %s in %v", src, time.Since(start).Round(time.Millisecond))
	if builds.handlers == nil {
		builds.handlers = make(map[string]string)
	}
	builds.handlers[key] = out
	return out
}

// daemonOptions are what a test asks of the daemon it starts.
type daemonOptions struct {
	// Handlers are the names of directories under handlers-wasm/ to build and install.
	// Defaults to none.
	Handlers []string
	// TestHandlers are the names of handlers of these tests (testdata/handlers/<name>.c) to
	// build and install. Defaults to none.
	TestHandlers []string
	// Config is YAML for the daemon's --config file (docs/configuration.md). Defaults to none:
	// the shipped defaults.
	Config string
	// NoWait returns as soon as the process is started. Defaults to false: startDaemon waits
	// until the daemon has loaded its handlers, so that a plugin the test starts next meets a
	// daemon that knows its type.
	NoWait bool
}

// Daemon is a running wasmhost process, with its JSON log collected.
type Daemon struct {
	Dirs dirs

	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has exited and its output is read
	err    error         // the process's exit error, set before exited is closed

	mu    sync.Mutex
	lines []string    // every line of output
	recs  []logRecord // the lines that are JSON records
	races int         // "WARNING: DATA RACE" reports from a -race daemon
	part  []byte      // an unfinished line
}

// logRecord is one JSON log line of the daemon.
type logRecord map[string]any

func (r logRecord) str(key string) string {
	s, _ := r[key].(string)
	return s
}

// startDaemon installs the handlers and starts `wasmhost run` on d's directories, with debug
// JSON logs and the metrics endpoint off (tests run in parallel with others on this machine).
// The daemon is stopped when the test ends, and its log is shown if the test failed.
func startDaemon(t *testing.T, d dirs, o daemonOptions) *Daemon {
	t.Helper()
	bin := daemonBinary(t)
	install := func(name, built string) {
		b, err := os.ReadFile(built)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d.Handlers, name+".wasm"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range o.Handlers {
		install(h, handlerWasm(t, h))
	}
	for _, h := range o.TestHandlers {
		install(h, testHandlerWasm(t, h))
	}
	args := []string{"run",
		"--socket-dir", d.Sockets, "--handler-dir", d.Handlers, "--state-dir", d.State,
		"--log-format", "json", "--log-level", "debug", "--metrics-listen", "off"}
	if o.Config != "" {
		cfg := filepath.Join(d.Root, "wasmhost.yaml")
		if err := os.WriteFile(cfg, []byte(o.Config), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config", cfg)
	}
	dm := &Daemon{Dirs: d, exited: make(chan struct{})}
	dm.cmd = exec.Command(bin, args...)
	dm.cmd.Stdout = dm
	dm.cmd.Stderr = dm
	dieWithParent(dm.cmd)
	if err := dm.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() {
		dm.err = dm.cmd.Wait()
		close(dm.exited)
	}()
	t.Cleanup(func() {
		dm.Stop(t)
		if t.Failed() {
			dm.mu.Lock()
			t.Logf("daemon log:\n%s", strings.Join(dm.lines, "\n"))
			dm.mu.Unlock()
		}
	})
	if !o.NoWait {
		dm.waitLog(t, "the daemon to load its handlers", func(r logRecord) bool { return r.str("msg") == msgHandlersLoaded })
	}
	return dm
}

// Write collects the daemon's output, line by line (it is the process's stdout and stderr).
func (dm *Daemon) Write(b []byte) (int, error) {
	dm.mu.Lock()
	defer dm.mu.Unlock()
	dm.part = append(dm.part, b...)
	for {
		i := bytes.IndexByte(dm.part, '\n')
		if i < 0 {
			break
		}
		line := string(dm.part[:i])
		dm.part = dm.part[i+1:]
		dm.lines = append(dm.lines, line)
		if strings.Contains(line, "WARNING: DATA RACE") {
			dm.races++
		}
		var rec logRecord
		if json.Unmarshal([]byte(line), &rec) == nil {
			dm.recs = append(dm.recs, rec)
		}
	}
	return len(b), nil
}

// Stop asks the daemon to stop (SIGTERM), kills it if it has not exited within stopTimeout,
// and fails the test if it did not exit cleanly or reported a data race. Idempotent.
func (dm *Daemon) Stop(t *testing.T) {
	t.Helper()
	select {
	case <-dm.exited:
	default:
		_ = dm.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-dm.exited:
		case <-time.After(stopTimeout):
			_ = dm.cmd.Process.Kill()
			<-dm.exited
			t.Errorf("the daemon did not stop within %v of SIGTERM; killed", stopTimeout)
		}
		if dm.err != nil {
			t.Errorf("the daemon exited with %v", dm.err)
		}
	}
	dm.mu.Lock()
	defer dm.mu.Unlock()
	if dm.races > 0 {
		t.Errorf("the daemon reported %d data race(s)", dm.races)
		dm.races = 0
	}
}

// records returns the JSON records logged so far that match.
func (dm *Daemon) records(match func(logRecord) bool) []logRecord {
	dm.mu.Lock()
	defer dm.mu.Unlock()
	var out []logRecord
	for _, r := range dm.recs {
		if match(r) {
			out = append(out, r)
		}
	}
	return out
}

// waitLog waits until the daemon has logged a record that matches and returns it. It fails at
// once if the daemon exits meanwhile.
func (dm *Daemon) waitLog(t *testing.T, what string, match func(logRecord) bool) logRecord {
	t.Helper()
	var got logRecord
	waitFor(t, what, func() string {
		if rs := dm.records(match); len(rs) > 0 {
			got = rs[0]
			return ""
		}
		select {
		case <-dm.exited:
			t.Fatalf("the daemon exited (%v) before %s", dm.err, what)
		default:
		}
		return "not logged yet"
	})
	return got
}

// about matches records with the given message about the given socket.
func about(msg, socket string) func(logRecord) bool {
	return func(r logRecord) bool { return r.str("msg") == msg && r.str("socket") == socket }
}

// waitRegistered waits until the daemon logs that the plugin at socket is registered.
func (dm *Daemon) waitRegistered(t *testing.T, socket string) logRecord {
	t.Helper()
	return dm.waitLog(t, "the daemon to register "+socket, about(msgRegistered, socket))
}

// waitDeregistered waits until the daemon logs that the plugin at socket is deregistered.
func (dm *Daemon) waitDeregistered(t *testing.T, socket string) logRecord {
	t.Helper()
	return dm.waitLog(t, "the daemon to deregister "+socket, about(msgDeregistered, socket))
}
