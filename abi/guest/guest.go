// Package guest is the Go SDK for writing wasmhost handlers: WebAssembly modules that validate,
// register and deregister the plugins of one or more plugin types. It implements the exports of
// ABI v1 (see abi/README.md) and wraps its host functions, so a handler is a plain Go type:
//
//	package main
//
//	import "github.com/wasmhost/wasmhost/abi/guest"
//
//	type handler struct{}
//
//	func (handler) Validate(p guest.Plugin) error   { return nil }
//	func (handler) Register(p guest.Plugin) error   { return guest.Publish("endpoint", p.Endpoint) }
//	func (handler) Deregister(p guest.Plugin) error { return nil }
//
//	func init() {
//		guest.Handle(guest.Manifest{PluginTypes: []string{"example.wasmhost.dev"}}, handler{})
//	}
//
//	func main() {}
//
// Build it as a WASI reactor:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -ldflags='-s -w' -o handler.wasm .
//
// The host pools instances of a module and throws one away after any trap or timeout, so a
// handler must keep no state in Go variables from one call to the next: use KV.
//
// The host functions a module imports are its declaration of what it needs. This package imports
// only what a handler uses (the Go linker drops the rest); calling plugins back needs a grant
// and lives in the subpackage plugincall.
//
// In a native (non-wasip1) build the host functions are backed by an in-memory fake (see Fake
// and FakeHost), which makes the daemon's calls to the handler and answers its host functions
// as the daemon does, so that a handler's logic can be unit tested with go test.
package guest

import (
	"errors"
	"unicode/utf8"

	"github.com/wasmhost/wasmhost/abi"
)

// Plugin is the plugin a call is about, as the plugin described itself in GetInfo.
// Its fields are Socket (the registration socket path), Type (the plugin type), Name, Endpoint
// (the socket the plugin serves its own API on; the registration socket when it gave none) and
// Versions (the versions it supports, as it sent them).
type Plugin = abi.PluginRequest

// Manifest describes a handler module: the plugin types it handles (at least one), and an
// optional name and version of its own, shown in the host's logs.
type Manifest = abi.Manifest

// Handler is implemented by a handler module and passed to Handle. Each method is one call from
// the host: Validate before Register, Deregister for a plugin that was registered. Return nil to
// accept, Reject(reason) to refuse the plugin (it is told the reason; the host asks again only
// when the handler, the socket or a plugin of the same type and name changes, or at a slow
// re-check), or any other error for a failure of the handler's own (the host retries later
// with backoff, and says the handler failed).
type Handler interface {
	Validate(p Plugin) error
	Register(p Plugin) error
	Deregister(p Plugin) error
}

// Level is the level of a log line.
type Level = abi.LogLevel

// Log levels, mapped by the host onto its own log levels.
const (
	LevelDebug = abi.LogDebug
	LevelInfo  = abi.LogInfo
	LevelWarn  = abi.LogWarn
	LevelError = abi.LogError
)

// Errors returned by the SDK's host function wrappers. They are wrapped with the name of the
// host function and the key, so test them with errors.Is.
var (
	// ErrTooLarge: a key, value or result is over its limit (see the Max constants in abi).
	ErrTooLarge = errors.New("guest: too large")
	// ErrDenied: the host function is not allowed in this call (Publish outside Register), or
	// the capability was not granted.
	ErrDenied = errors.New("guest: denied")
	// ErrFailed: the host tried and failed (a plugin call).
	ErrFailed = errors.New("guest: failed")
	// ErrBadRequest: an argument is malformed, such as an empty key.
	ErrBadRequest = errors.New("guest: bad request")
	// ErrUnknownCode: the host returned a code this SDK does not know.
	ErrUnknownCode = errors.New("guest: unknown host code")
)

// CodeError maps a negative code returned by a host function to the SDK's error for it.
// Non-negative values are not errors and map to nil. It is exported for the subpackages of
// guest; handlers do not need it.
func CodeError(code int32) error {
	switch {
	case code >= 0:
		return nil
	case code == abi.CodeTooLarge:
		return ErrTooLarge
	case code == abi.CodeDenied:
		return ErrDenied
	case code == abi.CodeFailed:
		return ErrFailed
	case code == abi.CodeBadRequest:
		return ErrBadRequest
	}
	return ErrUnknownCode
}

// callError names the host function and key that a code came back for, and the host's reason
// when it gave one.
type callError struct {
	fn, key string
	err     error
	reason  string
}

func (e *callError) Error() string {
	s := "guest: " + e.fn
	if e.key != "" {
		s += " " + e.key
	}
	s += ": " + e.err.Error()
	if e.reason != "" {
		s += ": " + e.reason
	}
	return s
}

func (e *callError) Unwrap() error { return e.err }

func codeErr(fn, key string, code int32) error {
	err := CodeError(code)
	if err == nil {
		return nil
	}
	return &callError{fn: fn, key: key, err: err, reason: hostReason(code)}
}

// hostReason is the host's reason for a host function's code, for the codes a host gives one
// with (CodeTooLarge over a budget, CodeFailed), or "". The reason error_read returns is the last
// one of the call: after any other code it could be an earlier failure's, and would mislead.
func hostReason(code int32) string {
	switch code {
	case abi.CodeTooLarge, abi.CodeFailed:
		return ErrorReason()
	case abi.CodeDenied:
		return deniedReason()
	}
	return ""
}

// ErrorReason returns the host's reason for the last host function that failed in the current
// call (the host function error_read), or "" when it gave none. The SDK's errors carry it
// already where a host gives one (ErrTooLarge over a budget, ErrFailed); it is exported for the
// subpackages of guest, and handlers do not need it.
func ErrorReason() string {
	n := hostErrorRead(nil)
	if n <= 0 {
		return ""
	}
	buf := make([]byte, n)
	m := hostErrorRead(buf)
	if m <= 0 || int(m) > len(buf) {
		return ""
	}
	return string(buf[:m])
}

// RejectError is the error returned by Reject. A handler method whose error is (or wraps) a
// *RejectError refuses the plugin (abi.StatusRejected) instead of failing (abi.StatusError).
type RejectError struct {
	Reason string
}

func (e *RejectError) Error() string {
	if e.Reason == "" {
		return "rejected"
	}
	return e.Reason
}

// Reject returns an error that refuses the plugin with the reason given. The reason is sent to
// the plugin; the host asks again only when something that could change the answer changes (a
// new revision of the handler, a new socket, a plugin of the same type and name going away),
// and otherwise at a slow re-check (5 minutes by default).
func Reject(reason string) error { return &RejectError{Reason: reason} }

// errNotHandled is manifestErr until Handle is called.
var errNotHandled = errors.New("guest: Handle was not called (call it from an init function)")

// The handler and manifest given to Handle, or why there are none.
var (
	handler     Handler
	manifest    Manifest
	manifestErr = errNotHandled
)

// Handle sets the module's manifest and handler. Call it once, from an init function of package
// main: the host reads the manifest right after the module is initialized. A manifest with no
// plugin type, a nil handler or a second call make the module fail to load, with a reason that
// says so.
func Handle(m Manifest, h Handler) {
	switch {
	case handler != nil:
		manifestErr = errors.New("guest: Handle called more than once")
	case h == nil:
		manifestErr = errors.New("guest: Handle called with a nil Handler")
	case len(m.PluginTypes) == 0:
		manifestErr = errors.New("guest: the Manifest names no plugin type")
	default:
		handler, manifest, manifestErr = h, m, nil
	}
}

// op is one of the handler exports.
type op int

const (
	opValidate op = iota
	opRegister
	opDeregister
)

// encodeManifest returns the status and result of the manifest export.
func encodeManifest() (int32, []byte) {
	if manifestErr != nil {
		return abi.StatusError, []byte(manifestErr.Error())
	}
	b := abi.AppendManifest(nil, manifest)
	if len(b) > abi.MaxResultBytes {
		return abi.StatusError, []byte("guest: the encoded Manifest is over abi.MaxResultBytes")
	}
	return abi.StatusOK, b
}

// dispatch decodes an encoded PluginRequest and calls the handler; it returns the status of the
// export and, when it is not StatusOK, the reason. A panic in the handler is recovered and
// reported as StatusError.
func dispatch(o op, req []byte) (status int32, reason string) {
	if handler == nil {
		return abi.StatusError, manifestErr.Error()
	}
	p, err := abi.DecodePluginRequest(req)
	if err != nil {
		return abi.StatusError, "guest: decoding the request: " + err.Error()
	}
	defer func() {
		if r := recover(); r != nil {
			if end, ok := r.(*callEnd); ok {
				panic(end) // the host ends the call: not the handler's panic
			}
			status, reason = abi.StatusError, "guest: handler panicked: "+panicString(r)
		}
	}()
	switch o {
	case opValidate:
		err = handler.Validate(p)
	case opRegister:
		err = handler.Register(p)
	case opDeregister:
		err = handler.Deregister(p)
	}
	return outcome(err)
}

// callEnd is the panic value with which the native fake host ends a call that went over one of
// the daemon's budgets, as the daemon ends it (a WebAssembly call never sees one: the daemon
// stops the instance). dispatch lets it through to the fake.
type callEnd struct{ err string }

// outcome maps a handler's error to a status and reason.
func outcome(err error) (int32, string) {
	if err == nil {
		return abi.StatusOK, ""
	}
	var rej *RejectError
	if errors.As(err, &rej) {
		return abi.StatusRejected, truncate(err.Error(), abi.MaxResultBytes)
	}
	return abi.StatusError, truncate(err.Error(), abi.MaxResultBytes)
}

func panicString(r any) string {
	switch v := r.(type) {
	case error:
		return v.Error()
	case string:
		return v
	}
	return "a value that is neither a string nor an error"
}

// truncate cuts s to at most n bytes without splitting a UTF-8 sequence.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
