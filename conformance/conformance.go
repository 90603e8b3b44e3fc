package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/harness"
	"github.com/wasmhost/wasmhost/internal/host"
	"github.com/wasmhost/wasmhost/internal/host/inspect"
	"github.com/wasmhost/wasmhost/internal/host/sandbox"
	"github.com/wasmhost/wasmhost/internal/registration"
)

// Plugin is a plugin as it would answer the registration API's GetInfo, as the handler under
// test sees it in its calls.
type Plugin struct {
	// Type is the plugin type. Defaults to Options.PluginType.
	Type string
	// Name is the plugin's name (a CSI driver's name, for instance). Required.
	Name string
	// Endpoint is where the plugin serves its own API, for the handler's plugin calls.
	// Defaults to Socket, as the daemon does.
	Endpoint string
	// Versions are the versions the plugin supports (GetInfo's supported_versions). Defaults
	// to none.
	Versions []string
	// Socket is the registration socket the plugin was found at. Defaults to
	// /run/wasmhost-conformance/<name>-reg.sock.
	Socket string
}

// PluginCaller answers a handler's plugin calls (the plugin_call host function) in place of
// its plugin: a *Fixture (LoadFixture), or a fake of one's own.
type PluginCaller interface {
	// Call answers method (a full gRPC method name, "/package.Service/Method") called on the
	// plugin serving at endpoint with the encoded request req, with the encoded response. A
	// response longer than maxResp bytes is an error. ctx carries the handler call's deadline.
	Call(ctx context.Context, endpoint, method string, req []byte, maxResp int) ([]byte, error)
}

// Options says what the module under test must do. Only Valid is required.
type Options struct {
	// PluginType is the plugin type under test; the manifest must declare it. Defaults to the
	// manifest's plugin type when it declares only one.
	PluginType string
	// Valid is a plugin the handler must accept, as it would answer GetInfo. Type defaults to
	// PluginType, Socket to /run/wasmhost-conformance/<name>-reg.sock, Endpoint to the socket
	// (as the daemon does). Required: a Name.
	Valid Plugin
	// Invalid are plugins the handler must refuse in Validate, with the same defaults. Each
	// must be one the daemon itself would take from GetInfo (a name; type, endpoint and
	// versions within the protocol's limits, UTF-8 without control characters), so that it
	// reaches the handler. Defaults to none.
	Invalid []Plugin
	// Grants are the capabilities granted per plugin type, as the daemon's
	// handlers.types.<T>.capabilities: {"CSIPlugin": {"plugin_call"}}. Defaults to none.
	Grants map[string][]string
	// Fixture answers the handler's plugin calls: a *Fixture (LoadFixture) or any
	// PluginCaller. Defaults to nil: every plugin call fails.
	Fixture PluginCaller
	// Timeout is the deadline of each call, as the daemon's handlers.callTimeout; every call
	// must finish within a quarter of it. Defaults to the daemon's default, 5s.
	Timeout time.Duration
	// MemoryLimit caps each instance's memory, in bytes, as handlers.memoryLimit. Defaults to
	// the daemon's default, 64 MiB.
	MemoryLimit int64
	// CacheDir keeps compiled modules between runs, in a directory created 0700 if need be;
	// share one per test binary (compiling a Go module takes seconds, and many more under
	// -race). Defaults to "": compiled in memory, every time.
	CacheDir string
	// KeepsState says the handler keeps keys in the store after Deregister on purpose: the
	// deregister check then does not ask for the store to be as before Register. Defaults to
	// false.
	KeepsState bool
}

// Result is the outcome of one check.
type Result struct {
	Name    string   // e.g. "register-again"
	Problem string   // what is wrong; "" when the check passed
	Notes   []string // what was seen, and advice that does not fail the check
	Skipped bool     // the check could not run (an earlier one failed)
}

// Run runs Check and reports each result as a subtest of t. A module that cannot be checked
// at all (no such file) fails t.
func Run(t *testing.T, wasmPath string, opts Options) {
	t.Helper()
	ctx := t.Context()
	results, err := Check(ctx, wasmPath, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		t.Run(r.Name, func(t *testing.T) {
			for _, n := range r.Notes {
				t.Log(n)
			}
			switch {
			case r.Skipped:
				t.Skip(r.Problem)
			case r.Problem != "":
				t.Error(r.Problem)
			}
		})
	}
}

// ErrOptions: the Options are not usable.
var ErrOptions = errors.New("conformance: bad options")

// unknownName is the name of the plugin of the deregister-unknown check.
const unknownName = "wasmhost-conformance-never-registered"

// Check runs the checks of the package documentation on the module at wasmPath and returns a
// result for each, in order. The error is for what prevents checking at all: a file that
// cannot be read, or unusable Options.
func Check(ctx context.Context, wasmPath string, opts Options) ([]Result, error) {
	if opts.Valid.Name == "" {
		return nil, fmt.Errorf("%w: Valid needs a Name", ErrOptions)
	}
	bin, err := os.ReadFile(wasmPath)
	if err != nil {
		return nil, fmt.Errorf("conformance: %w", err)
	}
	var caller sandbox.PluginCaller // nil, not a nil PluginCaller in a sandbox.PluginCaller
	if opts.Fixture != nil {
		caller = opts.Fixture
	}
	hs, err := harness.New(ctx, host.Config{
		Grants:        opts.Grants,
		PluginCaller:  caller,
		CallTimeout:   opts.Timeout,
		MemoryLimit:   opts.MemoryLimit,
		CacheDir:      opts.CacheDir,
		AllowInsecure: true, // file permissions are the operator's business, not the handler's
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrOptions, err)
	}
	defer hs.Close(context.WithoutCancel(ctx))
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = sandbox.DefaultCallTimeout
	}
	c := &checker{hs: hs, opts: opts, path: wasmPath, timeout: timeout}
	if err := c.run(ctx, bin); err != nil {
		return nil, err
	}
	return c.results, nil
}

type checker struct {
	hs      *harness.Harness
	opts    Options
	path    string
	timeout time.Duration
	results []Result
	steps   []harness.Step // every call made, for the deadline and trap checks
	typ     string         // the plugin type under test
}

func (c *checker) add(name, problem string, notes ...string) {
	c.results = append(c.results, Result{Name: name, Problem: problem, Notes: notes})
}

func (c *checker) skip(because string, names ...string) {
	for _, n := range names {
		c.results = append(c.results, Result{Name: n, Problem: "skipped: " + because, Skipped: true})
	}
}

// The dynamic checks, skipped when the module does not load.
var dynamicChecks = []string{"validate", "register", "register-again", "deregister", "deregister-unknown"}

func (c *checker) run(ctx context.Context, bin []byte) error {
	rep, err := c.hs.Host().Inspect(ctx, c.path, bin)
	if err != nil {
		c.add("module", err.Error())
		c.skip("the module is not WebAssembly", append([]string{"exports", "imports", "abi-version", "manifest", "grants", "load"}, dynamicChecks...)...)
		return nil
	}
	c.add("module", "", fmt.Sprintf("%s: %d bytes, sha256 %s", c.path, rep.Size, rep.SHA256))
	c.add("exports", checkExports(rep))
	c.add("imports", checkImports(rep))

	if rep.DescribeError != "" {
		c.add("abi-version", "the module's ABI version and manifest could not be read: "+rep.DescribeError)
		c.skip("no manifest", "manifest", "grants")
	} else {
		problem := ""
		if !slices.Contains(abi.SupportedVersions, rep.ABIVersion) {
			problem = fmt.Sprintf("%s returned %d; this host supports %v", abi.ExportABIVersion, rep.ABIVersion, abi.SupportedVersions)
		}
		c.add("abi-version", problem, fmt.Sprintf("ABI version %d", rep.ABIVersion))
		c.checkManifest(rep.Manifest)
		c.checkGrants(rep)
	}
	if c.typ == "" {
		c.typ = c.opts.PluginType
	}

	if c.typ == "" {
		c.add("load", "", "not loaded: no plugin type to test")
		c.skip("no plugin type to test", dynamicChecks...)
		c.checkSteps()
		return nil
	}
	valid, err := c.plugin(c.opts.Valid)
	if err != nil {
		return fmt.Errorf("%w: Valid: %v", ErrOptions, err)
	}
	invalid := make([]registration.PluginInfo, len(c.opts.Invalid))
	for i, p := range c.opts.Invalid {
		if invalid[i], err = c.plugin(p); err != nil {
			return fmt.Errorf("%w: Invalid[%d]: %v", ErrOptions, i, err)
		}
	}

	m, logs, err := c.hs.Load(ctx, c.path)
	if err != nil {
		c.add("load", err.Error(), logNotes(logs)...)
		c.skip("the module does not load", dynamicChecks...)
		for _, p := range invalid {
			c.skip("the module does not load", "reject/"+p.Name)
		}
		return nil
	}
	c.add("load", "", fmt.Sprintf("loaded: plugin types %q, capabilities %q", m.PluginTypes(), m.Capabilities()))

	before := c.hs.Host().Store(c.typ)
	c.dynamic(ctx, m, valid, before)
	_ = m.Close(ctx)

	for _, p := range invalid {
		c.reject(ctx, p)
	}
	c.checkSteps()
	return nil
}

// plugin fills in the defaults of a plugin of Options and checks it as the daemon would.
func (c *checker) plugin(p Plugin) (registration.PluginInfo, error) {
	info := registration.PluginInfo{Socket: p.Socket, Type: p.Type, Name: p.Name, Endpoint: p.Endpoint, Versions: p.Versions}
	if info.Type == "" {
		info.Type = c.typ
	}
	socket := info.Socket
	if socket == "" {
		socket = "/run/wasmhost-conformance/" + info.Name + "-reg.sock"
	}
	return registration.ValidateInfo(socket, info)
}

func checkExports(rep *inspect.Report) string {
	var problems []string
	have := map[string]inspect.Export{}
	for _, e := range rep.Exports {
		have[e.Name] = e
	}
	if e, ok := have[abi.ExportMemory]; !ok || e.Kind != "memory" {
		problems = append(problems, "no memory exported as "+abi.ExportMemory)
	}
	for _, name := range slices.Sorted(maps.Keys(abi.ExportSignatures)) {
		want := sigString(abi.ExportSignatures[name])
		e, ok := have[name]
		switch {
		case !ok && slices.Contains(abi.RequiredExports, name):
			problems = append(problems, "missing export "+name+" "+want)
		case ok && (e.Kind != "function" || e.Signature != want):
			problems = append(problems, "export "+name+" is "+e.Kind+" "+e.Signature+", want function "+want)
		}
	}
	return strings.Join(problems, "; ")
}

func checkImports(rep *inspect.Report) string {
	var problems []string
	for _, imp := range rep.Imports {
		what := imp.Module + "." + imp.Name
		switch {
		case imp.Kind != "function":
			problems = append(problems, "imports "+imp.Kind+" "+what+": a handler may import only host functions (and must export its memory)")
		case imp.Module == abi.ImportModule:
			sig, ok := abi.ImportSignatures[imp.Name]
			if !ok {
				problems = append(problems, "imports "+what+", which is not a host function of the ABI")
			} else if want := sigString(sig); imp.Signature != want {
				problems = append(problems, "imports "+what+" with signature "+imp.Signature+", want "+want)
			}
		case imp.Module == "wasi_snapshot_preview1":
		default:
			problems = append(problems, "imports "+what+": only "+abi.ImportModule+" and wasi_snapshot_preview1 functions are provided")
		}
	}
	return strings.Join(problems, "; ")
}

// sigString writes a signature as inspect.Report does.
func sigString(s abi.Signature) string {
	names := func(ts []abi.ValueType) string {
		out := make([]string, len(ts))
		for i := range ts {
			out[i] = "i32" // the only value type of ABI v1
		}
		return "(" + strings.Join(out, ", ") + ")"
	}
	return names(s.Params) + " -> " + names(s.Results)
}

func (c *checker) checkManifest(mf abi.Manifest) {
	notes := []string{fmt.Sprintf("manifest: plugin types %q, name %q, version %q", mf.PluginTypes, mf.Name, mf.Version)}
	if mf.Name == "" {
		notes = append(notes, "the manifest has no name: the daemon's logs and `wasmhost handlers` show the file name only")
	}
	switch {
	case c.opts.PluginType == "" && len(mf.PluginTypes) == 1:
		c.typ = mf.PluginTypes[0]
		c.add("manifest", "", notes...)
	case c.opts.PluginType == "":
		c.add("manifest", fmt.Sprintf("the manifest declares %d plugin types %q: say which one to test in Options.PluginType", len(mf.PluginTypes), mf.PluginTypes), notes...)
	case !slices.Contains(mf.PluginTypes, c.opts.PluginType):
		c.add("manifest", fmt.Sprintf("the manifest declares plugin types %q, not %q", mf.PluginTypes, c.opts.PluginType), notes...)
	default:
		c.typ = c.opts.PluginType
		c.add("manifest", "", notes...)
	}
}

func (c *checker) checkGrants(rep *inspect.Report) {
	var problems, notes []string
	for _, capName := range rep.Capabilities {
		for _, t := range rep.Manifest.PluginTypes {
			if !slices.Contains(c.opts.Grants[t], capName) {
				problems = append(problems, fmt.Sprintf("the module imports %s (capability %s), which Options.Grants does not grant to %s: "+
					"the daemon refuses it unless the operator sets handlers.types.%s.capabilities: [%s]",
					strings.Join(abi.CapabilityImports[capName], ", "), capName, t, t, capName))
			}
		}
	}
	for _, t := range rep.Manifest.PluginTypes {
		for _, capName := range c.opts.Grants[t] {
			if !slices.Contains(rep.Capabilities, capName) {
				notes = append(notes, fmt.Sprintf("capability %s is granted to %s but the module does not use it: grant only what a handler imports", capName, t))
			}
		}
	}
	if len(rep.Capabilities) == 0 {
		notes = append(notes, "the module needs no capability")
	} else {
		notes = append(notes, fmt.Sprintf("the module needs capabilities %q", rep.Capabilities))
	}
	c.add("grants", strings.Join(problems, "; "), notes...)
}

// do makes a call and keeps its step.
func (c *checker) do(ctx context.Context, m *sandbox.Module, op harness.Op, p registration.PluginInfo) harness.Step {
	st := c.hs.Do(ctx, m, op, p)
	c.steps = append(c.steps, st)
	return st
}

// expectOK returns the problem of a step that should have succeeded, or "".
func expectOK(what string, st harness.Step) string {
	switch st.Outcome {
	case harness.OK:
		return ""
	case harness.Rejected:
		return what + " rejected the plugin: " + st.Reason
	default:
		return what + " failed: " + st.Reason
	}
}

func (c *checker) dynamic(ctx context.Context, m *sandbox.Module, valid registration.PluginInfo, before map[string][]byte) {
	// validate
	st := c.do(ctx, m, harness.Validate, valid)
	problem := expectOK("Validate", st)
	if problem == "" && !sameStore(before, st.Store) {
		problem = "Validate changed the key-value store (" + storeDiff(before, st.Store) + "): it may read the store, " +
			"but the host may validate a plugin it will not register"
	}
	c.add("validate", problem, stepNotes(st)...)
	if problem != "" {
		c.skip("Validate of the valid plugin failed", dynamicChecks[1:]...)
		return
	}

	// register
	reg := c.do(ctx, m, harness.Register, valid)
	c.add("register", expectOK("Register", reg), stepNotes(reg)...)
	if reg.Outcome != harness.OK {
		c.skip("Register of the valid plugin failed", dynamicChecks[2:]...)
		return
	}

	// register-again, in a fresh module that shares the store
	_ = m.Close(ctx)
	m2, logs, err := c.hs.Load(ctx, c.path)
	if err != nil {
		c.add("register-again", "loading the module again: "+err.Error(), logNotes(logs)...)
		c.skip("the module did not load again", dynamicChecks[3:]...)
		return
	}
	v2 := c.do(ctx, m2, harness.Validate, valid)
	problem = expectOK("Validate of the registered plugin, in a fresh instance,", v2)
	var r2 harness.Step
	if problem == "" {
		r2 = c.do(ctx, m2, harness.Register, valid)
		problem = expectOK("Register of the registered plugin again, in a fresh instance,", r2)
	}
	switch {
	case problem != "":
		problem += ": a registered plugin may be registered again (after a daemon restart, the store may still hold it)"
	case !maps.Equal(reg.Published, r2.Published):
		problem = fmt.Sprintf("Register of the same plugin again, in a fresh instance, published %v; the first time %v: Register must be idempotent", r2.Published, reg.Published)
	case !sameStore(reg.Store, r2.Store):
		problem = "Register of the same plugin again, in a fresh instance, left a different store (" + storeDiff(reg.Store, r2.Store) + "): Register must be idempotent"
	}
	c.add("register-again", problem, append(stepNotes(v2), stepNotes(r2)...)...)
	_ = m2.Close(ctx)

	// deregister, in another fresh module: what it needs must come from the store
	m3, logs, err := c.hs.Load(ctx, c.path)
	if err != nil {
		c.add("deregister", "loading the module again: "+err.Error(), logNotes(logs)...)
		c.skip("the module did not load again", dynamicChecks[4:]...)
		return
	}
	defer m3.Close(ctx)
	dr := c.do(ctx, m3, harness.Deregister, valid)
	problem = expectOK("Deregister, in a fresh instance,", dr)
	if problem == "" && !c.opts.KeepsState && !sameStore(before, dr.Store) {
		problem = "after Deregister, in a fresh instance, the store is not as before Register (" + storeDiff(before, dr.Store) +
			"): Deregister should undo what Register did, finding what it needs in the store, not in memory (set Options.KeepsState if keeping keys is meant)"
	}
	c.add("deregister", problem, stepNotes(dr)...)

	// deregister-unknown
	unknown := valid
	unknown.Name = unknownName
	unknown.Socket = "/run/wasmhost-conformance/" + unknownName + "-reg.sock"
	unknown.Endpoint = unknown.Socket
	pre := c.hs.Host().Store(c.typ)
	du := c.do(ctx, m3, harness.Deregister, unknown)
	problem = expectOK("Deregister of a plugin that was never registered", du)
	if problem != "" {
		problem += ": a handler must cope with a plugin it has no record of (the host does not retry Deregister)"
	} else if !sameStore(pre, du.Store) {
		problem = "Deregister of a plugin that was never registered changed the store (" + storeDiff(pre, du.Store) + ")"
	}
	c.add("deregister-unknown", problem, stepNotes(du)...)
}

// reject checks that Validate refuses p with a reason.
func (c *checker) reject(ctx context.Context, p registration.PluginInfo) {
	name := "reject/" + p.Name
	m, logs, err := c.hs.Load(ctx, c.path)
	if err != nil {
		c.add(name, "loading the module: "+err.Error(), logNotes(logs)...)
		return
	}
	defer m.Close(ctx)
	pre := c.hs.Host().Store(c.typ)
	st := c.do(ctx, m, harness.Validate, p)
	problem := ""
	switch {
	case st.Outcome == harness.OK:
		problem = fmt.Sprintf("Validate accepted plugin %q (versions %q), which it must refuse", p.Name, p.Versions)
	case st.Outcome == harness.Failed:
		problem = "Validate failed instead of refusing the plugin (return guest.Reject(reason), abi.StatusRejected, not an error, which the host retries): " + st.Reason
	case strings.TrimSpace(st.Reason) == "" || st.Reason == "(no reason given)":
		problem = "Validate refused the plugin without a reason: set one with result_set (guest.Reject(reason)); it is what the plugin is told"
	case !sameStore(pre, st.Store):
		problem = "Validate changed the store (" + storeDiff(pre, st.Store) + ")"
	}
	c.add(name, problem, stepNotes(st)...)
}

// checkSteps checks every call made for time and traps.
func (c *checker) checkSteps() {
	if len(c.steps) == 0 {
		c.skip("no call was made", "deadline", "no-traps")
		return
	}
	limit := c.timeout / 4
	var slow, traps, notes []string
	var longest time.Duration
	for _, st := range c.steps {
		longest = max(longest, st.Duration)
		if st.Duration > limit || st.TimedOut {
			slow = append(slow, fmt.Sprintf("%s took %v", st.Op, st.Duration.Round(time.Microsecond)))
		}
		if st.Trapped {
			traps = append(traps, fmt.Sprintf("%s trapped: %s", st.Op, st.Reason))
		}
	}
	notes = append(notes, fmt.Sprintf("%d calls, the longest %v (deadline %v)", len(c.steps), longest.Round(time.Microsecond), c.timeout))
	problem := ""
	if len(slow) > 0 {
		problem = "calls over a quarter of the deadline (" + limit.String() + "): " + strings.Join(slow, "; ")
	}
	c.add("deadline", problem, notes...)
	problem = ""
	if len(traps) > 0 {
		problem = strings.Join(traps, "; ") + " (a trap throws the instance away: recover panics, stay within the memory limit)"
	}
	c.add("no-traps", problem)
}

func sameStore(a, b map[string][]byte) bool {
	return maps.EqualFunc(a, b, bytes.Equal)
}

// storeDiff says how store b differs from a.
func storeDiff(a, b map[string][]byte) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(b)) {
		old, ok := a[k]
		switch {
		case !ok:
			parts = append(parts, "added "+strconv.Quote(k))
		case !bytes.Equal(old, b[k]):
			parts = append(parts, "changed "+strconv.Quote(k))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(a)) {
		if _, ok := b[k]; !ok {
			parts = append(parts, "removed "+strconv.Quote(k))
		}
	}
	return strings.Join(parts, ", ")
}

// stepNotes describes a call for the test log.
func stepNotes(st harness.Step) []string {
	if st.Op == "" {
		return nil
	}
	s := fmt.Sprintf("%s: %s in %v", st.Op, st.Outcome, st.Duration.Round(time.Microsecond))
	if st.Reason != "" {
		s += ": " + st.Reason
	}
	notes := []string{s}
	if len(st.Published) > 0 {
		notes = append(notes, fmt.Sprintf("  published %v", st.Published))
	}
	for _, pc := range st.PluginCalls {
		n := fmt.Sprintf("  plugin_call %s on %s: %d bytes", pc.Method, pc.Endpoint, pc.ResponseBytes)
		if pc.Error != "" {
			n = fmt.Sprintf("  plugin_call %s on %s: %s", pc.Method, pc.Endpoint, pc.Error)
		}
		notes = append(notes, n)
	}
	for _, l := range st.Logs {
		notes = append(notes, "  "+l.String())
	}
	return notes
}

func logNotes(logs []harness.LogLine) []string {
	out := make([]string, len(logs))
	for i, l := range logs {
		out[i] = "  " + l.String()
	}
	return out
}
