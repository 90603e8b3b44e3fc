//go:build !wasip1

package guest

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"unicode/utf8"

	"github.com/wasmhost/wasmhost/abi"
)

// The limits the fake host enforces besides the ABI's (package abi): the defaults of the
// daemon's handlers.limits, which `wasmhost config defaults` prints. TestFakeLimits
// (internal/abitest) compares them with the daemon's.
const (
	// FakeKVKeysPerHandler and FakeKVBytesPerHandler: the keys, and the bytes of their keys and
	// values, that the stores of all a handler's plugin types hold together
	// (handlers.limits.kvKeysPerHandler, kvBytesPerHandler).
	FakeKVKeysPerHandler  = 16384
	FakeKVBytesPerHandler = 16 << 20
	// FakeLogLinesPerCall and FakeLogBytesPerCall: the lines, and the bytes of their messages,
	// that one call may log (handlers.limits.logLinesPerCall, logBytesPerCall).
	FakeLogLinesPerCall = 1000
	FakeLogBytesPerCall = 64 << 10
	// FakePublishKeys and FakePublishBytes: the keys, and the bytes of their keys and values,
	// that one register call may publish (handlers.limits.publishKeys, publishBytes).
	FakePublishKeys  = 64
	FakePublishBytes = 64 << 10
	// FakePluginCallsPerCall and FakePluginCallResponseSize: the plugin calls one call may make,
	// and the largest response (handlers.limits.pluginCallsPerCall, pluginCallResponseSize).
	FakePluginCallsPerCall     = 16
	FakePluginCallResponseSize = 1 << 20
)

// FakeHandlerFile is the handler file the fake's reasons name, where the daemon names the
// handler's file.
const FakeHandlerFile = "handler.wasm"

// FakeHost is the in-memory host that backs the SDK in a native (non-wasip1) build, so that a
// handler can be unit tested with go test. It makes the daemon's calls to the handler given to
// Handle (Validate, Register, Deregister: the plugin encoded as the daemon encodes it and
// decoded by the SDK) and answers its host functions as the daemon does, with the daemon's
// codes and reasons:
//
//   - a key-value store per plugin type: KV reaches the store of the type of the call's plugin,
//     and a handler serving two types never sees one type's keys in a call for the other;
//   - the ABI's limits (package abi) and the daemon's default handlers.limits (the Fake
//     constants): a new key in a full store (abi.MaxKVEntries), or past FakeKVKeysPerHandler
//     or FakeKVBytesPerHandler over all the types' stores together, or a register call
//     publishing past FakePublishKeys or FakePublishBytes, fails with ErrTooLarge and the
//     daemon's reason;
//   - a call that logs more than FakeLogLinesPerCall lines or FakeLogBytesPerCall bytes, or
//     makes more than FakePluginCallsPerCall plugin calls, is ended there, as the daemon ends
//     it: the call returns the daemon's error, even if the handler recovers from it;
//   - Publish only in Register, and the published keys kept only when Register succeeds;
//   - no host function but Log outside a call: the handler's methods called directly (not
//     through the FakeHost) find their host functions denied.
//
// It does not pool instances, time calls, record the handler's standard output or sandbox
// anything: run the built module through `wasmhost handler test` and `wasmhost handler
// conformance` for that. A daemon configured with other limits is not in the fake either.
//
// There is one FakeHost per process (Fake), and it makes one call at a time: tests that use it
// must not run in parallel. guesttest.Fake empties it before and after a test.
type FakeHost struct {
	calls sync.Mutex // held through a call

	mu              sync.Mutex // guards what follows
	stores          map[string]map[string][]byte
	kvKeys, kvBytes int // in every store: the handler's quotas
	published       map[string]string
	logs            []string
	pluginCall      func(method string, req []byte) ([]byte, error)
	c               *fakeCall // the call in progress, or nil
}

// fakeCall is the state of the call in progress.
type fakeCall struct {
	op                  op
	plugin              Plugin
	req                 []byte
	pending             map[string]string // published in a register call
	pendingBytes        int
	reason              string // what error_read returns
	logLines, logBytes  int
	pluginCalls         int
	over                *callEnd // the budget the call went over: it ended there
	lastMethod, lastReq string   // the last plugin call that succeeded, and its answer: the
	lastResp            []byte   // SDK asks again with a larger buffer, and that is the same call
	lastOK              bool
}

var fake = &FakeHost{}

// Fake returns the process's FakeHost. It exists only in native builds.
func Fake() *FakeHost { return fake }

// Validate makes the daemon's validate call for p, to the handler given to Handle: nil when it
// accepts the plugin, a *RejectError with the reason when it refuses it, or an error whose
// message is the reason when it fails (the daemon's error when the call went over a budget).
// A plugin of a type the handler's Manifest does not name, or no Handle call, is an error of
// the test that says so: the daemon would not call the handler.
func (f *FakeHost) Validate(p Plugin) error { return f.call(opValidate, p) }

// Register makes the daemon's register call for p, as Validate does. What it publishes is
// kept (Published) only when it returns nil.
func (f *FakeHost) Register(p Plugin) error { return f.call(opRegister, p) }

// Deregister makes the daemon's deregister call for p, as Validate does.
func (f *FakeHost) Deregister(p Plugin) error { return f.call(opDeregister, p) }

var exportNames = [...]string{opValidate: abi.ExportValidate, opRegister: abi.ExportRegister, opDeregister: abi.ExportDeregister}

// failure is the error of a call the handler failed: its message is the reason.
type failure struct{ reason string }

func (e *failure) Error() string { return e.reason }

const noReason = "(no reason given)" // the daemon's, for an empty reason

func (f *FakeHost) call(o op, p Plugin) error {
	what := "guest: FakeHost." + [...]string{"Validate", "Register", "Deregister"}[o]
	switch {
	case manifestErr != nil:
		return errors.New(what + ": " + manifestErr.Error())
	case !slices.Contains(manifest.PluginTypes, p.Type):
		return fmt.Errorf("%s: plugin %q is of type %q, and the handler's Manifest names %q: the daemon calls a handler only for the types it names",
			what, p.Name, p.Type, manifest.PluginTypes)
	}
	f.calls.Lock()
	defer f.calls.Unlock()
	c := &fakeCall{op: o, plugin: p, req: abi.AppendPluginRequest(nil, p)}
	if o == opRegister {
		c.pending = map[string]string{}
	}
	f.mu.Lock()
	f.c = c
	f.mu.Unlock()
	status, reason := f.dispatch(o, c.req)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.c = nil
	if c.over != nil {
		status, reason = abi.StatusError, c.over.err
	}
	if o == opRegister {
		f.published = nil
		if status == abi.StatusOK {
			f.published = c.pending
		}
	}
	if reason == "" {
		reason = noReason
	}
	switch status {
	case abi.StatusOK:
		return nil
	case abi.StatusRejected:
		return &RejectError{Reason: reason}
	}
	return &failure{reason: reason}
}

// dispatch is the export call: a call the fake ended over a budget returns (the outcome is the
// budget's), and any other panic goes on to the test.
func (f *FakeHost) dispatch(o op, req []byte) (status int32, reason string) {
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(*callEnd); !ok {
				panic(r)
			}
		}
	}()
	return dispatch(o, req)
}

// end ends the call in progress (f.mu held, and unlocked here) as the daemon ends a call over a
// budget of handlers.limits (key): with its error, which the call returns.
func (f *FakeHost) end(did string, limit int, key string) {
	c := f.c
	if c.over == nil {
		what := FakeHandlerFile + " " + exportNames[c.op]
		if c.plugin.Name != "" {
			what += fmt.Sprintf(" for plugin %q", c.plugin.Name)
		}
		c.over = &callEnd{err: fmt.Sprintf("host: budget exceeded: %s %s in one call (the limit is %d, handlers.limits.%s)", what, did, limit, key)}
	}
	f.mu.Unlock()
	panic(c.over)
}

// lock locks f.mu and returns the call in progress, or nil; a call that went over a budget
// has ended, and its host functions end it again (a handler that recovered from the end).
func (f *FakeHost) lock() *fakeCall {
	f.mu.Lock()
	if c := f.c; c != nil && c.over != nil {
		f.mu.Unlock()
		panic(c.over)
	}
	return f.c
}

// Reset empties the stores, the published keys and the log, and removes the plugin call
// function.
func (f *FakeHost) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stores, f.kvKeys, f.kvBytes = nil, 0, 0
	f.published, f.logs, f.pluginCall = nil, nil, nil
}

// KV returns a copy of the store of pluginType (empty when no call of that type set a key).
func (f *FakeHost) KV(pluginType string) map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := make(map[string]string, len(f.stores[pluginType]))
	for k, v := range f.stores[pluginType] {
		m[k] = string(v)
	}
	return m
}

// SetKV sets key to value in the store of pluginType, as an earlier call (of another instance,
// before a restart) would have. It is not checked against the limits, but counts in the
// quotas of the calls after it.
func (f *FakeHost) SetKV(pluginType, key string, value []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.put(pluginType, key, value)
}

// Published returns a copy of the keys published by the last Register: none when it failed or
// refused the plugin.
func (f *FakeHost) Published() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.published == nil {
		return map[string]string{}
	}
	return maps.Clone(f.published)
}

// Logs returns the lines logged so far, each prefixed with its level ("INFO registered").
func (f *FakeHost) Logs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.logs)
}

// SetPluginCall grants plugin calls (package plugincall), answered by fn: the encoded response,
// or an error whose message is the reason of a failed call (ErrFailed). Without it, plugin calls
// fail with ErrDenied, as under a daemon that did not grant the capability. fn is called
// without the fake's lock held: it may look at the FakeHost.
func (f *FakeHost) SetPluginCall(fn func(method string, req []byte) ([]byte, error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pluginCall = fn
}

// CallPlugin is the fake's host function plugin_call, for package plugincall in native builds:
// it copies what fits of the response into resp and returns the response's full length, or a
// negative abi code (its reason, if any, is ErrorReason's), as the daemon does. A call again
// with the same method and request, after a response that did not fit, is answered with the
// same response without calling the function set with SetPluginCall again; it counts as a
// plugin call, as in the daemon.
func (f *FakeHost) CallPlugin(method string, req, resp []byte) int32 {
	c := f.lock()
	switch {
	case c == nil || f.pluginCall == nil:
		f.mu.Unlock()
		return abi.CodeDenied
	case method == "" || !utf8.ValidString(method):
		f.mu.Unlock()
		return abi.CodeBadRequest
	case len(req) > abi.MaxRequestBytes:
		f.mu.Unlock()
		return abi.CodeTooLarge
	case c.plugin.Endpoint == "":
		c.reason = "the plugin has no endpoint"
		f.mu.Unlock()
		return abi.CodeFailed
	}
	if c.pluginCalls++; c.pluginCalls > FakePluginCallsPerCall {
		f.end(fmt.Sprintf("made more than %d plugin_call calls", FakePluginCallsPerCall), FakePluginCallsPerCall, "pluginCallsPerCall")
	}
	out, again := c.lastResp, c.lastOK && c.lastMethod == method && c.lastReq == string(req)
	fn := f.pluginCall
	f.mu.Unlock()
	var err error
	if !again {
		out, err = fn(method, slices.Clone(req))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c.lastOK = false
	switch {
	case err != nil:
		c.reason = err.Error()
		return abi.CodeFailed
	case len(out) > FakePluginCallResponseSize:
		c.reason = fmt.Sprintf("response of %d bytes over the limit of %d (handlers.limits.pluginCallResponseSize)", len(out), FakePluginCallResponseSize)
		return abi.CodeTooLarge
	}
	c.lastMethod, c.lastReq, c.lastResp, c.lastOK = method, string(req), out, true
	copy(resp, out)
	return int32(len(out))
}

// The host functions the SDK calls in a native build.

func hostErrorRead(buf []byte) int32 {
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if fake.c == nil {
		return 0
	}
	copy(buf, fake.c.reason)
	return int32(len(fake.c.reason))
}

// deniedReason says why a host function was denied outside a call, which in a native test
// means the handler was called directly rather than through the FakeHost.
func deniedReason() string {
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if fake.c != nil {
		return ""
	}
	return "no call in progress: the fake host answers a handler's host functions in the calls it makes (guest.Fake().Validate, Register, Deregister)"
}

func levelName(level int32) string {
	switch {
	case level <= int32(abi.LogDebug):
		return "DEBUG"
	case level == int32(abi.LogInfo):
		return "INFO"
	case level == int32(abi.LogWarn):
		return "WARN"
	}
	return "ERROR"
}

func hostLog(level int32, msg string) {
	msg = truncate(msg, abi.MaxLogLineBytes)
	// A line past the call's budget is dropped, and the call ends, as in the daemon.
	if c := fake.lock(); c != nil {
		c.logLines++
		c.logBytes += len(msg)
		switch {
		case c.logLines > FakeLogLinesPerCall:
			fake.end(fmt.Sprintf("logged more than %d lines", FakeLogLinesPerCall), FakeLogLinesPerCall, "logLinesPerCall")
		case c.logBytes > FakeLogBytesPerCall:
			fake.end(fmt.Sprintf("logged more than %d bytes", FakeLogBytesPerCall), FakeLogBytesPerCall, "logBytesPerCall")
		}
	}
	defer fake.mu.Unlock()
	fake.logs = append(fake.logs, levelName(level)+" "+msg)
}

func checkKey(key string) int32 {
	switch {
	case key == "":
		return abi.CodeBadRequest
	case len(key) > abi.MaxKeyBytes:
		return abi.CodeTooLarge
	}
	return abi.StatusOK
}

func hostPublish(key, value string) int32 {
	c := fake.lock()
	defer fake.mu.Unlock()
	switch {
	case c == nil || c.pending == nil:
		return abi.CodeDenied
	case key == "":
		return abi.CodeBadRequest
	case len(key) > abi.MaxKeyBytes || len(value) > abi.MaxValueBytes:
		return abi.CodeTooLarge
	}
	old, ok := c.pending[key]
	size := c.pendingBytes + len(value) - len(old)
	if !ok {
		size += len(key)
	}
	switch {
	case !ok && len(c.pending) >= FakePublishKeys:
		c.reason = fmt.Sprintf("%d keys published, the most in one call (handlers.limits.publishKeys)", len(c.pending))
		return abi.CodeTooLarge
	case size > FakePublishBytes:
		c.reason = fmt.Sprintf("%d bytes published would go over %d (handlers.limits.publishBytes)", size, FakePublishBytes)
		return abi.CodeTooLarge
	}
	c.pending[key] = value
	c.pendingBytes = size
	return abi.StatusOK
}

// kvLock locks the fake for a kv host function: the call in progress, or the code to return.
func kvLock(key string) (*fakeCall, int32) {
	c := fake.lock()
	code := checkKey(key)
	if c == nil {
		code = abi.CodeDenied
	}
	return c, code
}

func hostKVGet(key string, buf []byte) int32 {
	c, code := kvLock(key)
	defer fake.mu.Unlock()
	if code != abi.StatusOK {
		return code
	}
	v, ok := fake.stores[c.plugin.Type][key]
	if !ok {
		return abi.CodeNotFound
	}
	copy(buf, v)
	return int32(len(v))
}

func hostKVSet(key string, value []byte) int32 {
	c, code := kvLock(key)
	defer fake.mu.Unlock()
	switch {
	case code != abi.StatusOK:
		return code
	case len(value) > abi.MaxValueBytes:
		return abi.CodeTooLarge
	}
	return fake.set(c, key, value)
}

func hostKVDelete(key string) int32 {
	c, code := kvLock(key)
	defer fake.mu.Unlock()
	if code != abi.StatusOK {
		return code
	}
	fake.remove(c.plugin.Type, key)
	return abi.StatusOK
}

func hostKVCompareAndSet(key string, old, value []byte) int32 {
	c, code := kvLock(key)
	defer fake.mu.Unlock()
	switch {
	case code != abi.StatusOK:
		return code
	case len(old) > abi.MaxValueBytes || len(value) > abi.MaxValueBytes:
		return abi.CodeTooLarge
	}
	cur, ok := fake.stores[c.plugin.Type][key]
	if ok != (old != nil) || !bytes.Equal(cur, old) {
		return abi.CodeConflict
	}
	if value == nil {
		fake.remove(c.plugin.Type, key)
		return abi.StatusOK
	}
	return fake.set(c, key, value)
}

// set stores value under key in the store of the call's plugin type, as the daemon's store
// does: CodeTooLarge, with the daemon's reason, when the key is new in a full store or the
// handler's quotas would go over.
func (f *FakeHost) set(c *fakeCall, key string, value []byte) int32 {
	store := f.stores[c.plugin.Type]
	old, exists := store[key]
	if !exists && len(store) >= abi.MaxKVEntries {
		c.reason = fmt.Sprintf("the store of this plugin type has %d keys, the most (abi.MaxKVEntries)", abi.MaxKVEntries)
		return abi.CodeTooLarge
	}
	dKeys, dBytes := 0, len(value)-len(old)
	if !exists {
		dKeys, dBytes = 1, len(key)+len(value)
	}
	switch {
	case dKeys > 0 && f.kvKeys+dKeys > FakeKVKeysPerHandler:
		c.reason = fmt.Sprintf("handler %s holds %d keys in its stores, the most (handlers.limits.kvKeysPerHandler)", FakeHandlerFile, f.kvKeys)
		return abi.CodeTooLarge
	case dBytes > 0 && f.kvBytes+dBytes > FakeKVBytesPerHandler:
		c.reason = fmt.Sprintf("handler %s holds %d bytes in its stores; %d more would go over %d (handlers.limits.kvBytesPerHandler)",
			FakeHandlerFile, f.kvBytes, dBytes, FakeKVBytesPerHandler)
		return abi.CodeTooLarge
	}
	f.put(c.plugin.Type, key, value)
	return abi.StatusOK
}

// put sets key in the store of pluginType, counting it in the handler's quotas.
func (f *FakeHost) put(pluginType, key string, value []byte) {
	if f.stores == nil {
		f.stores = map[string]map[string][]byte{}
	}
	store := f.stores[pluginType]
	if store == nil {
		store = map[string][]byte{}
		f.stores[pluginType] = store
	}
	old, exists := store[key]
	if exists {
		f.kvBytes += len(value) - len(old)
	} else {
		f.kvKeys++
		f.kvBytes += len(key) + len(value)
	}
	store[key] = bytes.Clone(value)
	if store[key] == nil {
		store[key] = []byte{} // present, empty
	}
}

// remove deletes key from the store of pluginType, giving its room back to the quotas.
func (f *FakeHost) remove(pluginType, key string) {
	old, ok := f.stores[pluginType][key]
	if !ok {
		return
	}
	delete(f.stores[pluginType], key)
	f.kvKeys--
	f.kvBytes -= len(key) + len(old)
}
