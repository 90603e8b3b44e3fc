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
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/conformance"
	"github.com/wasmhost/wasmhost/internal/adminview"
	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/daemon"
	"github.com/wasmhost/wasmhost/internal/harness"
	"github.com/wasmhost/wasmhost/internal/host"
	"github.com/wasmhost/wasmhost/internal/host/policy"
	"github.com/wasmhost/wasmhost/internal/host/sandbox"
	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/registration/registrar"
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

// readHandlerModule reads a module file for inspection, with the daemon's size limit in mind.
func readHandlerModule(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if fi.Size() > 64<<20 {
		return nil, fmt.Errorf("%s: %d bytes, over the daemon's limit of 64 MiB for a handler", path, fi.Size())
	}
	return os.ReadFile(path)
}

// notWasmHint says what a file that is not WebAssembly seems to be.
func notWasmHint(b []byte) string {
	switch {
	case len(b) == 0:
		return "the file is empty"
	case strings.HasPrefix(string(b), "\x7fELF"), strings.HasPrefix(string(b), "MZ"), strings.HasPrefix(string(b), "\xcf\xfa\xed\xfe"):
		return "it is a native executable: build the handler with GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared"
	case utf8.Valid(b) && strings.Contains(string(b), "(module"):
		return "it is WebAssembly text: assemble it first (wat2wasm)"
	case strings.HasPrefix(string(b), "\x00asm") && !strings.HasPrefix(string(b), "\x00asm\x01\x00\x00\x00"):
		return "it is WebAssembly of an unsupported binary version"
	}
	return ""
}

// loadHints says what to do about the daemon's refusal of a module.
func loadHints(err error, path string, types []string, caps []string) []string {
	var hints []string
	switch {
	case errors.Is(err, sandbox.ErrNotGranted):
		for _, t := range types {
			hints = append(hints, fmt.Sprintf("the operator grants it in the daemon's config: handlers.types.%s.capabilities: [%s]", t, strings.Join(caps, ", ")))
		}
	case errors.Is(err, sandbox.ErrInsecure):
		hints = append(hints, "make the file writable by its owner only (chmod go-w "+path+"), or pass --allow-insecure (the daemon: handlers.allowInsecure or --allow-insecure-handlers)")
	case strings.Contains(err.Error(), "memory minimum"):
		hints = append(hints, "raise handlers.memoryLimit, or make the module declare less memory")
	case slices.ContainsFunc(abi.RequiredExports, func(e string) bool { return strings.Contains(err.Error(), "missing export "+e) }):
		hints = append(hints, "is it a handler? Each SDK makes the ABI's exports: "+sdkExportHints())
	case strings.Contains(err.Error(), "imports unknown host function env.abort"), strings.Contains(err.Error(), "module[env] not instantiated"):
		hints = append(hints, asAbortHint)
	}
	return hints
}

// sdkExportHints says, for each SDK, what a module lacking the ABI's exports left out.
func sdkExportHints() string {
	return "Go: call guest.Handle in init, build with GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared; " +
		"C: define wh_handler_def and compile abi/c/wasmhost.c into the module (clang ... handler.c wasmhost.c); " +
		"Rust: wasmhost::export!(YourHandler, Manifest { ... }), built as --crate-type cdylib (abi/rust/build does both); " +
		"AssemblyScript: re-export them from the entry file (export { " + strings.Join(abi.RequiredExports, ", ") + " } from \"wasmhost\")"
}

// asAbortHint is the hint for an AssemblyScript module built without --use abort=: it imports
// env.abort, which wazero reports as "module[env] not instantiated" when it instantiates it.
const asAbortHint = "an AssemblyScript build imports env.abort unless told not to: build with asc ... --use abort= " +
	"(the daemon provides only its own functions and WASI's; an abort then traps)"

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

// handlerTestView is the result of a handler test, as -o json and -o yaml print it (keys in
// camelCase, as every view: output.go).
type handlerTestView struct {
	File       string         `json:"file"`
	Size       int64          `json:"size"`
	SHA256     string         `json:"sha256"`
	ABIVersion uint32         `json:"abiVersion"`
	Manifest   manifestView   `json:"manifest"`
	Plugin     pluginInfoView `json:"plugin"`
	Sandbox    sandboxView    `json:"sandbox"`
	Load       loadView       `json:"load"`
	Calls      []stepView     `json:"calls"`
	Replay     *replayView    `json:"replay,omitempty"`
	Passed     bool           `json:"passed"`
	Failure    string         `json:"failure,omitempty"`
}

// stepView is what one call did (a harness.Step).
type stepView struct {
	Op          harness.Op        `json:"op"`
	Outcome     harness.Outcome   `json:"result"`
	Reason      string            `json:"reason,omitempty"`
	Trapped     bool              `json:"trapped,omitempty"`
	TimedOut    bool              `json:"timedOut,omitempty"`
	Published   map[string]string `json:"published,omitempty"`
	Store       map[string][]byte `json:"store"` // values in base64
	Logs        []harness.LogLine `json:"logs"`
	PluginCalls []pluginCallView  `json:"pluginCalls,omitempty"`
	Duration    time.Duration     `json:"durationNanoseconds"`
	// Departures are where the call departed from the session it replays (--replay).
	Departures []string `json:"departures,omitempty"`
}

// replayView says what a handler test replayed.
type replayView struct {
	Session    string `json:"session"`
	Match      string `json:"match"`
	Departures int    `json:"departures"`
}

// pluginCallView is one plugin_call a handler made (a harness.PluginCall).
type pluginCallView struct {
	Endpoint      string `json:"endpoint"`
	Method        string `json:"method"`
	RequestBytes  int    `json:"requestBytes"`
	ResponseBytes int    `json:"responseBytes"`
	Error         string `json:"error,omitempty"`
}

func newStepView(st harness.Step) stepView {
	v := stepView{Op: st.Op, Outcome: st.Outcome, Reason: st.Reason, Trapped: st.Trapped, TimedOut: st.TimedOut,
		Published: st.Published, Store: st.Store, Logs: st.Logs, Duration: st.Duration}
	for _, pc := range st.PluginCalls {
		v.PluginCalls = append(v.PluginCalls, pluginCallView(pc))
	}
	return v
}

// pluginInfoView is a registration.PluginInfo with the protocol's field names.
type pluginInfoView struct {
	Socket   string   `json:"socket"`
	Type     string   `json:"type"`
	Name     string   `json:"name"`
	Endpoint string   `json:"endpoint"`
	Versions []string `json:"supportedVersions"`
}

type exportView struct {
	Name      string `json:"name"`
	Kind      string `json:"kind"`
	Signature string `json:"signature"`
}

type importView struct {
	Module     string `json:"module"`
	Name       string `json:"name"`
	Kind       string `json:"kind"`
	Signature  string `json:"signature,omitempty"`
	Capability string `json:"capability,omitempty"`
}

type manifestView struct {
	PluginTypes []string `json:"pluginTypes"`
	Name        string   `json:"name"`
	Version     string   `json:"version"`
}

type sandboxView struct {
	Timeout     string   `json:"timeout"`
	MemoryLimit string   `json:"memoryLimit"`
	Grants      []string `json:"grants"`
	CallFixture string   `json:"callFixture,omitempty"`
}

type loadView struct {
	Result   string            `json:"result"` // ok or error
	Error    string            `json:"error,omitempty"`
	Hints    []string          `json:"hints,omitempty"`
	Duration time.Duration     `json:"durationNanoseconds"`
	Logs     []harness.LogLine `json:"logs"`
}

func runHandlerTest(ctx context.Context, out io.Writer, path string, o *handlerTestOpts, cfg config.Config, fixture *conformance.Fixture, sess *session.Session, cacheDir string) (err error) {
	bin, err := readHandlerModule(path)
	if err != nil {
		return err
	}
	v := handlerTestView{File: path, Calls: []stepView{}}

	// What the module is, to default the plugin type: a first host without grants.
	hcfg := daemon.SandboxConfig(cfg) // the daemon's sandbox; the flags' grants come below
	probe, err := harness.New(ctx, host.Config{CacheDir: cacheDir, CallTimeout: hcfg.CallTimeout, MemoryLimit: hcfg.MemoryLimit, Limits: hcfg.Limits})
	if err != nil {
		return err
	}
	rep, err := probe.Host().Inspect(ctx, path, bin)
	_ = probe.Close(ctx)
	if err != nil {
		if hint := notWasmHint(bin); hint != "" {
			return fmt.Errorf("%s is not a WebAssembly module: %s", path, hint)
		}
		return err
	}
	v.Size, v.SHA256, v.ABIVersion = rep.Size, rep.SHA256, rep.ABIVersion
	v.Manifest = newManifestView(rep.Manifest)
	if slices.ContainsFunc(rep.Exports, func(e sandbox.Export) bool { return e.Name == abi.ExportCommandStart }) {
		// No call can be made: say why as the daemon would, with how to build it.
		return fmt.Errorf("%w %s would not load: %s", errHandlerFailed, path, strings.TrimPrefix(rep.DescribeError, "not instantiated: "))
	}
	typ := o.pluginType
	if sess != nil {
		typ = sess.Plugin.Type
	}
	var typeErr error
	if typ == "" {
		if len(rep.Manifest.PluginTypes) != 1 {
			why := rep.DescribeError
			if why == "" {
				why = fmt.Sprintf("it declares %q", rep.Manifest.PluginTypes)
			}
			typeErr = fmt.Errorf("--type is needed: the module's plugin type cannot be taken from its manifest (%s)", why)
			if rep.DescribeError == "" {
				return typeErr
			}
			// It does not instantiate: its load error, with its hint, comes first, as --type
			// would not help.
		} else {
			typ = rep.Manifest.PluginTypes[0]
		}
	}

	socket := o.socket
	if socket == "" {
		socket = filepath.Join(cfg.SocketDir, o.name+"-reg.sock")
	}
	info := registration.PluginInfo{Type: typ, Name: o.name, Endpoint: o.endpoint, Versions: o.versions}
	if sess != nil {
		info = harness.PluginInfo(sess)
		socket = info.Socket
	}
	var p registration.PluginInfo
	if typeErr == nil {
		if p, err = registration.ValidateInfo(socket, info); err != nil {
			return fmt.Errorf("the daemon would refuse this plugin before any handler: %w", err)
		}
	}
	v.Plugin = pluginInfoView{Socket: p.Socket, Type: p.Type, Name: p.Name, Endpoint: p.Endpoint, Versions: p.Versions}
	if v.Plugin.Versions == nil {
		v.Plugin.Versions = []string{}
	}

	grants := cfg.Grants()
	for _, g := range o.grants {
		if !slices.Contains(grants[typ], g) {
			grants[typ] = append(grants[typ], g)
		}
	}
	v.Sandbox = sandboxView{Timeout: cfg.Handlers.CallTimeout.String(), MemoryLimit: cfg.Handlers.MemoryLimit.String(), Grants: grants[typ]}
	if v.Sandbox.Grants == nil {
		v.Sandbox.Grants = []string{}
	}
	var caller sandbox.PluginCaller = registrar.PluginCaller{}
	policy := hcfg.PluginCallPolicy // where the daemon lets plugin_call dial
	if fixture != nil {
		caller = fixture
		v.Sandbox.CallFixture = o.fixture
		policy = nil // the fixture stands in for the plugin: no endpoint is dialled
	}
	if sess != nil {
		v.Sandbox.CallFixture = o.replay
		policy = nil // the session stands in for the plugin
		v.Replay = &replayView{Session: o.replay, Match: o.replayMode}
	}
	hcfg.Grants, hcfg.PluginCaller, hcfg.PluginCallPolicy, hcfg.CacheDir = grants, caller, policy, cacheDir
	hs, err := harness.New(ctx, hcfg)
	if err != nil {
		return err
	}
	defer hs.Close(context.WithoutCancel(ctx))

	start := time.Now()
	m, logs, err := hs.Load(ctx, path)
	// The host's own account of a load is the report's header; keep the module's lines and
	// the host's warnings.
	logs = slices.DeleteFunc(logs, func(l harness.LogLine) bool {
		return l.Source == "host" && (l.Level == "INFO" || l.Level == "DEBUG")
	})
	v.Load = loadView{Result: "ok", Duration: time.Since(start), Logs: logs}
	if err != nil {
		v.Load.Result, v.Load.Error = "error", err.Error()
		v.Load.Hints = loadHints(err, path, rep.Manifest.PluginTypes, rep.Capabilities)
		if errors.Is(err, sandbox.ErrNotGranted) {
			v.Load.Hints = append([]string{"here, grant it with --grant " + strings.Join(rep.Capabilities, " --grant ")}, v.Load.Hints...)
		}
		v.Failure = "the module did not load: " + err.Error()
		return printHandlerTest(out, o.output, &v)
	}
	defer m.Close(context.WithoutCancel(ctx))
	if typeErr != nil {
		return typeErr
	}

	v.Passed = true
	var steps []harness.Step
	defer func() {
		// A run that did not do what was expected is recorded too: it may be what to replay.
		if o.record == "" || len(steps) == 0 {
			return
		}
		if serr := session.Save(o.record, harness.NewSession(p, steps)); serr != nil {
			err = errors.Join(err, serr)
		}
	}()
	if sess != nil {
		for _, rs := range hs.Replay(ctx, m, sess, harness.ReplayMode(o.replayMode)) {
			steps = append(steps, rs.Step)
			sv := newStepView(rs.Step)
			sv.Departures = rs.Departures
			v.Calls = append(v.Calls, sv)
			v.Replay.Departures += len(rs.Departures)
		}
		if n := v.Replay.Departures; n > 0 {
			v.Failure = fmt.Sprintf("%d departures from the session %s", n, o.replay)
		}
		return printHandlerTest(out, o.output, &v)
	}
	for _, op := range []harness.Op{harness.Validate, harness.Register, harness.Deregister} {
		st := hs.Do(ctx, m, op, p)
		steps = append(steps, st)
		v.Calls = append(v.Calls, newStepView(st))
		if op == harness.Validate && o.expectReject {
			if st.Outcome != harness.Rejected {
				v.Passed = false
				v.Failure = fmt.Sprintf("validate: %s, want rejected (--expect-reject)", st.Outcome)
				if st.Outcome == harness.OK {
					v.Failure = "validate accepted the plugin, want it rejected (--expect-reject)"
				}
			}
			break
		}
		if st.Outcome != harness.OK {
			v.Passed = false
			if st.Outcome == harness.Rejected {
				v.Failure = string(op) + " rejected the plugin"
			} else {
				v.Failure = string(op) + " failed"
			}
			break // as the daemon: no register after a refusal, no deregister after a failed register
		}
	}
	return printHandlerTest(out, o.output, &v)
}

func printHandlerTest(out io.Writer, format string, v *handlerTestView) error {
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

func writeHandlerTest(out io.Writer, v *handlerTestView, color bool) {
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

// inspectView is the report of handler inspect, as -o json and -o yaml print it.
type inspectView struct {
	File          string       `json:"file"`
	Size          int64        `json:"size"`
	SHA256        string       `json:"sha256"`
	ABIVersion    uint32       `json:"abiVersion"`
	Manifest      manifestView `json:"manifest"`
	DescribeError string       `json:"describeError,omitempty"`
	Capabilities  []string     `json:"capabilities"`
	Exports       []exportView `json:"exports"`
	Imports       []importView `json:"imports"`
	Config        string       `json:"config"`
	Loads         bool         `json:"loads"`
	LoadError     string       `json:"loadError,omitempty"`
	Hints         []string     `json:"hints,omitempty"`
}

func runHandlerInspect(ctx context.Context, out io.Writer, path string, o *sandboxOpts, cfg config.Config, cacheDir string) error {
	bin, err := readHandlerModule(path)
	if err != nil {
		return err
	}
	hcfg := daemon.SandboxConfig(cfg) // the daemon's sandbox
	hcfg.HandlerDir, hcfg.CacheDir, hcfg.PoolSize = filepath.Dir(path), cacheDir, 1
	hcfg.PluginCaller = registrar.PluginCaller{} // never called: nothing is registered
	h, err := host.New(ctx, hcfg)
	if err != nil {
		return err
	}
	defer h.Close(context.WithoutCancel(ctx))
	rep, err := h.Inspect(ctx, path, bin)
	if err != nil {
		if hint := notWasmHint(bin); hint != "" {
			return fmt.Errorf("%s is not a WebAssembly module: %s", path, hint)
		}
		return err
	}
	v := inspectView{
		File: path, Size: rep.Size, SHA256: rep.SHA256, ABIVersion: rep.ABIVersion,
		Manifest:      newManifestView(rep.Manifest),
		DescribeError: rep.DescribeError,
		Capabilities:  rep.Capabilities,
		Exports:       []exportView{},
		Imports:       []importView{},
		Config:        o.configFile,
	}
	for _, e := range rep.Exports {
		v.Exports = append(v.Exports, exportView(e))
	}
	for _, imp := range rep.Imports {
		v.Imports = append(v.Imports, importView(imp))
	}
	if v.Capabilities == nil {
		v.Capabilities = []string{}
	}
	if v.Config == "" {
		v.Config = "(defaults: no capability granted)"
	}
	m, err := h.LoadFile(ctx, path)
	if err == nil {
		v.Loads = true
		_ = m.Close(ctx)
		// A plugin type the config binds to another file or module (handlers.types.<T>.file,
		// .digest) would not be served by it, dropped into the handler directory.
		for _, t := range rep.Manifest.PluginTypes {
			tc := cfg.Handlers.Types[t]
			b := policy.Binding{Digest: tc.Digest}
			if tc.File != "" {
				b.File = filepath.Join(cfg.HandlerDir, tc.File)
			}
			if why := b.Refusal(t, filepath.Join(cfg.HandlerDir, filepath.Base(path)), rep.SHA256); why != "" {
				v.Loads, v.LoadError = false, why
				break
			}
		}
	} else {
		v.LoadError = err.Error()
		v.Hints = loadHints(err, path, rep.Manifest.PluginTypes, rep.Capabilities)
	}
	if o.output != "text" {
		if err := writeStructured(out, o.output, v); err != nil {
			return err
		}
	} else {
		writeInspect(out, &v, adminview.UseColor(out))
	}
	if !v.Loads {
		return fmt.Errorf("%w %s would not load: %s", errHandlerFailed, path, v.LoadError)
	}
	return nil
}

func writeInspect(out io.Writer, v *inspectView, color bool) {
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

// newManifestView is what a module declares of itself, shown as the daemon's views show it:
// names and versions are the guest's text, escaped (terminal escapes and all) by the one
// text policy.
func newManifestView(mf abi.Manifest) manifestView {
	types := make([]string, len(mf.PluginTypes))
	for i, t := range mf.PluginTypes {
		types[i] = safeText(t)
	}
	return manifestView{PluginTypes: types, Name: safeText(mf.Name), Version: safeText(mf.Version)}
}
