package handlercheck

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/harness"
	"github.com/wasmhost/wasmhost/internal/host"
	"github.com/wasmhost/wasmhost/internal/host/sandbox"
	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/registration/registrar"
	"github.com/wasmhost/wasmhost/internal/session"
)

// TestSpec is what handler test runs: the module file at Path, in the sandbox Sandbox (the
// daemon's, as daemon.SandboxConfig makes it from Config), called for the plugin the other
// fields describe as it would answer GetInfo, or for the plugin a session recorded.
type TestSpec struct {
	Path     string
	Config   config.Config
	Sandbox  host.Config
	CacheDir string // where compiled modules are kept

	// The plugin: its type ("" for the one the module declares), name, endpoint ("" for the
	// registration socket), registration socket ("" for <socketDir>/<name>-reg.sock) and
	// versions.
	PluginType, Name, Endpoint, Socket string
	Versions                           []string
	// Grants are capabilities given to the plugin type beside the config's.
	Grants []string
	// Caller answers plugin_call in place of the plugin (a fixture named CallerName); nil:
	// plugin_call reaches the endpoint, where the daemon would let it.
	Caller     sandbox.PluginCaller
	CallerName string
	// ExpectReject: the test passes when validate refuses the plugin.
	ExpectReject bool

	// Session, when set, is replayed instead (it was read from SessionName): the plugin, the
	// store and the plugin_calls' answers come from it, matched by ReplayMode.
	Session     *session.Session
	SessionName string
	ReplayMode  harness.ReplayMode

	// Record names the session file to write what the calls did to; "" for none.
	Record string
}

// TestReport is the result of a handler test, as -o json and -o yaml print it.
type TestReport struct {
	File       string   `json:"file"`
	Size       int64    `json:"size"`
	SHA256     string   `json:"sha256"`
	ABIVersion uint32   `json:"abiVersion"`
	Manifest   Manifest `json:"manifest"`
	Plugin     Plugin   `json:"plugin"`
	Sandbox    Sandbox  `json:"sandbox"`
	Load       Load     `json:"load"`
	Calls      []Step   `json:"calls"`
	Replay     *Replay  `json:"replay,omitempty"`
	Passed     bool     `json:"passed"`
	Failure    string   `json:"failure,omitempty"`
}

// Step is what one call did (a harness.Step).
type Step struct {
	Op          harness.Op        `json:"op"`
	Outcome     harness.Outcome   `json:"result"`
	Reason      string            `json:"reason,omitempty"`
	Trapped     bool              `json:"trapped,omitempty"`
	TimedOut    bool              `json:"timedOut,omitempty"`
	Published   map[string]string `json:"published,omitempty"`
	Store       map[string][]byte `json:"store"` // values in base64
	Logs        []harness.LogLine `json:"logs"`
	PluginCalls []PluginCall      `json:"pluginCalls,omitempty"`
	Duration    time.Duration     `json:"durationNanoseconds"`
	// Departures are where the call departed from the session it replays.
	Departures []string `json:"departures,omitempty"`
}

// Replay says what a handler test replayed.
type Replay struct {
	Session    string `json:"session"`
	Match      string `json:"match"`
	Departures int    `json:"departures"`
}

// PluginCall is one plugin_call a handler made (a harness.PluginCall).
type PluginCall struct {
	Endpoint      string `json:"endpoint"`
	Method        string `json:"method"`
	RequestBytes  int    `json:"requestBytes"`
	ResponseBytes int    `json:"responseBytes"`
	Error         string `json:"error,omitempty"`
}

func newStep(st harness.Step) Step {
	v := Step{Op: st.Op, Outcome: st.Outcome, Reason: st.Reason, Trapped: st.Trapped, TimedOut: st.TimedOut,
		Published: st.Published, Store: st.Store, Logs: st.Logs, Duration: st.Duration}
	for _, pc := range st.PluginCalls {
		v.PluginCalls = append(v.PluginCalls, PluginCall(pc))
	}
	return v
}

// Plugin is a registration.PluginInfo with the protocol's field names.
type Plugin struct {
	Socket   string   `json:"socket"`
	Type     string   `json:"type"`
	Name     string   `json:"name"`
	Endpoint string   `json:"endpoint"`
	Versions []string `json:"supportedVersions"`
}

// Sandbox is what the calls ran with: the deadline, the memory limit, the plugin type's grants
// and what answered plugin_call instead of the plugin, if anything.
type Sandbox struct {
	Timeout     string   `json:"timeout"`
	MemoryLimit string   `json:"memoryLimit"`
	Grants      []string `json:"grants"`
	CallFixture string   `json:"callFixture,omitempty"`
}

// Load is how loading the module went.
type Load struct {
	Result   string            `json:"result"` // ok or error
	Error    string            `json:"error,omitempty"`
	Hints    []string          `json:"hints,omitempty"`
	Duration time.Duration     `json:"durationNanoseconds"`
	Logs     []harness.LogLine `json:"logs"`
}

// Test loads the module as the daemon would and makes the daemon's calls for the plugin:
// validate, register if validate accepted it, deregister if register succeeded (or the calls a
// session recorded). The report says what each did and, in Failure, why the test failed ("" if
// it passed); a module that does not load is a report too. Its error, with no report, is for
// what stops the test before a call could be made (a *NotLoadable among them); with a report,
// the error of writing Record.
func Test(ctx context.Context, spec TestSpec) (*TestReport, error) {
	bin, err := ReadModule(spec.Path)
	if err != nil {
		return nil, err
	}
	v := &TestReport{File: spec.Path, Calls: []Step{}}
	d, err := describe(ctx, spec, bin, v)
	if err != nil {
		return nil, err
	}
	typ, typeErr := d.typ, d.typeErr
	var p registration.PluginInfo
	if typeErr == nil {
		if p, err = plugin(spec, typ); err != nil {
			return nil, err
		}
	}
	v.Plugin = Plugin{Socket: p.Socket, Type: p.Type, Name: p.Name, Endpoint: p.Endpoint, Versions: p.Versions}
	if v.Plugin.Versions == nil {
		v.Plugin.Versions = []string{}
	}
	hs, err := harness.New(ctx, hostConfig(spec, typ, v))
	if err != nil {
		return nil, err
	}
	defer hs.Close(context.WithoutCancel(ctx))

	start := time.Now()
	m, logs, err := hs.Load(ctx, spec.Path)
	// The host's own account of a load is the report's header; keep the module's lines and
	// the host's warnings.
	logs = slices.DeleteFunc(logs, func(l harness.LogLine) bool {
		return l.Source == "host" && (l.Level == "INFO" || l.Level == "DEBUG")
	})
	v.Load = Load{Result: "ok", Duration: time.Since(start), Logs: logs}
	if err != nil {
		v.Load.Result, v.Load.Error = "error", err.Error()
		v.Load.Hints = LoadHints(err, spec.Path, d.types, d.caps)
		if errors.Is(err, sandbox.ErrNotGranted) {
			v.Load.Hints = append([]string{"here, grant it with --grant " + strings.Join(d.caps, " --grant ")}, v.Load.Hints...)
		}
		v.Failure = "the module did not load: " + err.Error()
		return v, nil
	}
	defer m.Close(context.WithoutCancel(ctx))
	if typeErr != nil {
		return nil, typeErr
	}
	steps := call(ctx, spec, hs, m, p, v)
	v.Passed = v.Failure == ""
	// A run that did not do what was expected is recorded too: it may be what to replay.
	if spec.Record != "" && len(steps) > 0 {
		return v, session.Save(spec.Record, harness.NewSession(p, steps))
	}
	return v, nil
}

// described is what describe found: the plugin types the module declares, the capabilities
// its imports ask for, and the plugin type the calls are for. typeErr says that the type is
// needed but cannot be taken from the manifest of a module that does not instantiate: its load
// error, with its hint, comes first, as --type would not help.
type described struct {
	types, caps []string
	typ         string
	typeErr     error
}

// describe fills v with what the module is, from a first host without grants, and takes the
// plugin type from its manifest when none is given.
func describe(ctx context.Context, spec TestSpec, bin []byte, v *TestReport) (described, error) {
	var d described
	sb := spec.Sandbox
	probe, err := harness.New(ctx, host.Config{CacheDir: spec.CacheDir, CallTimeout: sb.CallTimeout, MemoryLimit: sb.MemoryLimit, Limits: sb.Limits})
	if err != nil {
		return d, err
	}
	rep, err := probe.Host().Inspect(ctx, spec.Path, bin)
	_ = probe.Close(ctx)
	if err != nil {
		return d, notWasm(spec.Path, bin, err)
	}
	v.Size, v.SHA256, v.ABIVersion = rep.Size, rep.SHA256, rep.ABIVersion
	v.Manifest = newManifest(rep.Manifest)
	d.types, d.caps = rep.Manifest.PluginTypes, rep.Capabilities
	for _, e := range rep.Exports {
		if e.Name == abi.ExportCommandStart {
			// No call can be made: say why as the daemon would, with how to build it.
			return d, &NotLoadable{Path: spec.Path, Why: strings.TrimPrefix(rep.DescribeError, "not instantiated: ")}
		}
	}
	d.typ = spec.PluginType
	if spec.Session != nil {
		d.typ = spec.Session.Plugin.Type
	}
	if d.typ != "" {
		return d, nil
	}
	if len(d.types) == 1 {
		d.typ = d.types[0]
		return d, nil
	}
	why := rep.DescribeError
	if why == "" {
		why = fmt.Sprintf("it declares %q", d.types)
	}
	d.typeErr = fmt.Errorf("--type is needed: the module's plugin type cannot be taken from its manifest (%s)", why)
	if rep.DescribeError == "" {
		return d, d.typeErr
	}
	return d, nil
}

// plugin is the plugin the calls are for, checked as the daemon checks a GetInfo answer.
func plugin(spec TestSpec, typ string) (registration.PluginInfo, error) {
	socket := spec.Socket
	if socket == "" {
		socket = filepath.Join(spec.Config.SocketDir, spec.Name+"-reg.sock")
	}
	info := registration.PluginInfo{Type: typ, Name: spec.Name, Endpoint: spec.Endpoint, Versions: spec.Versions}
	if spec.Session != nil {
		info = harness.PluginInfo(spec.Session)
		socket = info.Socket
	}
	p, err := registration.ValidateInfo(socket, info)
	if err != nil {
		return p, fmt.Errorf("the daemon would refuse this plugin before any handler: %w", err)
	}
	return p, nil
}

// hostConfig is the harness's host: the daemon's sandbox with the plugin type's grants (the
// config's and the spec's) and what answers plugin_call; it fills v's Sandbox and Replay.
func hostConfig(spec TestSpec, typ string, v *TestReport) host.Config {
	cfg, sb := spec.Config, spec.Sandbox
	grants := cfg.Grants()
	for _, g := range spec.Grants {
		if !slices.Contains(grants[typ], g) {
			grants[typ] = append(grants[typ], g)
		}
	}
	v.Sandbox = Sandbox{Timeout: cfg.Handlers.CallTimeout.String(), MemoryLimit: cfg.Handlers.MemoryLimit.String(), Grants: grants[typ]}
	if v.Sandbox.Grants == nil {
		v.Sandbox.Grants = []string{}
	}
	var caller sandbox.PluginCaller = registrar.PluginCaller{}
	policy := sb.PluginCallPolicy // where the daemon lets plugin_call dial
	if spec.Caller != nil {
		caller = spec.Caller
		v.Sandbox.CallFixture = spec.CallerName
		policy = nil // the fixture stands in for the plugin: no endpoint is dialled
	}
	if spec.Session != nil {
		v.Sandbox.CallFixture = spec.SessionName
		policy = nil // the session stands in for the plugin
		v.Replay = &Replay{Session: spec.SessionName, Match: string(spec.ReplayMode)}
	}
	sb.Grants, sb.PluginCaller, sb.PluginCallPolicy, sb.CacheDir = grants, caller, policy, spec.CacheDir
	return sb
}

// call makes the calls on the loaded module m, as the daemon would (no register after a
// refusal, no deregister after a failed register), or those of the session, and fills v's
// Calls, Replay and Failure; it returns the steps, to record.
func call(ctx context.Context, spec TestSpec, hs *harness.Harness, m *sandbox.Module, p registration.PluginInfo, v *TestReport) []harness.Step {
	var steps []harness.Step
	if spec.Session != nil {
		for _, rs := range hs.Replay(ctx, m, spec.Session, spec.ReplayMode) {
			steps = append(steps, rs.Step)
			sv := newStep(rs.Step)
			sv.Departures = rs.Departures
			v.Calls = append(v.Calls, sv)
			v.Replay.Departures += len(rs.Departures)
		}
		if n := v.Replay.Departures; n > 0 {
			v.Failure = fmt.Sprintf("%d departures from the session %s", n, spec.SessionName)
		}
		return steps
	}
	for _, op := range []harness.Op{harness.Validate, harness.Register, harness.Deregister} {
		st := hs.Do(ctx, m, op, p)
		steps = append(steps, st)
		v.Calls = append(v.Calls, newStep(st))
		if op == harness.Validate && spec.ExpectReject {
			if st.Outcome != harness.Rejected {
				v.Failure = fmt.Sprintf("validate: %s, want rejected (--expect-reject)", st.Outcome)
				if st.Outcome == harness.OK {
					v.Failure = "validate accepted the plugin, want it rejected (--expect-reject)"
				}
			}
			break
		}
		if st.Outcome != harness.OK {
			if st.Outcome == harness.Rejected {
				v.Failure = string(op) + " rejected the plugin"
			} else {
				v.Failure = string(op) + " failed"
			}
			break
		}
	}
	return steps
}
