package main

// The handler commands: test and inspect a handler module (.wasm) on its own, in the sandbox the
// daemon would run it in, before it goes into a handler directory.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/conformance"
	"github.com/wasmhost/wasmhost/internal/adminview"
	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/daemon"
	"github.com/wasmhost/wasmhost/internal/handlercheck"
	"github.com/wasmhost/wasmhost/internal/harness"
	"github.com/wasmhost/wasmhost/internal/session"
)

// errHandlerFailed is the error of a handler test whose calls did not do what was expected,
// or of an inspection that finds the daemon would refuse the module; what went wrong was
// printed already.
var errHandlerFailed = errors.New("handler")

func newHandlerCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "handler",
		Short: "Test, inspect, push or pull a handler module (.wasm)",
		Long: `Work with a handler module on its own, without a daemon: run its calls for a plugin
you describe (test), or see what it is and whether the daemon would load it (inspect).
Both run it in the sandbox the daemon uses, with the same limits and grants.

Ship it through an OCI registry (push, signed as cosign signs), and fetch what a node
would get with handlers.sources (pull, verified against your public keys).`,
	}
	cmd.AddCommand(newHandlerTestCmd(), newHandlerInspectCmd(), newHandlerConformanceCmd(), newHandlerDiffCmd(), newHandlerBenchCmd(), newHandlerPushCmd(), newHandlerPullCmd())
	return cmd
}

// sandboxOpts are the flags that set up the sandbox, over the daemon's config.
type sandboxOpts struct {
	configFile    string
	timeout       config.Duration
	memoryLimit   config.ByteSize
	allowInsecure bool
	cacheDir      string
	output        string
}

func (o *sandboxOpts) bind(cmd *cobra.Command, withLimits bool) {
	f := cmd.Flags()
	f.StringVar(&o.configFile, "config", "", "the daemon's config file: its grants (handlers.types) and limits apply")
	if withLimits {
		def := config.Default()
		o.timeout, o.memoryLimit = def.Handlers.CallTimeout, def.Handlers.MemoryLimit
		f.Var(&o.timeout, "timeout", "deadline of every handler call (handlers.callTimeout)")
		f.Var(&o.memoryLimit, "memory-limit", "memory ceiling of the handler's instance, e.g. 64Mi (handlers.memoryLimit)")
	}
	f.BoolVar(&o.allowInsecure, "allow-insecure", false, "load a module file that others than its owner may write (handlers.allowInsecure)")
	f.StringVar(&o.cacheDir, "cache-dir", "", "keep compiled modules in this directory (mode 0700) between runs (default: a temporary one)")
	bindOutput(cmd, &o.output, "text", "json", "yaml")
}

// config returns the daemon's config as the command sees it: the defaults, the --config file,
// then the flags that were set.
func (o *sandboxOpts) config(cmd *cobra.Command) (config.Config, error) {
	cfg := config.Default()
	if o.configFile != "" {
		warnings, err := config.Check(o.configFile, &cfg)
		for _, w := range warnings {
			fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s: %s\n", o.configFile, w)
		}
		if err != nil {
			return cfg, err
		}
	}
	f := cmd.Flags()
	if f.Changed("timeout") {
		if o.timeout <= 0 {
			return cfg, fmt.Errorf("--timeout %s: must be positive (handlers.callTimeout in the daemon's config)", o.timeout)
		}
		cfg.Handlers.CallTimeout = o.timeout
	}
	if f.Changed("memory-limit") {
		if o.memoryLimit < 64<<10 || o.memoryLimit > 4<<30 {
			return cfg, fmt.Errorf("--memory-limit %s: must be between 64Ki and 4Gi (handlers.memoryLimit in the daemon's config)", o.memoryLimit)
		}
		cfg.Handlers.MemoryLimit = o.memoryLimit
	}
	if f.Changed("allow-insecure") {
		cfg.Handlers.AllowInsecure = o.allowInsecure
	}
	return cfg, nil
}

// withCacheDir calls fn with --cache-dir, or with a temporary directory it removes after.
func (o *sandboxOpts) withCacheDir(fn func(dir string) error) error {
	if o.cacheDir != "" {
		return fn(o.cacheDir)
	}
	dir, err := os.MkdirTemp("", "wasmhost-handler-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	return fn(dir)
}

// ---- handler test ----

type handlerTestOpts struct {
	sandboxOpts
	pluginType   string
	name         string
	endpoint     string
	socket       string
	versions     []string
	grants       []string
	fixture      string
	expectReject bool
	replay       string // a session file to replay (--replay)
	replayMode   string // request or order
	record       string // the session file to write (--record)
}

func newHandlerTestCmd() *cobra.Command {
	var o handlerTestOpts
	cmd := &cobra.Command{
		Use:   "test FILE.wasm",
		Short: "Run a handler's validate, register and deregister for a plugin you describe",
		Long: `Load a handler module in the daemon's sandbox (the same memory limit, deadline, WASI and
grants) and make the calls the daemon makes for one plugin, described by the flags as the
plugin would answer GetInfo: validate, then register if validate accepted it, then
deregister if register succeeded. For each call it prints the result (ok, rejected with the
handler's reason, or error), the time it took, the handler's log lines, the plugin calls it
made, what register published, and what the handler's key-value store holds after it.

The plugin type defaults to the module's, when it declares one. The endpoint defaults to the
registration socket, as the daemon does. --grant gives the plugin type a capability, as
handlers.types.<T>.capabilities does in the daemon's config (--config reads that file).

plugin_call reaches the endpoint for real, unless --call-fixture answers it from a file:
a YAML (or JSON) map of full gRPC method names to a response (the encoded message in
base64) or an error (a gRPC code name and a message):

  /csi.v1.Node/NodeGetInfo:
    response: CgZub2RlLTEQEA==
  /csi.v1.Node/NodeGetCapabilities:
    error: {code: Unavailable, message: driver not ready}

A method that is not listed answers Unimplemented.

--replay SESSION runs the calls a session recorded (docs/sessions.md; wasmhost plugins
capture takes them from a node), for the plugin it recorded: before each call the plugin
type's store is the one the session saw, and plugin_call is answered from the session (by
method and request, or with --replay-match order strictly in the session's order; no plugin
is called). It lists where the module departs from the recording: a plugin_call the session
does not have (it fails) or one it has and the module did not make, another request, other
store reads or writes, another result, reason or published facts. --record SESSION writes
what this run did as a session.

Exit status: 0 when every call did what was expected (validate, register and deregister
accepted the plugin; with --expect-reject, validate refused it; with --replay, the module
did what the session recorded), 1 when the module did not
load, a call was refused or failed (an error, a trap, the deadline), or the flags are wrong.`,
		Example: `  wasmhost handler test handlers-wasm/example.wasm --name demo --versions v1
  wasmhost handler test handlers-wasm/csi.wasm --type CSIPlugin --name csi.example.com \
      --endpoint /var/lib/kubelet/plugins/csi.example.com/csi.sock --versions 1.0.0 \
      --grant plugin_call --call-fixture handlers-wasm/csi/testdata/nodegetinfo.yaml
  wasmhost handler test handlers-wasm/example.wasm --name old --versions v0 --expect-reject
  wasmhost handler test new-csi.wasm --grant plugin_call --replay sessions/CSIPlugin-csi.example.com.yaml
  wasmhost handler test my.wasm --name demo -o json | jq '.calls[] | {op, result, durationNanoseconds}'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := o.config(cmd)
			if err != nil {
				return err
			}
			for _, g := range o.grants {
				if _, ok := abi.CapabilityImports[g]; !ok {
					return fmt.Errorf("--grant %q: unknown capability (known: %s)", g, strings.Join(config.KnownCapabilities(), ", "))
				}
			}
			var fixture *conformance.Fixture
			if o.fixture != "" {
				if fixture, err = conformance.LoadFixture(o.fixture); err != nil {
					return err
				}
			}
			if o.name == "" {
				return errors.New("--name must not be empty")
			}
			var sess *session.Session
			if o.replay != "" {
				for _, f := range []string{"type", "name", "endpoint", "socket", "versions", "call-fixture", "expect-reject"} {
					if cmd.Flags().Changed(f) {
						return fmt.Errorf("--%s and --replay: the plugin, and what answers its plugin_calls, come from the session", f)
					}
				}
				if sess, err = session.LoadReplayable(o.replay); err != nil {
					return err
				}
			}
			if o.replayMode != string(harness.ByRequest) && o.replayMode != string(harness.InOrder) {
				return fmt.Errorf("--replay-match %q: want request or order", o.replayMode)
			}
			return o.withCacheDir(func(cacheDir string) error {
				return runHandlerTest(cmd.Context(), cmd.OutOrStdout(), args[0], &o, cfg, fixture, sess, cacheDir)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.pluginType, "type", "", "plugin type (default: the one the module declares)")
	f.StringVar(&o.name, "name", "demo", "plugin name")
	f.StringVar(&o.endpoint, "endpoint", "", "plugin endpoint (default: the registration socket)")
	f.StringVar(&o.socket, "socket", "", "registration socket path (default: <socketDir>/<name>-reg.sock)")
	f.StringSliceVar(&o.versions, "versions", nil, "supported versions, comma-separated")
	f.StringArrayVar(&o.grants, "grant", nil, "grant a capability to the plugin type, e.g. plugin_call (repeatable)")
	f.StringVar(&o.fixture, "call-fixture", "", "answer plugin_call from this YAML/JSON file instead of calling the endpoint")
	f.BoolVar(&o.expectReject, "expect-reject", false, "the plugin must be refused by validate (exit 0 if it is)")
	f.StringVar(&o.replay, "replay", "", "run the calls of this session file, answering plugin_call and the store from it (docs/sessions.md)")
	f.StringVar(&o.replayMode, "replay-match", string(harness.ByRequest), "how --replay matches plugin_calls: request (by method and request) or order (strictly in the session's order)")
	f.StringVar(&o.record, "record", "", "write what the calls did to this session file")
	o.bind(cmd, true)
	return cmd
}

func runHandlerTest(ctx context.Context, out io.Writer, path string, o *handlerTestOpts, cfg config.Config, fixture *conformance.Fixture, sess *session.Session, cacheDir string) error {
	spec := handlercheck.TestSpec{
		Path: path, Config: cfg, Sandbox: daemon.SandboxConfig(cfg), CacheDir: cacheDir,
		PluginType: o.pluginType, Name: o.name, Endpoint: o.endpoint, Socket: o.socket, Versions: o.versions,
		Grants: o.grants, ExpectReject: o.expectReject,
		Session: sess, SessionName: o.replay, ReplayMode: harness.ReplayMode(o.replayMode), Record: o.record,
	}
	if fixture != nil {
		spec.Caller, spec.CallerName = fixture, o.fixture
	}
	v, err := handlercheck.Test(ctx, spec)
	if v == nil {
		if nl := (*handlercheck.NotLoadable)(nil); errors.As(err, &nl) {
			return fmt.Errorf("%w %w", errHandlerFailed, err)
		}
		return err
	}
	perr := printHandlerTest(out, o.output, v)
	if err != nil { // writing --record failed: that comes after the report and what it says
		return errors.Join(perr, err)
	}
	return perr
}

func printHandlerTest(out io.Writer, format string, v *handlercheck.TestReport) error {
	if format != "text" {
		v.Passed = v.Failure == ""
		if err := writeStructured(out, format, v); err != nil {
			return err
		}
	} else {
		writeHandlerTest(out, v, adminview.UseColor(out))
	}
	if v.Failure != "" {
		return fmt.Errorf("%w test failed: %s", errHandlerFailed, v.Failure)
	}
	return nil
}

func writeHandlerTest(out io.Writer, v *handlercheck.TestReport, color bool) {
	name := v.Manifest.Name
	if name == "" {
		name = "(no name)"
	}
	if v.Manifest.Version != "" {
		name += " " + v.Manifest.Version
	}
	fmt.Fprintf(out, "handler   %s: %s, ABI v%d, %s, sha256 %s\n", v.File, name, v.ABIVersion, handlerBytes(v.Size), handlerShortSum(v.SHA256))
	if p := v.Plugin; p.Type != "" { // none when the module's type is unknown and it did not load
		fmt.Fprintf(out, "plugin    %s %q, versions %s\n", p.Type, p.Name, handlerQuoteList(p.Versions))
		fmt.Fprintf(out, "          socket   %s\n          endpoint %s\n", p.Socket, p.Endpoint)
	}
	sb := fmt.Sprintf("timeout %s, memory %s, grants %s", v.Sandbox.Timeout, v.Sandbox.MemoryLimit, handlerQuoteList(v.Sandbox.Grants))
	switch {
	case v.Sandbox.CallFixture != "":
		sb += ", plugin_call answered from " + v.Sandbox.CallFixture
	case slices.Contains(v.Sandbox.Grants, abi.CapabilityPluginCall):
		sb += ", plugin_call reaches the endpoint"
	}
	fmt.Fprintf(out, "sandbox   %s\n", sb)
	if v.Load.Result != "ok" {
		fmt.Fprintf(out, "load      %s  %s\n", adminview.Paint("error", adminview.Red, color), v.Load.Error)
		for _, h := range v.Load.Hints {
			fmt.Fprintf(out, "          hint: %s\n", h)
		}
		writeHandlerLogs(out, v.Load.Logs)
		fmt.Fprintf(out, "\n%s: %s\n", adminview.Paint("FAIL", adminview.Red, color), v.Failure)
		return
	}
	fmt.Fprintf(out, "load      ok  %s\n", handlerDuration(v.Load.Duration))
	writeHandlerLogs(out, v.Load.Logs)

	var prev map[string][]byte
	for _, st := range v.Calls {
		fmt.Fprintln(out)
		res := string(st.Outcome)
		switch st.Outcome {
		case harness.OK:
			res = adminview.Paint(res, adminview.Green, color)
		case harness.Rejected:
			res = adminview.Paint(res, adminview.Yellow, color)
		default:
			res = adminview.Paint(res, adminview.Red, color)
		}
		line := fmt.Sprintf("%-10s  %s  %s", st.Op, res, handlerDuration(st.Duration))
		if st.Reason != "" {
			line += "\n  reason    " + st.Reason
		}
		fmt.Fprintln(out, line)
		for _, pc := range st.PluginCalls {
			if pc.Error != "" {
				fmt.Fprintf(out, "  plugin_call %s on %s: %s\n", pc.Method, pc.Endpoint, pc.Error)
			} else {
				fmt.Fprintf(out, "  plugin_call %s on %s: %d bytes\n", pc.Method, pc.Endpoint, pc.ResponseBytes)
			}
		}
		writeHandlerLogs(out, st.Logs)
		for _, d := range st.Departures {
			fmt.Fprintf(out, "  %s %s\n", adminview.Paint("departs  ", adminview.Red, color), d)
		}
		if st.Op == harness.Register && st.Outcome == harness.OK {
			writeHandlerKV(out, "published", st.Published, func(s string) string { return s })
		}
		if prev != nil && maps.EqualFunc(prev, st.Store, func(a, b []byte) bool { return string(a) == string(b) }) && len(st.Store) > 0 {
			fmt.Fprintln(out, "  store     (unchanged)")
		} else {
			writeHandlerKV(out, "store", st.Store, func(b []byte) string { return strconv.Quote(string(b)) })
		}
		prev = st.Store
	}
	if n := len(v.Calls); v.Replay == nil && v.Failure != "" && n < 3 && !(n == 1 && v.Calls[0].Outcome == harness.OK) {
		fmt.Fprintf(out, "\n(not called: %s; the daemon stops at a refusal or a failure)\n",
			strings.Join([]string{"register", "deregister"}[n-1:], ", "))
	}
	fmt.Fprintln(out)
	switch {
	case v.Failure != "":
		fmt.Fprintf(out, "%s: %s\n", adminview.Paint("FAIL", adminview.Red, color), v.Failure)
	case v.Replay != nil:
		fmt.Fprintf(out, "%s: the module did what the session %s recorded\n", adminview.Paint("PASS", adminview.Green, color), v.Replay.Session)
	case len(v.Calls) == 1:
		fmt.Fprintf(out, "%s: validate refused the plugin, as expected\n", adminview.Paint("PASS", adminview.Green, color))
	default:
		fmt.Fprintf(out, "%s: validate, register and deregister accepted the plugin\n", adminview.Paint("PASS", adminview.Green, color))
	}
}

func writeHandlerLogs(out io.Writer, logs []harness.LogLine) {
	for _, l := range logs {
		fmt.Fprintf(out, "  log       %s\n", l)
	}
}

// writeHandlerKV writes a map as "  title     key = value" lines, sorted by key.
func writeHandlerKV[V any](out io.Writer, title string, m map[string]V, show func(V) string) {
	if len(m) == 0 {
		fmt.Fprintf(out, "  %-9s (empty)\n", title)
		return
	}
	tw := tabwriter.NewWriter(out, 0, 0, 1, ' ', 0)
	for i, k := range slices.Sorted(maps.Keys(m)) {
		label := ""
		if i == 0 {
			label = title
		}
		fmt.Fprintf(tw, "  %-9s %s\t= %s\n", label, k, show(m[k]))
	}
	tw.Flush()
}

func handlerQuoteList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

func handlerDuration(d time.Duration) time.Duration {
	if d >= time.Millisecond {
		return d.Round(100 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

func handlerBytes(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

func handlerShortSum(s string) string {
	if len(s) > 16 {
		return s[:16] + "…"
	}
	return s
}

// ---- handler inspect ----

func newHandlerInspectCmd() *cobra.Command {
	var o sandboxOpts
	cmd := &cobra.Command{
		Use:   "inspect FILE.wasm",
		Short: "Show what a handler module is, and whether this daemon would load it",
		Long: `Show a handler module's ABI version, the plugin types, name and version of its
manifest, the capabilities its imports ask for, every export and import with its
WebAssembly signature, its size and SHA-256; then load it as the daemon would, with the
grants and limits of --config (the defaults when not given), and say whether the daemon
would load it, and if not, exactly why.

Exit status: 0 when the daemon would load the module, 1 when it would not (the report is
printed all the same) or the file is not a WebAssembly module.`,
		Example: `  wasmhost handler inspect handlers-wasm/csi.wasm
  wasmhost handler inspect handlers-wasm/csi.wasm --config /etc/wasmhost/wasmhost.yaml
  wasmhost handler inspect my.wasm -o json | jq .imports
  wasmhost handler inspect my.wasm -o yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := o.config(cmd)
			if err != nil {
				return err
			}
			return o.withCacheDir(func(cacheDir string) error {
				return runHandlerInspect(cmd.Context(), cmd.OutOrStdout(), args[0], &o, cfg, cacheDir)
			})
		},
	}
	o.bind(cmd, false)
	return cmd
}

func runHandlerInspect(ctx context.Context, out io.Writer, path string, o *sandboxOpts, cfg config.Config, cacheDir string) error {
	v, err := handlercheck.Inspect(ctx, handlercheck.InspectSpec{
		Path: path, Config: cfg, Sandbox: daemon.SandboxConfig(cfg), CacheDir: cacheDir, ConfigFile: o.configFile,
	})
	if err != nil {
		return err
	}
	if o.output != "text" {
		if err := writeStructured(out, o.output, v); err != nil {
			return err
		}
	} else {
		writeInspect(out, v, adminview.UseColor(out))
	}
	if !v.Loads {
		return fmt.Errorf("%w %s would not load: %s", errHandlerFailed, path, v.LoadError)
	}
	return nil
}

func writeInspect(out io.Writer, v *handlercheck.InspectReport, color bool) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "file\t%s\n", v.File)
	if v.Size >= 1<<10 {
		fmt.Fprintf(tw, "size\t%s (%d bytes)\n", handlerBytes(v.Size), v.Size)
	} else {
		fmt.Fprintf(tw, "size\t%d bytes\n", v.Size)
	}
	fmt.Fprintf(tw, "sha256\t%s\n", v.SHA256)
	if v.DescribeError != "" {
		fmt.Fprintf(tw, "abi version\t(unknown: %s)\n", v.DescribeError)
	} else {
		fmt.Fprintf(tw, "abi version\t%d\n", v.ABIVersion)
		fmt.Fprintf(tw, "plugin types\t%s\n", strings.Join(v.Manifest.PluginTypes, ", "))
		fmt.Fprintf(tw, "name\t%s\n", handlerOrNone(v.Manifest.Name))
		fmt.Fprintf(tw, "version\t%s\n", handlerOrNone(v.Manifest.Version))
	}
	caps := "none"
	if len(v.Capabilities) > 0 {
		caps = strings.Join(v.Capabilities, ", ")
	}
	fmt.Fprintf(tw, "capabilities\t%s\n", caps)
	tw.Flush()

	fmt.Fprintf(out, "\nexports (%d)\n", len(v.Exports))
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	for _, e := range v.Exports {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", e.Name, e.Kind, e.Signature)
	}
	tw.Flush()
	fmt.Fprintf(out, "\nimports (%d)\n", len(v.Imports))
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	for _, imp := range v.Imports {
		sig := imp.Signature
		if imp.Capability != "" {
			sig += "  (needs " + imp.Capability + ")"
		}
		fmt.Fprintf(tw, "  %s.%s\t%s\t%s\n", imp.Module, imp.Name, imp.Kind, sig)
	}
	tw.Flush()

	fmt.Fprintf(out, "\nconfig    %s\n", v.Config)
	if v.Loads {
		fmt.Fprintf(out, "daemon    %s: this daemon would load it\n", adminview.Paint("ok", adminview.Green, color))
		return
	}
	fmt.Fprintf(out, "daemon    %s: %s\n", adminview.Paint("REFUSED", adminview.Red, color), v.LoadError)
	for _, h := range v.Hints {
		fmt.Fprintf(out, "          hint: %s\n", h)
	}
}

func handlerOrNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
