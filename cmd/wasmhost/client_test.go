package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	adminv1 "github.com/wasmhost/wasmhost/admin/v1"
	"github.com/wasmhost/wasmhost/internal/admin"
	"github.com/wasmhost/wasmhost/internal/admin/admintest"
	"github.com/wasmhost/wasmhost/internal/adminview"
	"github.com/wasmhost/wasmhost/internal/state"
	"github.com/wasmhost/wasmhost/internal/testwait"
)

// clientTestServer runs an admin server over a fake source in a fresh temp dir and returns
// its socket once it answers. Cleanup stops it and waits for Run.
func clientTestServer(t *testing.T, src *admintest.Source) (*admin.Server, string) {
	t.Helper()
	return clientTestServerWith(t, src, nil)
}

// clientTestServerWith is clientTestServer with the server's config changed by edit first.
func clientTestServerWith(t *testing.T, src *admintest.Source, edit func(*admin.Config)) (*admin.Server, string) {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "admin.sock")
	cfg := admin.Config{Store: src.Store(), Ready: src.Ready, SocketPath: sock, Version: "v0.0.0-test", ShutdownTimeout: time.Second}
	if edit != nil {
		edit(&cfg)
	}
	srv, err := admin.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("admin server Run: %v", err)
		}
	})
	testwait.Until(t, "the admin server to answer on "+sock, func() bool {
		select {
		case err := <-done:
			t.Fatalf("admin server Run: %v", err)
		default:
		}
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return srv, sock
}

// runClient runs one client command (as `wasmhost <args>`) and returns its stdout, stderr
// and error.
func runClient(ctx context.Context, args ...string) (string, string, error) {
	root := &cobra.Command{Use: "wasmhost", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(newClientCmds()...)
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

func clientFixture() *admintest.Source {
	now := time.Now()
	src := &admintest.Source{}
	src.SetPlugins(
		admintest.Plugin{
			Socket: "/var/lib/kubelet/plugins_registry/csi.example.com-reg.sock", Type: "CSIPlugin",
			Name: "csi.example.com", Endpoint: "/var/lib/kubelet/plugins/csi.example.com/csi.sock",
			Versions: []string{"1.0.0"}, State: state.StateRegistered,
			LastTransition: now.Add(-3 * time.Hour), RegisteredAt: now.Add(-3 * time.Hour),
			HandlerFile: "/etc/wasmhost/handlers/csi.wasm", HandlerSHA256: strings.Repeat("ab", 32),
			Published: map[string]string{"node_id": "n1"},
		},
		admintest.Plugin{
			Socket: "/var/lib/kubelet/plugins_registry/gpu.example.com-reg.sock", Type: "DRAPlugin",
			Name: "gpu.example.com", Versions: []string{"v1.DRAPlugin", "v1beta1.DRAPlugin"},
			State: state.StateFailing, LastError: "registration: plugin unreachable: connection refused",
			Attempts: 4, NextRetry: now.Add(8 * time.Second), LastTransition: now.Add(-90 * time.Second),
		},
		admintest.Plugin{
			Socket: "/var/lib/kubelet/plugins_registry/sub/odd-reg.sock", Type: "OddPlugin", Name: "odd",
			State: state.StateWaitingForHandler, LastTransition: now.Add(-5 * time.Minute),
		},
	)
	src.SetHandlers(
		state.Handler{PluginTypes: []string{"CSIPlugin"}, File: "/etc/wasmhost/handlers/csi.wasm",
			Name: "csi", Version: "1.2.0",
			SHA256: strings.Repeat("ab", 32), Size: 4096, ABIVersion: 1, PoolSize: 4,
			Capabilities: []string{"log"}, LoadedAt: now.Add(-3 * time.Hour), Serving: true,
			Counters:  state.HandlerCounters{Calls: 12, Failures: 2, Traps: 1, Timeouts: 1, CPU: 1500 * time.Microsecond, Throttled: 250 * time.Microsecond},
			LastError: "wasm trap: unreachable"},
		state.Handler{PluginTypes: []string{"DRAPlugin"}, LoadedAt: now.Add(-3 * time.Hour)},
	)
	return src
}

// columns splits a table line on runs of two or more spaces.
func columns(line string) []string {
	return regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(line), -1)
}

func TestClientPlugins(t *testing.T) {
	_, sock := clientTestServer(t, clientFixture())

	out, _, err := runClient(t.Context(), "plugins", "--admin-socket", sock)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("plugins printed %d lines, want a header and 3 rows:\n%s", len(lines), out)
	}
	if got, want := columns(lines[0]), []string{"SOCKET", "TYPE", "NAME", "STATE", "VERSIONS", "AGE", "PUBLISHED", "LAST-ERROR"}; !slices.Equal(got, want) {
		t.Errorf("header = %q, want %q", got, want)
	}
	for _, l := range lines {
		if strings.HasSuffix(l, " ") {
			t.Errorf("trailing blanks in %q", l)
		}
	}
	// Every column starts at the same offset on every line.
	for _, col := range []string{"TYPE", "STATE", "AGE"} {
		at := strings.Index(lines[0], col)
		for _, l := range lines[1:] {
			if at >= len(l) || l[at-1] != ' ' || l[at] == ' ' {
				t.Errorf("column %s not aligned at %d in %q", col, at, l)
			}
		}
	}
	// AGE (column 5) is matched loosely: the clock runs while the test does.
	want := [][]string{
		{"csi.example.com-reg.sock", "CSIPlugin", "csi.example.com", "registered", "1.0.0", `3h`, "node_id=n1"},
		{"gpu.example.com-reg.sock", "DRAPlugin", "gpu.example.com", "failing", "v1.DRAPlugin,v1beta1.DRAPlugin", `9\ds`, "-",
			"registration: plugin unreachable: connection refused"},
		{"sub/odd-reg.sock", "OddPlugin", "odd", "waiting-for-handler", "-", `5m\ds`, "-"},
	}
	for i, w := range want {
		got := columns(lines[i+1])
		if len(got) != len(w) {
			t.Errorf("row %d = %q, want %q", i, got, w)
			continue
		}
		if !regexp.MustCompile("^" + w[5] + "$").MatchString(got[5]) {
			t.Errorf("row %d AGE = %q, want %s", i, got[5], w[5])
		}
		got[5], w[5] = "", ""
		if !slices.Equal(got, w) {
			t.Errorf("row %d = %q, want %q", i, got, w)
		}
	}

	out, _, err = runClient(t.Context(), "plugins", "--admin-socket", sock, "-o", "wide")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"ENDPOINT", "NEXT-RETRY", "/var/lib/kubelet/plugins_registry/csi.example.com-reg.sock",
		"/var/lib/kubelet/plugins/csi.example.com/csi.sock", "/etc/wasmhost/handlers/csi.wasm", "abababababab", "in "} {
		if !strings.Contains(out, s) {
			t.Errorf("plugins -o wide lacks %q:\n%s", s, out)
		}
	}

	out, _, err = runClient(t.Context(), "plugins", "--admin-socket", sock, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var ps []map[string]any
	if err := json.Unmarshal([]byte(out), &ps); err != nil {
		t.Fatalf("plugins -o json: %v\n%s", err, out)
	}
	if len(ps) != 3 {
		t.Fatalf("plugins -o json: %d plugins, want 3", len(ps))
	}
	csi, gpu := ps[0], ps[1]
	if csi["state"] != "registered" || csi["name"] != "csi.example.com" || csi["handlerSHA256"] != strings.Repeat("ab", 32) ||
		csi["published"].(map[string]any)["node_id"] != "n1" || csi["registeredAt"] == nil {
		t.Errorf("registered plugin in JSON = %v", csi)
	}
	if gpu["state"] != "failing" || gpu["attempts"] != float64(4) || gpu["nextRetry"] == nil ||
		gpu["lastError"] != "registration: plugin unreachable: connection refused" {
		t.Errorf("failing plugin in JSON = %v", gpu)
	}
	if ps[2]["state"] != "waiting-for-handler" {
		t.Errorf("waiting plugin in JSON = %v", ps[2])
	}

	// -o yaml is the same document, with the same keys.
	yamlOut, _, err := runClient(t.Context(), "plugins", "--admin-socket", sock, "-o", "yaml")
	if err != nil {
		t.Fatal(err)
	}
	sameDocument(t, out, yamlOut)
	if !strings.HasPrefix(yamlOut, "- socket: /var/lib/kubelet/plugins_registry/csi.example.com-reg.sock\n") ||
		!strings.Contains(yamlOut, "\n  handlerSHA256: abab") || !strings.Contains(yamlOut, "\n  attempts: 4\n") {
		t.Errorf("plugins -o yaml:\n%s", yamlOut)
	}

	if _, _, err := runClient(t.Context(), "plugins", "--admin-socket", sock, "-o", "xml"); err == nil ||
		!strings.Contains(err.Error(), `--output "xml": want table, wide, json, yaml`) {
		t.Errorf("-o xml: %v, want a list of the formats", err)
	}
}

func TestClientPluginsEmpty(t *testing.T) {
	_, sock := clientTestServer(t, &admintest.Source{})
	out, errOut, err := runClient(t.Context(), "plugins", "--admin-socket", sock)
	if err != nil || out != "" || !strings.Contains(errOut, "No plugin sockets") {
		t.Errorf("empty plugins: out %q, err out %q, err %v", out, errOut, err)
	}
	out, _, err = runClient(t.Context(), "plugins", "--admin-socket", sock, "-o", "json")
	if err != nil || strings.TrimSpace(out) != "[]" {
		t.Errorf("empty plugins -o json: %q, %v; want []", out, err)
	}
}

func TestClientHandlers(t *testing.T) {
	_, sock := clientTestServer(t, clientFixture())
	out, _, err := runClient(t.Context(), "handlers", "--admin-socket", sock)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("handlers printed %d lines, want 3:\n%s", len(lines), out)
	}
	if got, want := columns(lines[0]), []string{"HANDLER", "NAME", "VERSION", "TYPES", "ABI", "POOL", "CALLS", "FAILURES", "TRAPS", "TIMEOUTS", "CPU", "THROTTLED", "AGE", "LAST-ERROR"}; !slices.Equal(got, want) {
		t.Errorf("header = %q, want %q", got, want)
	}
	// Built-in handlers (no file) sort first.
	if got, want := columns(lines[1]), []string{"(built-in)", "-", "-", "DRAPlugin", "-", "0", "0", "0", "0", "0", "-", "-", "3h"}; !slices.Equal(got, want) {
		t.Errorf("built-in row = %q, want %q", got, want)
	}
	if got, want := columns(lines[2]), []string{"csi.wasm", "csi", "1.2.0", "CSIPlugin", "1", "4", "12", "2", "1", "1", "2ms", "250µs", "3h", "wasm trap: unreachable"}; !slices.Equal(got, want) {
		t.Errorf("csi row = %q, want %q", got, want)
	}

	out, _, err = runClient(t.Context(), "handlers", "--admin-socket", sock, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var hs []map[string]any
	if err := json.Unmarshal([]byte(out), &hs); err != nil {
		t.Fatalf("handlers -o json: %v\n%s", err, out)
	}
	if len(hs) != 2 || hs[1]["file"] != "/etc/wasmhost/handlers/csi.wasm" || hs[1]["traps"] != float64(1) ||
		hs[1]["abiVersion"] != float64(1) || hs[1]["poolSize"] != float64(4) || hs[0]["file"] != nil {
		t.Errorf("handlers -o json = %v", hs)
	}
	yamlOut, _, err := runClient(t.Context(), "handlers", "--admin-socket", sock, "-o", "yaml")
	if err != nil {
		t.Fatal(err)
	}
	sameDocument(t, out, yamlOut)
}

func TestClientStatus(t *testing.T) {
	src := clientFixture()
	src.SetNotReady(errors.New("start-up handlers are still loading"))
	_, sock := clientTestServer(t, src)
	out, _, err := runClient(t.Context(), "status", "--admin-socket", sock)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"v0.0.0-test", "ready:    no: start-up handlers are still loading",
		"plugins:  3 (1 registered, 1 failing, 1 waiting-for-handler)", "handlers: 2 serving\n"} {
		if !strings.Contains(out, s) {
			t.Errorf("status lacks %q:\n%s", s, out)
		}
	}
	out, _, err = runClient(t.Context(), "status", "--admin-socket", sock, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var st adminview.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err)
	}
	if st.Ready || st.Plugins != 3 || st.PluginsByState["failing"] != 1 || st.Version != "v0.0.0-test" {
		t.Errorf("status -o json = %+v", st)
	}
	for _, key := range []string{`"notReadyReason": "start-up handlers are still loading"`, `"pluginsByState": {`, `"uptimeSeconds": `} {
		if !strings.Contains(out, key) {
			t.Errorf("status -o json lacks %s:\n%s", key, out)
		}
	}
	yamlOut, _, err := runClient(t.Context(), "status", "--admin-socket", sock, "-o", "yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(yamlOut, "\nnotReadyReason: start-up handlers are still loading\n") || !strings.Contains(yamlOut, "\n  failing: 1\n") {
		t.Errorf("status -o yaml:\n%s", yamlOut)
	}
}

// watchClient runs `wasmhost watch` in the background and returns its output line by line.
func watchClient(t *testing.T, args ...string) (lines <-chan string, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	ch := make(chan string, 64)
	done := make(chan error, 1)
	go func() {
		root := &cobra.Command{Use: "wasmhost", SilenceUsage: true, SilenceErrors: true}
		root.AddCommand(newClientCmds()...)
		root.SetOut(pw)
		root.SetErr(pw)
		root.SetArgs(append([]string{"watch"}, args...))
		err := root.ExecuteContext(ctx)
		pw.Close()
		done <- err
	}()
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	stopped := false
	var runErr error
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			for range ch {
			}
			runErr = <-done
		}
		return runErr
	}
	t.Cleanup(func() { stop() })
	return ch, stop
}

func nextLine(t *testing.T, lines <-chan string) string {
	t.Helper()
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatal("watch ended")
		}
		return l
	case <-time.After(20 * time.Second):
		t.Fatal("no line from watch in 20 s")
	}
	return ""
}

func TestClientWatchJSON(t *testing.T) {
	src := clientFixture()
	_, sock := clientTestServer(t, src)
	lines, stop := watchClient(t, "--admin-socket", sock, "-o", "json")

	var types []string
	for {
		var ev adminview.Event
		if err := json.Unmarshal([]byte(nextLine(t, lines)), &ev); err != nil {
			t.Fatal(err)
		}
		types = append(types, ev.Type)
		if ev.Type == "SYNCED" {
			break
		}
		if ev.Plugin == nil || ev.Plugin.Socket == "" {
			t.Errorf("ADDED without a plugin: %+v", ev)
		}
	}
	if want := []string{"ADDED", "ADDED", "ADDED", "SYNCED"}; !slices.Equal(types, want) {
		t.Errorf("initial events = %v, want %v", types, want)
	}

	p := src.Plugins()[1]
	p.State, p.LastError, p.Attempts = state.StateRegistered, "", 0
	src.Upsert(p)
	// The fake writes the socket's status and its plugin one after the other, so the watch
	// may show the step between them first: MODIFIED events of that socket, then registered.
	for {
		var ev adminview.Event
		if err := json.Unmarshal([]byte(nextLine(t, lines)), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Type != "MODIFIED" || ev.Plugin.Socket != p.Socket || ev.Time == nil {
			t.Fatalf("change = %+v, want MODIFIED of %s", ev, p.Socket)
		}
		if ev.Plugin.State == "registered" {
			break
		}
	}
	if err := stop(); err != nil {
		t.Errorf("watch after Ctrl-C: %v, want nil", err)
	}
}

// TestClientWatchYAML: -o yaml prints each event as a YAML document of its own.
func TestClientWatchYAML(t *testing.T) {
	_, sock := clientTestServer(t, clientFixture())
	lines, stop := watchClient(t, "--admin-socket", sock, "-o", "yaml")
	var docs []string
	for len(docs) == 0 || !strings.HasPrefix(docs[len(docs)-1], "type: SYNCED\n") {
		l := nextLine(t, lines)
		if l == "---" {
			docs = append(docs, "")
			continue
		}
		if len(docs) == 0 {
			t.Fatalf("watch -o yaml starts with %q, want ---", l)
		}
		docs[len(docs)-1] += l + "\n"
	}
	if len(docs) != 4 {
		t.Fatalf("watch -o yaml: %d documents up to SYNCED, want 4:\n%s", len(docs), strings.Join(docs, "---\n"))
	}
	for _, d := range docs[:3] {
		var ev struct {
			Type   string
			Plugin struct{ Socket, State string }
		}
		if err := yaml.Unmarshal([]byte(d), &ev); err != nil || ev.Type != "ADDED" || ev.Plugin.Socket == "" || ev.Plugin.State == "" {
			t.Errorf("event %+v (%v):\n%s", ev, err, d)
		}
	}
	if err := stop(); err != nil {
		t.Errorf("watch after Ctrl-C: %v", err)
	}
}

func TestClientWatchTable(t *testing.T) {
	src := clientFixture()
	_, sock := clientTestServer(t, src)
	lines, stop := watchClient(t, "--admin-socket", sock)
	if h := nextLine(t, lines); !strings.HasPrefix(h, "TIME") || !strings.Contains(h, "EVENT") {
		t.Errorf("header = %q", h)
	}
	for range 3 {
		if l := nextLine(t, lines); !strings.Contains(l, "ADDED") {
			t.Errorf("initial line = %q, want ADDED", l)
		}
	}
	if l := nextLine(t, lines); !strings.Contains(l, "SYNCED") || !strings.Contains(l, "3 plugin socket(s) listed") {
		t.Errorf("line after the list = %q, want SYNCED with the count", l)
	}
	// The fixture takes the plugin out of the actual state, then the desired, then its status:
	// a watcher may see a step between as a MODIFIED line before the DELETED one.
	src.Remove("/var/lib/kubelet/plugins_registry/sub/odd-reg.sock")
	l := nextLine(t, lines)
	for i := 0; i < 3 && strings.Contains(l, "MODIFIED") && strings.Contains(l, "sub/odd-reg.sock"); i++ {
		l = nextLine(t, lines)
	}
	if !strings.Contains(l, "DELETED") || !strings.Contains(l, "gone") || !strings.Contains(l, "sub/odd-reg.sock") ||
		!strings.Contains(l, "OddPlugin/odd") {
		t.Errorf("deletion line = %q", l)
	}
	if err := stop(); err != nil {
		t.Errorf("watch after Ctrl-C: %v", err)
	}
}

func TestClientNotRunning(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })

	// No socket at all, and a stale socket nobody listens on.
	missing := filepath.Join(dir, "missing.sock")
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()

	for _, sock := range []string{missing, stale} {
		for _, cmd := range []string{"plugins", "handlers", "watch", "status"} {
			_, _, err := runClient(t.Context(), cmd, "--admin-socket", sock)
			want := "no daemon is listening on " + sock + ": is wasmhost running? (start it with wasmhost run)" +
				"; a daemon with another admin socket: pass --admin-socket PATH or set $WASMHOST_ADMIN_SOCKET" +
				" (a daemon listens on <its --state-dir>/admin.sock unless it was started with --admin-socket)"
			if err == nil || err.Error() != want {
				t.Errorf("%s on %s: %v\nwant: %s", cmd, filepath.Base(sock), err, want)
			}
		}
	}

	// The environment sets the default socket.
	t.Setenv(envAdminSocket, missing)
	if _, _, err := runClient(t.Context(), "plugins"); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("with $%s: %v, want it to name %s", envAdminSocket, err, missing)
	}
}

func TestClientColorKeepsColumnsAligned(t *testing.T) {
	src := clientFixture()
	var ps []*adminv1.Plugin
	for _, p := range src.Plugins() {
		ps = append(ps, &adminv1.Plugin{Socket: p.Socket, Type: p.Type, Name: p.Name, State: stateFor(p.State)})
	}
	now := time.Now()
	var plainOut, colorOut bytes.Buffer
	if err := adminview.WritePlugins(&plainOut, ps, false, false, now); err != nil {
		t.Fatal(err)
	}
	if err := adminview.WritePlugins(&colorOut, ps, false, true, now); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(colorOut.String(), adminview.Red+"failing"+adminview.Reset) ||
		!strings.Contains(colorOut.String(), adminview.Yellow+"waiting-for-handler"+adminview.Reset) {
		t.Errorf("no colour on states:\n%q", colorOut.String())
	}
	stripped := regexp.MustCompile("\x1b\\[[0-9;]*m").ReplaceAllString(colorOut.String(), "")
	if stripped != plainOut.String() {
		t.Errorf("coloured table, colours removed:\n%s\nplain table:\n%s", stripped, plainOut.String())
	}
}

func stateFor(s state.PluginState) adminv1.PluginState {
	return map[state.PluginState]adminv1.PluginState{
		state.StatePending:           adminv1.PluginState_PLUGIN_STATE_PENDING,
		state.StateRegistered:        adminv1.PluginState_PLUGIN_STATE_REGISTERED,
		state.StateFailing:           adminv1.PluginState_PLUGIN_STATE_FAILING,
		state.StateWaitingForHandler: adminv1.PluginState_PLUGIN_STATE_WAITING_FOR_HANDLER,
	}[s]
}

// TestClientStatusCountsWhatServes: one handler serving and five sources refused read
// "1 serving, 5 sources or files not serving", not "6 handlers", with the five under problems.
func TestClientStatusCountsWhatServes(t *testing.T) {
	src := &admintest.Source{}
	hs := []state.Handler{{PluginTypes: []string{"CSIPlugin"}, File: "/h/csi.wasm", Source: state.SourceFile, Serving: true}}
	for i := range 5 {
		hs = append(hs, state.Handler{File: "registry.example.com/h/m" + strconv.Itoa(i) + ":v1", Source: state.SourceRegistry, Reason: "policy"})
	}
	src.SetHandlers(hs...)
	_, sock := clientTestServer(t, src)
	out, _, err := runClient(t.Context(), "status", "--admin-socket", sock)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"handlers: 1 serving, 5 sources or files not serving\n", "problems: 5 handler sources or files not serving: "} {
		if !strings.Contains(out, s) {
			t.Errorf("status lacks %q:\n%s", s, out)
		}
	}
	if strings.Contains(out, "handlers: 6") {
		t.Errorf("status counts the refused sources as handlers:\n%s", out)
	}
}
